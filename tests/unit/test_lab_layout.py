"""The lab's layout (names, addresses, links, routes) and its site file, without building anything."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest

from fleetctl.config import parse_site
from fleetctl.errors import UsageError
from fleetctl.lab import sitefile
from fleetctl.lab.topology import LabParams, build_layout, leaf_of, router_routes
from fleetctl.nodeset import parse_nodeset

SIZES = [LabParams(), LabParams(hosts=16, leaves=4), LabParams(hosts=5, nics_per_host=3, leaves=2, spines=3),
         LabParams(hosts=1, nics_per_host=1, leaves=1, spines=1)]


@pytest.mark.parametrize("params", SIZES, ids=lambda p: f"{p.hosts}h{p.nics_per_host}n{p.leaves}l{p.spines}s")
def test_plan_is_consistent(params):
    layout = build_layout(params)
    assert [h.name for h in layout.hosts] == [f"node{i}" for i in range(1, params.hosts + 1)]
    assert len(layout.links) == params.leaves * params.spines + params.hosts * params.nics_per_host
    # every address is unique, every cable end pair shares a /30
    addresses = [e.address for l in layout.links.values() for e in (l.a, l.b)]
    addresses += [h.mgmt_address for h in layout.hosts] + [r.loopback for r in layout.routers]
    assert len(addresses) == len(set(addresses))
    for link in layout.links.values():
        net = ipaddress.ip_network(f"{link.a.address}/30", strict=False)
        assert ipaddress.ip_address(link.b.address) in net
        assert len(link.a.dev) <= 15 and len(link.b.dev) <= 15  # Linux interface name limit
    # every leaf gets hosts and the spread is even
    per_leaf = [sum(1 for h in layout.hosts if h.leaf == leaf.id) for leaf in layout.leaves]
    assert min(per_leaf) >= 1 and max(per_leaf) - min(per_leaf) <= 1


def test_default_layout_and_ids():
    layout = build_layout(LabParams())
    assert [leaf_of(i, layout.params) for i in range(1, 5)] == [1, 1, 2, 2]
    assert "leaf1--spine2" in layout.links and "node3:eth1--leaf2" in layout.links
    link = layout.links["node3:eth1--leaf2"]
    assert (link.a.netns, link.a.dev, link.b.netns, link.b.dev) == ("fl-node3", "eth1", "fl-leaf2", "n3e1")
    assert all(ns.startswith("fl-") for ns in layout.netns_names())


def test_routes_converge_around_down_links():
    layout = build_layout(LabParams())
    full = router_routes(layout, set())
    leaf1 = dict(full["fl-leaf1"])
    assert [dev for _, dev in leaf1["10.252.2.0/24"]] == ["spine1", "spine2"]
    down = router_routes(layout, {"leaf2--spine1"})
    # leaf1 stops sending leaf2's traffic to spine1, which can no longer reach leaf2
    assert [dev for _, dev in dict(down["fl-leaf1"])["10.252.2.0/24"]] == ["spine2"]
    assert dict(down["fl-spine1"])["10.252.2.0/24"] == []
    both = router_routes(layout, {"leaf2--spine1", "leaf2--spine2"})
    assert dict(both["fl-leaf1"])["10.252.2.0/24"] == []


@pytest.mark.parametrize("kwargs, flag", [({"hosts": 0}, "--hosts"), ({"hosts": 2, "leaves": 3}, "--leaves"),
                                          ({"spines": 40}, "--spines"), ({"nics_per_host": 9}, "--nics")])
def test_bad_sizes_are_usage_errors(kwargs, flag):
    with pytest.raises(UsageError, match=flag):
        build_layout(LabParams(**kwargs))


@pytest.mark.parametrize("params", SIZES + [LabParams(gpus_per_host=4, clock_skew=True, ssh=False)],
                         ids=str)
def test_site_file_passes_the_schema(params, tmp_path):
    layout = build_layout(params)
    doc = sitefile.site_document(layout, tmp_path, slurm_conf="/x/slurm.conf",
                                 ssh={"identity_file": "/x/id", "known_hosts": "/x/kh", "ssh_config": "/x/cfg"}, cpus=2)
    text = sitefile.to_toml(doc)
    assert tomllib.loads(text) == doc  # the writer round-trips
    site = parse_site(text, str(tmp_path / "site.toml"))
    assert len(site.nodes) == params.hosts and len(site.links) == len(layout.links)
    for link in layout.links.values():
        parsed = site.links[link.id]
        assert (parsed.a.address, parsed.b.address) == (link.a.address, link.b.address)
    assert site.access["local"]["netns"].format(node="node1") == "fl-node1"
    if params.ssh:  # the tree transport: the first host under each leaf is its gateway
        firsts = {}
        for h in layout.hosts:
            firsts.setdefault(h.leaf, h.name)
        assert parse_nodeset(site.access["clush"]["gateways"]) == parse_nodeset(",".join(firsts.values()))
    assert site.access["transport"] == ("ssh" if params.ssh else "local")
    if params.gpus_per_host:
        assert site.checks["simulated_gpus"] == str(Path(tmp_path) / "hosts" / "{node}" / "gpus.json")
    else:
        assert site.checks["simulated_gpus"] == ""


def test_toml_writer_escapes_strings():
    doc = {"a": {"s": 'quote " and \\ back', "k": [1, 2], "b": True}}
    assert tomllib.loads(sitefile.to_toml(doc)) == doc
