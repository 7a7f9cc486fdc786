"""`fleetctl failover` in-process: option ranges, the drill's refusals before anything runs, errors
as one line with the documented kind and exit code 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetctl.cli import run

SITES = Path(__file__).resolve().parents[2] / "site_configs"
REAL = str(SITES / "roce-leaf-spine.toml")
LAB = str(SITES / "lab-example.toml")


@pytest.mark.parametrize("args", [
    ["failover", "watch", "--interval", "nan"],
    ["failover", "watch", "--interval", "0"],
    ["failover", "watch", "--duration", "inf"],
    ["failover", "watch", "--flap-count", "0"],
    ["failover", "drill", "a", "b", "--trials", "0"],
    ["failover", "drill", "a", "b", "--size", "1"],
    ["failover", "drill", "a", "b", "--hold", "nan"],
    ["failover", "drill", "a", "b", "--fault", "melt"],
    ["failover", "plan", "--group-size", "9"],
])
def test_option_ranges(args, capsys):
    assert run(args) == 3
    err = capsys.readouterr().err
    assert ("Invalid value" in err or "invalid choice" in err.lower()) and "Traceback" not in err, err


def error_of(capsys, *args) -> dict:
    capsys.readouterr()
    assert run(["--format", "json", *args]) == 3
    return json.loads(capsys.readouterr().out)["error"]


def test_drill_on_a_real_cluster_refuses_without_i_know(capsys):
    err = error_of(capsys, "failover", "drill", "rack1-n1", "rack2-n1", "--site", REAL, "--nics", "ens1f0,ens1f1")
    assert err["kind"] == "failover" and "without --i-know" in err["message"] and "Flags=MAINT" in err["hint"]


def test_drill_checks_its_nodes_and_nics_first(capsys):
    err = error_of(capsys, "failover", "drill", "node1", "gpu9", "--site", LAB)
    assert err["kind"] == "usage" and "gpu9" in err["message"]
    err = error_of(capsys, "failover", "drill", "node1", "node2", "--site", LAB, "--nics", "eth0")
    assert err["kind"] == "usage" and "2 to 8" in err["message"]
    err = error_of(capsys, "failover", "drill", "node1", "node2", "--site", LAB, "--nics", "eth0,eth1;reboot")
    assert err["kind"] == "usage"
    err = error_of(capsys, "failover", "drill", "node1", "node[1-2]", "--site", LAB)
    assert err["kind"] == "usage"


def test_plan_write_env_needs_one_class(tmp_path, capsys):
    site = tmp_path / "two.toml"
    text = (SITES / "lab-example.toml").read_text().replace('nodes = "node[1-4]"', 'nodes = "node[1-2]"', 1)
    cls = text[text.index("[[node_classes]]"):text.index("[fabric]")]
    site.write_text(text.replace("[fabric]", cls.replace('name = "lab"', 'name = "lab2"')
                                 .replace('nodes = "node[1-2]"', 'nodes = "node[3-4]"') + "[fabric]", 1))
    err = error_of(capsys, "failover", "plan", "--site", str(site), "--write-env", str(tmp_path / "x.env"),
                   "--nccl-version", "2.30.0")
    assert err["kind"] == "usage" and "2 node classes" in err["message"]
    assert not (tmp_path / "x.env").exists()
