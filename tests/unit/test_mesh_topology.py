"""Topology model: elements and ECMP paths from a site file and from the synthetic fat-tree."""

from dataclasses import replace

import numpy as np
import pytest

from fleetctl.config.site import parse_site
from fleetctl.errors import ConfigError, UsageError
from fleetctl.model.fabric import Topology
from tests.support.fabrics import ecmp_path, fat_tree, find, leaf_spine, path_table

SITE = """
[cluster]
name = "mini"

[[node_classes]]
name = "gpu"
nodes = "node[1-4]"
nics = [{name = "eth0"}, {name = "eth1"}]

[[fabric.switches]]
id = "spine1"
tier = 2
[[fabric.switches]]
id = "spine2"
tier = 2
[[fabric.switches]]
id = "leaf1"
tier = 1
[[fabric.switches]]
id = "leaf2"
tier = 1

[[fabric.links]]
a = "leaf1"
b = "spine1"
[[fabric.links]]
a = "leaf1"
b = "spine2"
[[fabric.links]]
a = "leaf2"
b = "spine1"
[[fabric.links]]
a = "leaf2"
b = "spine2"
"""


def site_text():
    extra = []
    for n in range(1, 5):
        leaf = "leaf1" if n <= 2 else "leaf2"
        for e in range(2):
            extra.append(f'[[fabric.links]]\na = "node{n}:eth{e}"\nb = "{leaf}:swp{2 * n + e}"\n')
    return SITE + "\n".join(extra)


@pytest.fixture
def site_topo():
    return Topology.from_site(parse_site(site_text()))


def test_from_site_elements(site_topo):
    t = site_topo
    types = [e.type for e in t.elements]
    assert types.count("switch") == 4
    assert types.count("nic") == 8
    assert types.count("host") == 4
    assert types.count("link") == 2 * (4 + 8)  # every link in both directions
    el = t.elements[find(t, "leaf1->spine2")]
    assert el.to_dict() == {"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2"}
    assert t.elements[find(t, "node3:eth1")].type == "nic"
    assert t.link_ports["node3:eth1--leaf2"] == ("node3:eth1", "leaf2:swp7")


def test_ecmp_path_is_ordered_and_connected(site_topo):
    t = site_topo
    p = [t.elements[i] for i in ecmp_path(t, "node1:eth0", "node4:eth1", flow=7)]
    assert [e.type for e in p] == ["nic", "link", "switch", "link", "switch", "link", "switch",
                                   "link", "nic"]
    assert p[0].id == "node1:eth0" and p[-1].id == "node4:eth1"
    assert p[1].direction == "node1:eth0->leaf1" and p[-2].direction == "leaf2->node4:eth1"
    # each link direction leaves the element before it and enters the one after it
    for i in range(1, len(p) - 1, 2):
        a, b = p[i].direction.split("->")
        assert a == p[i - 1].id and b == p[i + 1].id


def test_ecmp_flows_spread_over_spines(site_topo):
    spines = {site_topo.elements[ecmp_path(site_topo, "node1:eth0", "node3:eth0", f)[4]].id
              for f in range(32)}
    assert spines == {"spine1", "spine2"}


def test_same_leaf_path_stays_on_the_leaf(site_topo):
    p = [site_topo.elements[i].label for i in ecmp_path(site_topo, "node1:eth0", "node2:eth1", 0)]
    assert p == ["node1:eth0", "node1:eth0->leaf1", "leaf1", "leaf1->node2:eth1", "node2:eth1"]


def test_expected_row_splits_over_candidates(site_topo):
    t = site_topo
    elems, w = t.expected_row("node1:eth0", "node3:eth0")
    got = {t.elements[e].label: x for e, x in zip(elems, w)}
    assert got["leaf1->spine1"] == pytest.approx(0.5)
    assert got["spine2->leaf2"] == pytest.approx(0.5)
    assert got["leaf1"] == got["leaf2"] == got["node1:eth0->leaf1"] == 1.0
    table = path_table(t, [("node1:eth0", "node3:eth0", 0)], traced=False)
    assert not table.traced[0] and table.matrix(t.n_elements).sum() == pytest.approx(sum(w))


