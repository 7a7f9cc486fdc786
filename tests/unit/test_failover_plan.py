"""`fleetctl failover plan`: NIC groups per node class, the environment of each route (fleet plugin
or NCCL IB resiliency), NCCL version requirements and warnings, the env file for the SPANK plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetctl.cli import run
from fleetctl.config import load_site, parse_site
from fleetctl.errors import ConfigError, UsageError
from fleetctl.failover import versions
from fleetctl.failover.plan import MODE_IB, MODE_PLUGIN, NicPlan, build_plan, env_file_text, group_nics
from fleetctl.failover.sysfs import Affinity, affinity
from fleetctl.nodeset import parse_nodeset

SITES = Path(__file__).resolve().parents[2] / "site_configs"
NONE = (None, "")  # nothing detected on this machine


def plan_of(name: str, **kw):
    kw.setdefault("detected", NONE)
    kw.setdefault("hostname", "controller")
    return build_plan(load_site(SITES / name), **kw)


def test_ethernet_class_gets_the_fleet_plugin_over_its_nics():
    p = plan_of("lab-example.toml", plugin_dir="/opt/fleet/")
    (cls,) = p.classes
    assert cls.mode == MODE_PLUGIN and cls.groups == [["eth0", "eth1"]]
    assert cls.env == {"NCCL_NET_PLUGIN": "/opt/fleet/libnccl-net-fleet.so", "NCCL_NET": "fleet",
                       "FLEET_NET_IFACES": "eth0,eth1"}
    assert [n.rail for n in cls.nics] == ["leaf1", "leaf1"]
    # both NICs of a lab host go to the same leaf: the plan says what that costs
    assert any("every NIC is cabled to leaf1" in w for w in cls.warnings)


def test_ib_class_merges_nics_in_rail_order_with_both_resiliency_variables():
    p = plan_of("ib-rail-8gpu.toml", nccl_version="2.30.1")
    (cls,) = p.classes
    assert cls.mode == MODE_IB
    assert cls.groups == [[f"mlx5_{i}", f"mlx5_{i + 1}"] for i in range(0, 8, 2)]
    assert cls.env == {"NCCL_NET_FORCE_MERGE": "mlx5_0,mlx5_1;mlx5_2,mlx5_3;mlx5_4,mlx5_5;mlx5_6,mlx5_7",
                       "NCCL_IB_RESILIENCY_PORT_FAILOVER": "1", "NCCL_IB_RESILIENCY_PORT_RECOVERY": "1"}
    assert {r.variable: r.min_nccl for r in cls.requires} == {
        "NCCL_NET_FORCE_MERGE": "2.29.7", "NCCL_IB_RESILIENCY_PORT_FAILOVER": "2.29.7",
        "NCCL_IB_RESILIENCY_PORT_RECOVERY": "2.30.0"}
    assert cls.warnings == [] and p.warnings == []


def test_ib_without_fail_back_before_2_30():
    (cls,) = plan_of("ib-rail-8gpu.toml", nccl_version="2.29.7").classes
    assert cls.env["NCCL_IB_RESILIENCY_PORT_FAILOVER"] == "1"
    assert "NCCL_IB_RESILIENCY_PORT_RECOVERY" not in cls.env
    assert len(cls.warnings) == 1 and "never fails back" in cls.warnings[0]


@pytest.mark.parametrize("old", ["2.29.6", "2.21.5+cuda12.4", "2.18"])
def test_ib_too_old_gets_no_variables_and_a_warning(old):
    (cls,) = plan_of("roce-leaf-spine.toml", nccl_version=old).classes
    assert cls.env == {}
    assert any("no IB port failover" in w for w in cls.warnings)
    assert not any(r.enabled for r in cls.requires)


def test_unknown_version_keeps_the_variables_and_warns():
    (cls,) = plan_of("roce-leaf-spine.toml").classes
    assert cls.nccl_version == "unknown" and "NCCL_IB_RESILIENCY_PORT_RECOVERY" in cls.env
    assert any("NCCL version unknown" in w for w in cls.warnings)


def test_site_key_and_detected_library_as_version_sources(tmp_path):
    text = (SITES / "roce-leaf-spine.toml").read_text() + '\n[failover]\nnccl_version = "2.30.0"\n'
    site = parse_site(text, "site.toml")
    (cls,) = build_plan(site, detected=NONE, hostname="x").classes
    assert (cls.nccl_version, cls.nccl_version_source) == ("2.30.0", "site failover.nccl_version")
    # detected on this host: used for the class this host belongs to (or all, on a controller)
    site = load_site(SITES / "roce-leaf-spine.toml")
    node = next(iter(site.node_classes[0].nodes))
    (cls,) = build_plan(site, detected=((2, 28, 3), "/usr/lib/libnccl.so.2.28.3"), hostname=node).classes
    assert cls.nccl_version == "2.28.3" and cls.nccl_version_source.startswith("detected")
    assert cls.env == {}
    bad = parse_site((SITES / "roce-leaf-spine.toml").read_text() + '\n[failover]\nnccl_version = "two"\n', "s.toml")
    with pytest.raises(ConfigError, match="failover.nccl_version"):
        build_plan(bad, detected=NONE)


def test_plugin_dir_must_be_absolute():
    """A relative NCCL_NET_PLUGIN would be loaded from each job's working directory."""
    with pytest.raises(UsageError, match="--plugin-dir 'lib': not an absolute path"):
        plan_of("lab-example.toml", plugin_dir="lib")
    bad = parse_site((SITES / "roce-leaf-spine.toml").read_text() + '\n[failover]\nplugin_dir = "lib"\n', "s.toml")
    with pytest.raises(ConfigError, match="failover.plugin_dir"):
        build_plan(bad, detected=NONE)


