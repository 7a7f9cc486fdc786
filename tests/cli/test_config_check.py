"""`fleetctl config check` on every shipped site file, and on bad ones (in-process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.cli import run

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "site_configs").glob("*.toml"))


def test_the_examples_the_issue_asks_for_are_shipped():
    names = {p.name for p in SHIPPED}
    assert {"ib-rail-8gpu.toml", "roce-leaf-spine.toml", "from-topology.toml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_site_file_passes_check(path, capsys):
    assert run(["config", "check", str(path), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["valid"] is True and summary["nodes"] > 0 and summary["links"] > 0


def test_rail_example_is_what_the_generator_makes():
    out = subprocess.run([sys.executable, str(ROOT / "site_configs" / "gen_rail.py")],
                         capture_output=True, text=True, check=True).stdout
    assert out == (ROOT / "site_configs" / "ib-rail-8gpu.toml").read_text()


def test_rail_example_shape(capsys):
    assert run(["config", "check", str(ROOT / "site_configs" / "ib-rail-8gpu.toml"), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # 8 nodes x 8 rails + 16 rail leaves x 4 spines
    assert (summary["nodes"], summary["switches"], summary["links"]) == (8, 20, 8 * 8 + 16 * 4)


def test_from_topology_imports_switches(capsys):
    assert run(["config", "check", str(ROOT / "site_configs" / "from-topology.toml"), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["switches"] == 5  # 3 leaves + 2 spines from topology.conf


def test_bad_file_is_one_line_and_exit_3(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[cluster]\nname = "x"\n[acess]\n')
    assert run(["config", "check", str(bad)]) == 3
    err = capsys.readouterr().err
    assert err == (f"fleetctl: error: {bad}: acess: unknown key (did you mean 'access'?); allowed here: "
                   "access, act, checks, cluster, fabric, failover, groups, lab, lens, mesh, node_classes, "
                   "slurm, spares, thresholds\n")


def test_missing_file_json_error(tmp_path, capsys):
    assert run(["config", "check", str(tmp_path / "nope.toml"), "--format", "json"]) == 3
    out = capsys.readouterr().out
    assert json.loads(out) == {"error": {"kind": "config", "message": f"{tmp_path / 'nope.toml'}: site file not found"}}


BASE = '[cluster]\nname = "t"\n[[node_classes]]\nname = "gpu"\nnodes = "node[1-2]"\n'


@pytest.mark.parametrize("extra, section, runtime", [
    ('[checks]\nxid_policy = { "63" = "fatal:reboot" }\n', "checks", "audit"),
    ('[checks]\nxid_policy = { "x63" = "fail:reboot" }\n', "checks", "audit"),
    ('[[act.policies]]\nname = "p"\nsource = "audit"\nactions = ["reboot"]\n', "act", "act"),
    ('[[act.policies]]\nname = "p"\nsource = "audit"\nactions = ["notify"]\n', "act", "act"),
    ('[failover]\nplugin_dir = "lib"\n', "failover", "failover"),
    ('[failover]\nnccl_version = "two.eighteen"\n', "failover", "failover"),
])
def test_config_check_refuses_what_the_runtime_refuses(tmp_path, capsys, extra, section, runtime):
    """config check said ok to files every audit and Prolog then rejected (xid_policy values,
    act.policies[].actions): the Prolog fails open, and GPU gating was silently off fleet-wide."""
    site = tmp_path / "site.toml"
    site.write_text(BASE + extra)
    assert run(["config", "check", str(site)]) == 3
    err = capsys.readouterr().err
    assert f"[{section}]" in err and "Traceback" not in err, err
    argv = {"audit": ["audit", "--local", "--node", "node1", "--site", str(site)],
            "act": ["act", "run", "--once", "--dry-run", "--site", str(site), "--state-dir", str(tmp_path / "a")],
            "failover": ["failover", "plan", "--site", str(site)]}[runtime]
    assert run(argv) == 3  # the runtime refuses it the same way
    assert capsys.readouterr().err.strip()


def test_config_check_lists_every_section_it_refuses(tmp_path, capsys):
    site = tmp_path / "site.toml"
    site.write_text(BASE + '[checks]\nxid_policy = { "63" = "fatal:reboot" }\n'
                    '[failover]\nplugin_dir = "lib"\n')
    assert run(["config", "check", str(site)]) == 3
    assert "and 1 more: failover" in capsys.readouterr().err
