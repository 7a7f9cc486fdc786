"""Day one on the lab without a site file: `fleetctl site discover` reads the nodes (local transport
into each namespace) and lldpd's tables on hosts and switches, and writes a site file equivalent to
the lab's own; `audit --mesh` on it localizes a fault as on the lab's file; `--diff` names a cable
taken down and a NIC whose MTU changed; and `fleetctl audit` with no site file at all (Slurm only)
judges every node and drains an Xid node.

Each test leaves the lab as it found it (faults cleared, MTU restored, nodes resumed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.config import load_site
from fleetctl.lab import faults

from labutil import wait_for

pytestmark = pytest.mark.lab

SWITCHES = "leaf[1-2],spine[1-2]"


@pytest.fixture
def no_site(lab, monkeypatch):
    """No site file, as on a fresh cluster: only Slurm, lldpd's sockets and the lab's check paths."""
    if "FLEETCTL_LLDP_SOCKET" not in lab.env:
        if os.environ.get("CI") or shutil.which("lldpd"):
            pytest.fail("the lab runs no lldpd (scripts/install installs it)")
        pytest.skip("lldpd is not installed")
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
    for key, value in lab.env.items():
        if key != "FLEETCTL_SITE":
            monkeypatch.setenv(key, value)
    checks = lab.site.checks
    monkeypatch.setenv("FLEETCTL_CHECKS_SIMULATED_GPUS", checks["simulated_gpus"])
    monkeypatch.setenv("FLEETCTL_CHECKS_KERNEL_LOG", checks["kernel_log"])
    monkeypatch.setenv("FLEETCTL_CHECKS_STATE_FILE", checks["state_file"])


def discover(capsys, *args) -> tuple[int, dict]:
    capsys.readouterr()
    rc = cli_run(["--format", "json", "site", "discover", ",".join(_nodes()), "-t", "local",
                  "--netns", "fl-{node}", "--switches", SWITCHES, *args])
    return rc, json.loads(capsys.readouterr().out)


def _nodes():
    return [f"node{i}" for i in range(1, int(os.environ.get("FLEETCTL_TEST_LAB_HOSTS", "4")) + 1)]


def _links(site) -> dict:
    return {lid: (str(l.a.element_id), str(l.b.element_id), l.a.address, l.b.address)
            for lid, l in site.links.items()}


def test_discovered_file_equals_the_labs_and_localizes_a_fault(lab, no_site, capsys, tmp_path):
    out = tmp_path / "discovered.toml"
    # lldpd sends every second: right after `lab up` a neighbour may still be missing.
    expected = len(lab.site.links)
    wait_for(lambda: discover(capsys)[1]["summary"]["links"] == expected, timeout=20, step=1)
    rc, data = discover(capsys, "--out", str(out))
    assert rc == 0 and data["failed"] == {} and data["summary"]["sources"] == ["nodes", "lldp"]
    mine, truth = load_site(out), lab.site
    assert [str(c.nodes) for c in mine.node_classes] == [str(c.nodes) for c in truth.node_classes]
    (cls,), (want,) = mine.node_classes, truth.node_classes
    assert [(n.name, n.kind, n.mtu) for n in cls.nics] == [(n.name, n.kind, n.mtu) for n in want.nics]
    assert (cls.gpus.count, cls.gpus.model, cls.cpus) == (want.gpus.count, want.gpus.model, want.cpus)
    assert {s: (w.tier, w.address) for s, w in mine.switches.items()} == \
        {s: (w.tier, w.address) for s, w in truth.switches.items()}
    assert _links(mine) == _links(truth)
    # `audit --mesh` on the discovered file blames the same link direction as on the lab's file
    # (tests/integration/test_mesh_lab.py, same fault and probing).
    faults.add("leaf2->spine1", "loss", "2")
    try:
        capsys.readouterr()
        rc = cli_run(["--site", str(out), "--format", "json", "audit", "--mesh-only", "--duration", "3",
                      "--rate", "50"])
        findings = json.loads(capsys.readouterr().out)["findings"]
    finally:
        faults.clear()
    assert rc == 2 and [f["element"] for f in findings] == [
        {"type": "link", "id": "leaf2--spine1", "direction": "leaf2->spine1"}], findings


def test_diff_names_a_cable_down_and_an_mtu_change(lab, no_site, capsys):
    faults.add("leaf1--spine2", "down")
    lab.run_in("node2", ["ip", "link", "set", "eth1", "mtu", "9000"])
    try:
        def changed():
            rc, d = discover(capsys, "--diff", str(lab.site_file))
            return (rc, d) if "leaf1--spine2" in d["missing_links"] else None
        rc, d = wait_for(changed, timeout=15, step=1)  # lldpd drops a neighbour when carrier goes
    finally:
        lab.run_in("node2", ["ip", "link", "set", "eth1", "mtu", "1500"])
        faults.clear()
    assert rc == 1
    assert d["missing_links"] == ["leaf1--spine2"] and d["new_links"] == [] and d["moved"] == []
    assert d["nics"] == [{"node": "node2", "nic": "eth1", "what": "mtu", "expected": 1500, "value": 9000}]
    assert d["new_nodes"] == [] and d["missing_nodes"] == []


def test_audit_without_a_site_file_judges_every_node_and_drains_xid(lab, no_site, capsys):
    start = time.time()
    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--xid", "79"]) == 0
    try:
        capsys.readouterr()
        rc = cli_run(["--format", "json", "audit", "--level", "quick", "--since", str(start - 1), "--drain"])
        report = json.loads(capsys.readouterr().out)
    finally:
        cli_run(["lab", "fault", "clear"])
        subprocess.run(["scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME"],
                       env=lab.command_env(), capture_output=True, timeout=30)
    assert rc == 2, json.dumps([(n["node"], n["transport"], n["error"]) for n in report["nodes"]])
    nodes = {n["node"]: n for n in report["nodes"]}
    assert sorted(nodes) == sorted(lab.nodes)
    assert all(n["transport"] == "ok" and n["complete"] for n in nodes.values()), nodes
    assert report["actions"]["drained"] == ["node2"]
    assert any(n.startswith("inferred: no site file") for n in report["notes"]), report.get("notes")
