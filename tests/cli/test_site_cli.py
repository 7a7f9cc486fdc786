"""`fleetctl site discover` in-process on this machine (local transport, the real payload): the
printed and written site file, --force, --diff, the errors; `audit --local` without a site file."""

from __future__ import annotations

import json

import pytest

from fleetctl.cli import run
from fleetctl.config import load_site, parse_site


@pytest.fixture(autouse=True)
def no_site(monkeypatch):
    for var in ("FLEETCTL_SITE", "SLURM_CONF", "FLEETCTL_LLDP_SOCKET"):
        monkeypatch.delenv(var, raising=False)


def test_discover_prints_a_valid_site_file(capsys):
    assert run(["site", "discover", "here", "-t", "local", "--name", "box"]) == 0
    captured = capsys.readouterr()
    site = parse_site(captured.out, "printed.toml")
    assert site.name == "box" and list(site.nodes) == ["here"] and site.access["transport"] == "local"
    assert captured.out.startswith("# Written by `fleetctl site discover`")
    assert "discovered 1 nodes in 1 classes" in captured.err


def test_out_force_and_diff(tmp_path, capsys):
    out = tmp_path / "site.toml"
    # --nics '*': every netdev but lo is a fabric NIC here, whatever this machine's NICs are.
    assert run(["site", "discover", "here", "-t", "local", "--nics", "*", "--out", str(out)]) == 0
    assert load_site(out).node_class("here") is not None
    capsys.readouterr()
    assert run(["site", "discover", "here", "-t", "local", "--out", str(out)]) == 3
    assert "exists: give --force" in capsys.readouterr().err
    assert run(["site", "discover", "here", "-t", "local", "--out", str(out), "--force"]) == 0
    capsys.readouterr()
    assert run(["--format", "json", "site", "discover", "here", "-t", "local", "--diff", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == 0
    # A NIC the file expects at another MTU is drift: exit 1, named.
    text = out.read_text()
    nics = load_site(out).node_class("here").nics
    assert nics
    out.write_text(text.replace(f"mtu = {nics[0].mtu}", "mtu = 65000", 1))
    assert run(["--format", "json", "site", "discover", "here", "-t", "local", "--nics", "*",
                "--diff", str(out)]) == 1
    changes = json.loads(capsys.readouterr().out)
    assert changes["nics"][0]["what"] == "mtu" and changes["nics"][0]["expected"] == 65000


def test_usage_errors(tmp_path, capsys):
    assert run(["site", "discover", "-t", "local"]) == 3
    assert "no site file" in capsys.readouterr().err
    f = tmp_path / "s.toml"
    f.write_text("x")
    assert run(["site", "discover", "here", "-t", "local", "--out", str(f), "--diff", str(f)]) == 3
    assert "give one of them" in capsys.readouterr().err
    bad = tmp_path / "ib.topo"
    bad.write_text("Switch 36 \"S-01\"\n[1] garbage\n")
    assert run(["site", "discover", "here", "-t", "local", "--ibnetdiscover", str(bad)]) == 3
    assert "not ibnetdiscover output" in capsys.readouterr().err


def test_audit_local_without_any_site_file(capsys):
    assert run(["--format", "json", "audit", "--local", "--node", "solo", "--level", "quick"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in report["nodes"]] == ["solo"]
    assert "node solo is in no node class" in report["notes"][0]


def test_discover_source_trace_on_one_node_says_there_is_nothing_to_trace(capsys):
    assert run(["--format", "json", "site", "discover", "here", "-t", "local", "--nics", "*",
                "--source", "trace"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["links"] == 0
    assert any("nothing to trace" in n for n in data["notes"]), data["notes"]
    assert run(["site", "discover", "here", "-t", "local", "--source", "ospf"]) == 3  # usage error