def test_plugin_too_old_nccl_warns():
    (cls,) = plan_of("lab-example.toml", nccl_version="2.19.3").classes
    assert cls.env == {} and any("too old for the fleet plugin" in w for w in cls.warnings)


def test_nodeset_selects_classes_and_unknown_nodes_are_an_error():
    assert [c.name for c in plan_of("lab-example.toml", nodeset=parse_nodeset("node[2-3]")).classes] == ["lab"]
    assert plan_of("lab-example.toml", nodeset=parse_nodeset("node[2-3]")).classes[0].nodes == "node[2-3]"
    with pytest.raises(UsageError, match="no node of gpu9 is in the site file"):
        plan_of("lab-example.toml", nodeset=parse_nodeset("gpu9"))


def _nic(name, rail="", numa=None, switch=""):
    return NicPlan(name, "infiniband", name, rail, numa, switch)


def test_groups_follow_pcie_switch_then_numa_then_order():
    nics = [_nic("a", "r0", 0, "sw1"), _nic("b", "r1", 0, "sw2"), _nic("c", "r2", 1, "sw1"), _nic("d", "r3", 1, "sw2")]
    assert group_nics(nics, 2) == [["a", "c"], ["b", "d"]]
    no_switch = [_nic(n.name, n.rail, n.numa_node) for n in nics]
    assert group_nics(no_switch, 2) == [["a", "b"], ["c", "d"]]
    assert group_nics([_nic(x) for x in "abcde"], 2) == [["a", "b"], ["c", "d", "e"]]  # no NIC alone
    assert group_nics([_nic("a", "r1", 0), _nic("b", "r0", 0)], 2) == [["b", "a"]]  # rail order
    assert group_nics([_nic("a", numa=0), _nic("b", numa=1)], 2) == [["a", "b"]]  # strays pair up
    assert group_nics([_nic("a")], 2) == [["a"]]