def test_fat_tree_size():
    t = fat_tree(24)
    assert len(t.links) == 3 * 24 ** 3 // 4 == 10368
    assert len(t.nics) == 3456
    assert sum(1 for tier in t.switch_tier.values() if tier == 3) == 144
    p = [t.elements[i] for i in ecmp_path(t, "n00000:eth0", "n03455:eth0", 3)]
    assert [e.type for e in p].count("switch") == 5  # leaf, agg, core, agg, leaf


def test_fat_tree_rejects_odd_k():
    with pytest.raises(UsageError, match="even"):
        fat_tree(5)


def test_unknown_and_unroutable_elements():
    t = leaf_spine(2, 1, 1, 1)
    with pytest.raises(ConfigError, match="no element 'nope'"):
        find(t, "nope")
    with pytest.raises(ConfigError, match="neither a switch nor a NIC"):
        Topology.build("bad", [("n1:eth0", "n1")], {"leaf1": 1}, [("x", "n1:eth0", "ghost")])
    lonely = Topology.build("lonely", [("n1:eth0", "n1"), ("n2:eth0", "n2")],
                            {"leaf1": 1, "leaf2": 1},
                            [("a", "n1:eth0", "leaf1"), ("b", "n2:eth0", "leaf2")])
    with pytest.raises(ConfigError, match="no route"):
        ecmp_path(lonely, "n1:eth0", "n2:eth0", 0)
    with pytest.raises(ConfigError, match="no link to a switch"):
        ecmp_path(Topology.build("x", [("n1:eth0", "n1")], {"leaf1": 1}, []), "n1:eth0", "n1:eth0", 0)


def test_path_table_csr_roundtrip():
    t = leaf_spine(2, 2, 1, 1)
    flows = [(a, b, f) for a in t.nics for b in t.nics if a != b for f in range(3)]
    table = path_table(t, flows)
    assert len(table) == len(flows)
    for i, (a, b, f) in enumerate(flows):
        assert list(table.row(i)) == ecmp_path(t, a, b, f)
    m = table.matrix(t.n_elements)
    assert m.shape == (len(flows), t.n_elements)
    assert np.all(m.data == 1.0)


def test_site_to_findings_pipeline(tmp_path, site_topo):
    """Site file -> pairs -> (synthetic) probe run with skewed clocks -> HDF5 -> re-analysis."""
    from tests.support.synthetic import Fault
    from tests.support.synthetic_run import synthetic_run
    from fleetctl.analysis.triangulate import triangulate
    from fleetctl.analysis.windows import add_pair_figures, build_windows, host_clock
    from fleetctl.mesh.pairs import select_pairs
    from fleetctl.store.reader import open_run
    from fleetctl.store.runfile import RunWriter

    t = site_topo
    plan = select_pairs(t)
    assert plan.design == "full-mesh" and len(plan.pairs) == 8 * 6
    pairs = [(t.nics[a], t.nics[b]) for a, b in plan.pairs]
    run = synthetic_run(t, pairs, [Fault("spine2->leaf1", "loss", 0.05)], sports=8, seed=9)
    clock = host_clock(run.probes, run.nic_host, run.hosts, run.epoch_ns)
    w = build_windows(run.probes, run.flows, len(run.paths), len(t.nics), run.nic_host, 3.0,
                      run.epoch_ns, clock)
    add_pair_figures(w, run.probes, len(t.nics), run.nic_host, run.epoch_ns, clock)
    with RunWriter(tmp_path / "r.h5", run_id="r", cluster="mini") as wr:
        wr.write_topology(t)
        wr.write_paths(run.paths)
        wr.write_flows(run.flows)
        wr.append_probes(run.probes)
        wr.write_windows(replace(w, window_s=3.0, one_way=True))
    with open_run(tmp_path / "r.h5") as r:
        t2 = r.topology()
        assert t2.link_ports == t.link_ports  # port names survive the file
        (f,) = triangulate(t2, r.paths(), r.window_stats(), "l1")
    assert f["element"] == {"type": "link", "id": "leaf1--spine2", "direction": "spine2->leaf1"}
