"""Importing a Slurm topology.conf into the site's fabric."""

from __future__ import annotations

import pytest

from fleetctl.config import load_site
from fleetctl.config.topology import parse_topology_conf
from fleetctl.errors import ConfigError

SITE = """
[cluster]
name = "topo"
[slurm]
topology_conf = "topology.conf"

[[node_classes]]
name = "one-nic"
nodes = "gpu[01-04]"
[[node_classes.nics]]
name = "eth0"

[[node_classes]]
name = "two-nic"
nodes = "big[1-2]"
[[node_classes.nics]]
name = "mlx5_0"
[[node_classes.nics]]
name = "mlx5_1"
{extra}
"""

TOPOLOGY = """\
# two leaves under one spine, one core above
SwitchName=leaf1 Nodes=gpu[01-02]
switchname=leaf2 \\
    Nodes=gpu[03-04],big[1-2]   # continuation and a trailing comment
SwitchName=spine1 Switches=leaf[1-2] LinkSpeed=400

SwitchName=core Switches=spine1
"""


def load(tmp_path, topology=TOPOLOGY, extra=""):
    (tmp_path / "topology.conf").write_text(topology)
    (tmp_path / "site.toml").write_text(SITE.format(extra=extra))
    return load_site(tmp_path / "site.toml")


def error(tmp_path, topology, extra="") -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, topology, extra)
    return info.value.message


def test_switches_get_tiers_from_the_hierarchy(tmp_path):
    site = load(tmp_path)
    assert {s.id: s.tier for s in site.switches.values()} == {"leaf1": 1, "leaf2": 1, "spine1": 2, "core": 3}


def test_links_use_the_nic_when_the_class_has_one_else_the_host(tmp_path):
    site = load(tmp_path)
    assert sorted(site.links) == sorted([
        "gpu01:eth0--leaf1", "gpu02:eth0--leaf1", "gpu03:eth0--leaf2", "gpu04:eth0--leaf2",
        "big1--leaf2", "big2--leaf2", "leaf1--spine1", "leaf2--spine1", "spine1--core"])
    assert site.links["big1--leaf2"].a.kind == "host"
    assert site.links["gpu01:eth0--leaf1"].a.kind == "nic"
    # the merged switches are visible in the validated data too (config show)
    assert [s["id"] for s in site.data["fabric"]["switches"]] == ["leaf1", "leaf2", "spine1", "core"]


def test_declared_switches_and_links_win(tmp_path):
    extra = """
[[fabric.switches]]
id = "spine1"
tier = 2
model = "QM9700"
[[fabric.links]]
id = "big1-rail0"
a = "big1:mlx5_0"
b = "leaf2:p7"
[[fabric.links]]
id = "leaf1-spine1-a"
a = "leaf1"
b = "spine1"
"""
    site = load(tmp_path, extra=extra)
    assert site.switches["spine1"].model == "QM9700"
    assert "big1--leaf2" not in site.links and "big1-rail0" in site.links
    assert "leaf1--spine1" not in site.links and "leaf1-spine1-a" in site.links
    assert "big2--leaf2" in site.links


def test_parse_keeps_order_and_expands_ranges():
    switches = parse_topology_conf(TOPOLOGY, "t.conf")
    assert list(switches) == ["leaf1", "leaf2", "spine1", "core"]
    assert switches["leaf2"].nodes == ["big1", "big2", "gpu03", "gpu04"]
    assert switches["leaf2"].line == 3
    assert switches["spine1"].children == ["leaf1", "leaf2"]


@pytest.mark.parametrize("line, message", [
    ("SwitchName=s1 Nodes=gpu[01-", "topology.conf:2: invalid Nodes= 'gpu[01-'"),
    ("SwitchName=s1 Ports=4", "topology.conf:2: unexpected 'Ports=4'; expected SwitchName="),
    ("Nodes=gpu01", "topology.conf:2: line has no SwitchName="),
    ("SwitchName=s[1-2] Nodes=gpu01", "topology.conf:2: invalid switch name 's[1-2]'"),
    ("SwitchName=leaf1 Nodes=gpu03", "topology.conf:2: switch 'leaf1' defined twice (first on line 1)"),
    ("SwitchName=s1 Nodes=", "topology.conf:2: Nodes= has no value"),
    ("SwitchName=s1 Switches=nope", "topology.conf:2: switch 's1' lists unknown switch 'nope'"),
    ("SwitchName=s1 Nodes=gpu09", "topology.conf:2: node 'gpu09' (switch 's1') is in no node class"),
    ("BlockName=b1 Nodes=gpu01", "topology.conf:2: BlockName= (topology/block) is not supported"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    msg = error(tmp_path, "SwitchName=leaf1 Nodes=gpu01\n" + line + "\n")
    assert msg.startswith(str(tmp_path / message.split(":")[0]) + ":" + message.split(":", 1)[1]), msg


def test_cycle_and_too_many_tiers(tmp_path):
    assert "switch hierarchy has a cycle: a -> b -> a" in error(
        tmp_path, "SwitchName=a Switches=b\nSwitchName=b Switches=a\n")
    deep = "SwitchName=t1 Nodes=gpu01\n" + "".join(
        f"SwitchName=t{i} Switches=t{i - 1}\n" for i in range(2, 6))
    assert "switch 't5' would be tier 5; at most 4 tiers are supported" in error(tmp_path, deep)


def test_missing_topology_file(tmp_path):
    (tmp_path / "site.toml").write_text(SITE.format(extra=""))
    with pytest.raises(ConfigError) as info:
        load_site(tmp_path / "site.toml")
    assert info.value.message == f"{tmp_path / 'topology.conf'}: topology.conf not found (slurm.topology_conf)"