def test_local_affinity_reaches_the_groups(tmp_path):
    site = load_site(SITES / "ib-rail-8gpu.toml")
    node = "gpu001"
    # NICs 0-3 on NUMA 0 behind switches s0/s1 alternately, 4-7 on NUMA 1
    aff = {f"mlx5_{i}": Affinity(i // 4, f"s{i % 2}{i // 4}") for i in range(8)}
    (cls,) = build_plan(site, nccl_version="2.30.0", affinity=lambda n: aff[n], hostname=node,
                        detected=NONE).classes
    assert cls.affinity_from == node
    assert cls.groups == [["mlx5_0", "mlx5_2"], ["mlx5_1", "mlx5_3"], ["mlx5_4", "mlx5_6"], ["mlx5_5", "mlx5_7"]]
    (other,) = build_plan(site, nccl_version="2.30.0", affinity=lambda n: aff[n], hostname="elsewhere",
                          detected=NONE).classes
    assert other.affinity_from == "" and other.groups[0] == ["mlx5_0", "mlx5_1"]


def test_sysfs_affinity_from_a_fake_tree(tmp_path):
    pci = tmp_path / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0" / "0000:02:08.0" / "0000:3b:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("1\n")
    (tmp_path / "class" / "net" / "eth0").mkdir(parents=True)
    (tmp_path / "class" / "net" / "eth0" / "device").symlink_to(pci)
    direct = tmp_path / "devices" / "pci0000:00" / "0000:00:02.0" / "0000:05:00.0"
    direct.mkdir(parents=True)
    (direct / "numa_node").write_text("-1\n")
    (tmp_path / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    (tmp_path / "class" / "infiniband" / "mlx5_0" / "device").symlink_to(direct)
    assert affinity("eth0", tmp_path) == Affinity(1, "0000:01:00.0", "0000:3b:00.0")
    assert affinity("mlx5_0", tmp_path) == Affinity(None, "", "0000:05:00.0")
    assert affinity("nope", tmp_path) == Affinity()
    assert affinity("../../etc", tmp_path) == Affinity()


def test_version_parsing_and_library_detection(tmp_path):
    assert versions.parse("2.29.7") == (2, 29, 7)
    assert versions.parse("2.30") == (2, 30, 0)
    assert versions.parse("2.21.5+cuda12.4") == (2, 21, 5)
    for bad in ("", "2", "v2.3.4", "2.3.4.5", "2.3.4; rm -rf /", "9" * 40):
        with pytest.raises(UsageError):
            versions.parse(bad)
    lib = tmp_path / "libnccl.so.2.29.7"
    lib.write_bytes(b"\x7fELF")
    (tmp_path / "libnccl.so.2").symlink_to(lib.name)
    wheel = tmp_path / "wheel"
    wheel.mkdir()
    (wheel / "libnccl.so.2").write_bytes(b"\0" * (3 << 20) + b"NCCL version 2.30.1+cuda12.8\0" + b"\0" * 100)
    assert versions.from_library(tmp_path / "libnccl.so.2") == (2, 29, 7)
    assert versions.from_library(wheel / "libnccl.so.2") == (2, 30, 1)
    assert versions.detect([str(tmp_path)])[0] >= (2, 29, 7)
    assert versions.detect([str(wheel)]) [0] >= (2, 30, 1)


def test_env_file_text_refuses_what_a_shell_or_the_plugin_would_misread():
    assert env_file_text({"NCCL_NET": "fleet"}, header="x") == "# x\nNCCL_NET=fleet\n"
    for env in ({"LD_PRELOAD": "/x.so"}, {"NCCL_NET": "a b"}, {"NCCL_NET": "a\nNCCL_X=1"}, {"NCCL_NET": '"q"'},
                {"NCCL_NET": "fleet\n"}, {"NCCL_X\n": "1"}):  # `$` alone matches before a final newline
        with pytest.raises(UsageError):
            env_file_text(env)


def test_cli_plan_json_exit_codes_and_env_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(versions, "detect", lambda extra=None: NONE)
    site = str(SITES / "ib-rail-8gpu.toml")
    assert run(["failover", "plan", "--site", site, "--format", "json", "--nccl-version", "2.30.1",
                "--no-sysfs"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["classes"][0]["env"]["NCCL_IB_RESILIENCY_PORT_RECOVERY"] == "1" and data["warnings"] == []
    assert run(["failover", "plan", "--site", site, "--format", "json", "--nccl-version", "2.28.9"]) == 1
    assert "no IB port failover" in json.loads(capsys.readouterr().out)["warnings"][0]
    out = tmp_path / "failover.env"
    assert run(["failover", "plan", "gpu[001-002]", "--site", site, "--nccl-version", "2.30.1",
                "--write-env", str(out)]) == 0
    lines = [l for l in out.read_text().splitlines() if not l.startswith("#")]
    assert lines == ["NCCL_NET_FORCE_MERGE=mlx5_0,mlx5_1;mlx5_2,mlx5_3;mlx5_4,mlx5_5;mlx5_6,mlx5_7",
                     "NCCL_IB_RESILIENCY_PORT_FAILOVER=1", "NCCL_IB_RESILIENCY_PORT_RECOVERY=1"]
    capsys.readouterr()
    assert run(["failover", "plan", "--site", site, "--nccl-version", "bogus", "--format", "json"]) == 3
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "usage"
