"""Site-file validation: good files, and each kind of bad one with the message it must give."""

from __future__ import annotations

import textwrap

import pytest

from fleetctl.config import load_site, parse_site
from fleetctl.errors import ConfigError

GOOD = """
[cluster]
name = "t1"

[access]
transport = "ssh"
concurrency = 8
[access.ssh]
user = "ops"
port = 2222
host_key_policy = "accept-new"
addresses = { gpu01 = "10.0.0.1" }

[slurm]
partition = "gpu"
drain_prefix = "fleetctl"

[[node_classes]]
name = "h100"
nodes = "gpu[01-04]"
cpus = 128
[node_classes.gpus]
count = 8
model = "NVIDIA H100 80GB HBM3"
[[node_classes.nics]]
name = "mlx5_0"
kind = "infiniband"
rate_gbps = 400
mtu = 4096
[[node_classes.nics]]
name = "mlx5_1"
kind = "infiniband"
rate_gbps = 400

[[node_classes]]
name = "cpu"
nodes = "cpu1"
[[node_classes.nics]]
name = "eth0"

[[fabric.switches]]
id = "leaf1"
tier = 1
[[fabric.switches]]
id = "spine1"
tier = 2

[[fabric.links]]
a = "gpu01:mlx5_0"
b = "leaf1:p1"
a_address = "10.1.0.2"
[[fabric.links]]
a = "leaf1"
b = "spine1"
rate_gbps = 800
[[fabric.links]]
id = "leaf1--spine1-b"
a = "leaf1"
b = "spine1"
[[fabric.links]]
a = "cpu1"
b = "leaf1"
"""


def site(text: str = GOOD):
    return parse_site(textwrap.dedent(text), source="t.toml")


