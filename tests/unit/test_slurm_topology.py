"""Slurm's topology.conf from a discovered fabric (tree and block), and --diff against one."""

from __future__ import annotations

import pytest

from fleetctl.config.topology import parse_block_conf
from fleetctl.discover import slurm_topology as st
from fleetctl.discover.fabric import FabricSpec, LinkSpec
from fleetctl.errors import ConfigError


def _fabric(rails: bool = False) -> FabricSpec:
    spec = FabricSpec(switches={"leaf1": {"tier": 1}, "leaf2": {"tier": 1}, "leaf3": {"tier": 1},
                                "spine1": {"tier": 2}, "spine2": {"tier": 2}, "core1": {"tier": 3}})
    for i in range(1, 7):
        leaf = "leaf%d" % ((i - 1) // 2 + 1)
        spec.links.append(LinkSpec(f"gpu{i}:eth0", f"{leaf}:p{i}"))
        # rail-optimized: the second NIC of every node goes to leaf3 (rail 2)
        spec.links.append(LinkSpec(f"gpu{i}:eth1", "leaf3" if rails else leaf))
    for leaf in ("leaf1", "leaf2", "leaf3"):
        for spine in ("spine1", "spine2"):
            spec.links.append(LinkSpec(leaf, spine))
    spec.links.append(LinkSpec("spine1", "core1"))
    return spec


def test_tree_lists_leaves_then_the_switches_above_them():
    topo = st.from_fabric(_fabric(), [f"gpu{i}" for i in range(1, 8)])
    text = st.render(topo, "tree")
    lines = [l for l in text.splitlines() if not l.startswith("#")]
    assert lines == ["SwitchName=leaf1 Nodes=gpu[1-2]", "SwitchName=leaf2 Nodes=gpu[3-4]",
                     "SwitchName=leaf3 Nodes=gpu[5-6]", "SwitchName=spine1 Switches=leaf[1-3]",
                     "SwitchName=spine2 Switches=leaf[1-3]", "SwitchName=core1 Switches=spine1"]
    assert topo.unplaced == ["gpu7"] and "gpu7: not in this file" in text.replace("for gpu7", "gpu7")
    assert st.diff(text, "t.conf", topo, "tree")["changes"] == 0


def test_rail_optimized_nodes_go_under_the_leaf_of_their_first_nic():
    topo = st.from_fabric(_fabric(rails=True), [f"gpu{i}" for i in range(1, 7)])
    assert topo.leaves == {"leaf1": ["gpu1", "gpu2"], "leaf2": ["gpu3", "gpu4"], "leaf3": ["gpu5", "gpu6"]}
    assert topo.multi_leaf["gpu1"] == ["leaf1", "leaf3"] and "gpu5" not in topo.multi_leaf
    assert "cabled to several leaves" in st.render(topo, "tree")


def test_block_is_one_block_per_leaf_and_reads_back():
    topo = st.from_fabric(_fabric(), [f"gpu{i}" for i in range(1, 7)])
    text = st.render(topo, "block")
    blocks, sizes = parse_block_conf(text, "b.conf")
    assert {b.name: list(b.nodes) for b in blocks.values()} == topo.leaves and sizes == []
    assert "Switches=" not in text
    assert st.diff(text, "b.conf", topo, "block")["changes"] == 0


def test_diff_names_moved_new_and_missing_nodes_and_switch_changes():
    topo = st.from_fabric(_fabric(), [f"gpu{i}" for i in range(1, 7)])
    old = ("SwitchName=leaf1 Nodes=gpu[1-3]\nSwitchName=leaf2 Nodes=gpu[4,9]\nSwitchName=leafX Nodes=gpu8\n"
           "SwitchName=spine1 Switches=leaf[1-2]\nSwitchName=spine2 Switches=leaf[1-3]\n")
    d = st.diff(old, "old.conf", topo, "tree")
    assert d["moved"] == [{"node": "gpu3", "from": "leaf1", "to": "leaf2"}]
    assert d["new_nodes"] == ["gpu5", "gpu6"] and d["missing_nodes"] == ["gpu8", "gpu9"]
    assert d["new_switches"] == ["core1", "leaf3"] and d["missing_switches"] == ["leafX"]
    assert d["children"] == [{"switch": "spine1", "from": ["leaf1", "leaf2"], "to": ["leaf1", "leaf2", "leaf3"]}]
    assert d["changes"] == 1 + 2 + 2 + 2 + 1 + 1


def test_diff_refuses_a_file_of_the_other_plugin():
    topo = st.from_fabric(_fabric(), ["gpu1"])
    with pytest.raises(ConfigError, match="topology/tree file; compare it with --slurm-topology tree"):
        st.diff("SwitchName=leaf1 Nodes=gpu1\n", "t.conf", topo, "block")


@pytest.mark.parametrize("text, message", [
    ("BlockName=b1 Nodes=gpu[1-2] Rate=3\n", "unexpected 'Rate=3'"),
    ("BlockName=b1 Nodes=gpu1\nBlockName=b1 Nodes=gpu2\n", "defined twice"),
    ("BlockName=b/1 Nodes=gpu1\n", "no valid BlockName"),
    ("BlockName=b1 Nodes=gpu1\nBlockSizes=4,x\n", "not a list of numbers"),
    ("BlockName=b1 Nodes=gpu[1-\n", "Nodes="),
])
def test_a_bad_block_file_is_refused_with_its_line(text, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_block_conf(text, "t.conf")
    assert "t.conf:" in str(err.value.path)


def test_no_cabled_node_is_an_error_not_an_empty_file():
    with pytest.raises(ConfigError, match="cables no node to a switch"):
        st.render(st.from_fabric(FabricSpec(), ["gpu1"]), "tree")


def test_block_uses_nvlink_domains_and_leaves_for_the_rest():
    # gpu1-4 report GPUs of one NVL72 clique, gpu5-6 none (a plain leaf block each)
    uuid = "dc6e40c4-d722-4357-9ba6-5291dd461278"
    domains = {f"gpu{i}": f"{uuid}/2" for i in range(1, 5)}
    topo = st.from_fabric(_fabric(), [f"gpu{i}" for i in range(1, 7)], domains)
    found, what = st.blocks(topo)
    assert found == {"nvl1": ["gpu1", "gpu2", "gpu3", "gpu4"], "leaf3": ["gpu5", "gpu6"]}
    assert what["nvl1"] == f"NVLink domain {uuid}/2"
    text = st.render(topo, "block")
    assert f"# NVLink domain {uuid}/2\nBlockName=nvl1 Nodes=gpu[1-4]\n" in text
    assert st.diff(text, "b.conf", topo, "block")["changes"] == 0
    old = "BlockName=leaf1 Nodes=gpu[1-2]\nBlockName=leaf2 Nodes=gpu[3-4]\nBlockName=leaf3 Nodes=gpu[5-6]\n"
    d = st.diff(old, "old.conf", topo, "block")
    assert [m["to"] for m in d["moved"]] == ["nvl1"] * 4 and d["new_switches"] == ["nvl1"]