def bad(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        site(text)
    return info.value.message


def test_good_file_resolves_classes_switches_links_and_defaults():
    s = site()
    assert s.name == "t1"
    assert str(s.nodes) == "cpu1,gpu[01-04]"
    assert s.node_class("gpu03").name == "h100"
    assert s.node_class("gpu03").nic("mlx5_1").rate_gbps == 400.0
    assert s.node_class("nope") is None
    assert list(s.links) == ["gpu01:mlx5_0--leaf1", "leaf1--spine1", "leaf1--spine1-b", "cpu1--leaf1"]
    link = s.links["gpu01:mlx5_0--leaf1"]
    assert (link.a.kind, link.b.kind, link.b.port, link.a.address) == ("nic", "switch", "p1", "10.1.0.2")
    assert s.links["cpu1--leaf1"].a.kind == "host"
    assert s.links["leaf1--spine1"].rate_gbps == 800.0
    # defaults filled in from schema.toml
    assert s.access["command_timeout"] == 60.0
    assert s.access["ssh"]["known_hosts"] == "~/.ssh/known_hosts"
    assert s.slurm["spare_reservation"] == "fleetctl-spares"
    assert s.thresholds["xid_reboot_escalation"] == 2
    assert s.node_class("cpu1").gpus.count == 0
    assert len([l for l in s.links.values() if "leaf1" in (l.a.device, l.b.device)]) == 4


def test_minimal_file():
    s = site('[cluster]\nname = "x"\n')
    assert s.node_classes == [] and s.switches == {} and s.links == {}


def test_unknown_key_suggests_the_near_one():
    msg = bad(GOOD.replace("concurrency = 8", "concurency = 8"))
    assert msg.startswith("t.toml: access.concurency: unknown key (did you mean 'concurrency'?)")
    assert "allowed here:" in msg


def test_unknown_key_in_array_of_tables_names_the_index():
    msg = bad(GOOD.replace('kind = "infiniband"\nrate_gbps = 400\nmtu', 'kind = "infiniband"\nrate = 400\nmtu'))
    assert msg.startswith("t.toml: node_classes[0].nics[0].rate: unknown key (did you mean 'rate_gbps'?)")


def test_unknown_top_level_section():
    assert bad(GOOD + "\n[slrum]\n").startswith("t.toml: slrum: unknown key (did you mean 'slurm'?)")


def test_wrong_type():
    assert bad(GOOD.replace("port = 2222", 'port = "2222"')) == \
        "t.toml: access.ssh.port: expected an integer, got string '2222'"
    assert bad(GOOD.replace("cpus = 128", "cpus = 1.5")) == \
        "t.toml: node_classes[0].cpus: expected an integer, got number 1.5"
    assert bad(GOOD.replace("rate_gbps = 800", "rate_gbps = true")) == \
        "t.toml: fabric.links[1].rate_gbps: expected a number, got boolean True"
    assert bad(GOOD.replace('name = "t1"', "name = 3")) == \
        "t.toml: cluster.name: expected a string, got integer 3"
    assert "expected a table of strings" in bad(GOOD.replace('gpu01 = "10.0.0.1"', "gpu01 = 1"))


def test_table_where_array_expected():
    assert "expected an array of tables ([[fabric.switches]])" in \
        bad('[cluster]\nname = "x"\n[fabric]\nswitches = "leaf1"\n')


def test_missing_required_key():
    assert bad(GOOD.replace('name = "t1"', 'description = "x"')).startswith(
        "t.toml: cluster.name: missing required key (string:")
    assert bad(GOOD.replace('a = "cpu1"\n', "")).startswith("t.toml: fabric.links[3].a: missing required key")
    assert bad("").startswith("t.toml: cluster.name: missing required key")


def test_enum_value():
    assert bad(GOOD.replace('transport = "ssh"', 'transport = "rsh"')) == \
        "t.toml: access.transport: expected one of ssh, srun, local, clush; got 'rsh'"
    assert bad(GOOD.replace('kind = "infiniband"', 'kind = "ib"', 1)) == \
        "t.toml: node_classes[0].nics[0].kind: expected one of ethernet, infiniband, roce; got 'ib'"


def test_out_of_range():
    assert bad(GOOD.replace("port = 2222", "port = 70000")) == "t.toml: access.ssh.port: must be <= 65535, got 70000"
    assert bad(GOOD.replace("concurrency = 8", "concurrency = 0")) == "t.toml: access.concurrency: must be >= 1, got 0"
    assert bad(GOOD.replace("tier = 2", "tier = 9")) == "t.toml: fabric.switches[1].tier: must be <= 4, got 9"


@pytest.mark.parametrize("nodes", ["gpu[01-", "gpu[3-1]", "", "   "])
def test_bad_node_set(nodes):
    msg = bad(GOOD.replace('nodes = "gpu[01-04]"', f'nodes = "{nodes}"'))
    assert msg.startswith(f"t.toml: node_classes[0].nodes: invalid node set {nodes!r}")


def test_duplicate_link_ids():
    msg = bad(GOOD.replace('id = "leaf1--spine1-b"\n', ""))
    assert msg == ("t.toml: fabric.links[2]: duplicate link id 'leaf1--spine1' "
                   "(give parallel links explicit ids)")
    msg = bad(GOOD.replace('id = "leaf1--spine1-b"', 'id = "gpu01:mlx5_0--leaf1"'))
    assert msg == ("t.toml: fabric.links[2].id: duplicate link id 'gpu01:mlx5_0--leaf1' "
                   "(give parallel links explicit ids)")


def test_bad_link_id_characters():
    assert "must not contain '->' or spaces" in bad(GOOD.replace('id = "leaf1--spine1-b"', 'id = "a b"'))


def test_duplicate_switch():
    msg = bad(GOOD.replace('id = "spine1"', 'id = "leaf1"'))
    assert msg == "t.toml: fabric.switches[1].id: duplicate switch id 'leaf1'"


def test_link_naming_a_missing_switch():
    msg = bad(GOOD.replace('b = "spine1"\nrate_gbps', 'b = "spine9"\nrate_gbps'))
    assert msg == ("t.toml: fabric.links[1].b: link end 'spine9' names neither a switch of "
                   "fabric.switches nor a node of node_classes")


def test_link_naming_a_missing_nic():
    msg = bad(GOOD.replace('a = "gpu01:mlx5_0"', 'a = "gpu01:mlx5_7"'))
    assert msg == ("t.toml: fabric.links[0].a: link end 'gpu01:mlx5_7': node class 'h100' has no NIC "
                   "'mlx5_7' (its NICs: mlx5_0, mlx5_1)")


def test_link_without_a_switch_or_to_itself():
    assert "a link must have a switch on at least one end" in bad(GOOD.replace('b = "leaf1:p1"', 'b = "cpu1"'))
    assert "connects 'leaf1' to itself" in bad(GOOD.replace('b = "spine1"\nrate_gbps', 'b = "leaf1:p2"\nrate_gbps'))


def test_node_in_two_classes():
    msg = bad(GOOD.replace('nodes = "cpu1"', 'nodes = "cpu1,gpu04"'))
    assert msg == "t.toml: node_classes[1].nodes: nodes gpu04 are already in another node class"


def test_duplicate_class_and_nic_names():
    assert bad(GOOD.replace('name = "cpu"', 'name = "h100"')) == \
        "t.toml: node_classes[1].name: duplicate node class name 'h100'"
    assert bad(GOOD.replace('name = "mlx5_1"', 'name = "mlx5_0"')) == \
        "t.toml: node_classes[0].nics: duplicate NIC name 'mlx5_0'"


def test_invalid_toml():
    msg = bad(GOOD.replace("[cluster]", "[cluster"))
    assert msg.startswith("t.toml: not valid TOML:")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_site(tmp_path / "nope.toml")
    assert info.value.message == f"{tmp_path / 'nope.toml'}: site file not found"


def test_load_site_from_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(GOOD)
    assert load_site(path).source == str(path)


def test_derived_link_id_does_not_depend_on_the_order_of_the_ends():
    s = site(GOOD.replace('a = "leaf1"\nb = "spine1"\nrate_gbps', 'a = "spine1"\nb = "leaf1"\nrate_gbps')
             .replace('a = "cpu1"\nb = "leaf1"', 'a = "leaf1:p9"\nb = "cpu1"'))
    assert "leaf1--spine1" in s.links and "cpu1--leaf1" in s.links
    assert s.links["cpu1--leaf1"].a.kind == "switch"  # the ends stay as written


def test_switch_named_like_a_node():
    assert bad(GOOD.replace('id = "spine1"', 'id = "cpu1"')) == \
        "t.toml: fabric.switches[1].id: switch id 'cpu1' is also the name of a node"


def test_bad_drain_prefix():
    assert bad(GOOD.replace('drain_prefix = "fleetctl"', 'drain_prefix = "my tool:"')) == \
        "t.toml: slurm.drain_prefix: invalid drain prefix 'my tool:': letters, digits, '_', '.', '-' only"


def test_numbers_are_finite_and_defaults_are_floats():
    assert bad(GOOD.replace("rate_gbps = 800", "rate_gbps = nan")) == \
        "t.toml: fabric.links[1].rate_gbps: expected a finite number, got nan"
    s = site()
    assert isinstance(s.node_class("cpu1").nics[0].rate_gbps, float)
    assert isinstance(s.thresholds["gpu_temp_warn_c"], float)
