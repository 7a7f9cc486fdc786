"""Day one on the lab without a site file: `fleetctl site discover` reads the nodes (local transport
into each namespace) and lldpd's tables on hosts and switches, and writes a site file equivalent to
the lab's own; `audit --mesh` on it localizes a fault as on the lab's file; the same from TTL-traced
paths alone (`--source trace`, LLDP ignored), up to switch names; `--diff` names a cable
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
from fleetctl.inventory.from_slurm import CHECK_ENV
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
    # `fleetctl lab env` exports the lab's check data paths for a run without a site file.
    checks = lab.cluster.checks
    assert {k: lab.env.get(v) for k, v in CHECK_ENV.items()} == \
        {k: checks.get(k) for k in CHECK_ENV}, lab.env


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
    expected = len(lab.cluster.links)
    wait_for(lambda: discover(capsys)[1]["summary"]["links"] == expected, timeout=20, step=1)
    rc, data = discover(capsys, "--out", str(out))
    assert rc == 0 and data["failed"] == {} and data["summary"]["sources"] == ["nodes", "lldp"]
    mine, truth = load_site(out), lab.cluster
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


def _renaming(mine, truth) -> dict[str, str]:
    """Discovered switch name -> the lab's, from the cables: a leaf by the host NICs cabled to it, any
    switch by the addresses its cable ends answered from (unique per port in the lab)."""
    by_ends = {(l.a.address, l.b.address): l for l in truth.links.values()}
    ren: dict[str, str] = {}
    for l in mine.links.values():
        t = by_ends.get((l.a.address, l.b.address))
        assert t is not None, f"no lab cable with the ends of {l.id}: {l.a.address}, {l.b.address}"
        for got, want in ((l.a, t.a), (l.b, t.b)):
            if got.kind == "switch":
                assert ren.setdefault(got.device, want.device) == want.device, (l.id, ren)
            else:
                assert got.element_id == want.element_id, (l.id, t.id)
    assert sorted(ren.values()) == sorted(truth.switches) == sorted(set(ren.values())), ren
    return ren


def _same_fabric(mine, truth) -> dict[str, str]:
    """Tiers, cables, link ids and cable addresses equal up to switch names; the renaming."""
    ren = _renaming(mine, truth)
    assert {ren[s]: w.tier for s, w in mine.switches.items()} == {s: w.tier for s, w in truth.switches.items()}

    def renamed(end) -> str:
        return ren[end.device] if end.kind == "switch" else str(end.element_id)
    got = {"--".join(ren.get(part, part) for part in lid.split("--")):
           (renamed(l.a), renamed(l.b), l.a.address, l.b.address) for lid, l in mine.links.items()}
    assert got == {lid: (str(l.a.element_id), str(l.b.element_id), l.a.address, l.b.address)
                   for lid, l in truth.links.items()}
    return ren


def test_traced_fabric_equals_the_labs_up_to_names_and_localizes_a_fault(lab, no_site, capsys, tmp_path):
    """`--source trace`: LLDP ignored (lldpd still runs), the fabric from the mesh tracer's hop lists."""
    out = tmp_path / "traced.toml"
    capsys.readouterr()
    rc = cli_run(["--format", "json", "site", "discover", ",".join(_nodes()), "-t", "local", "--netns",
                  "fl-{node}", "--source", "trace", "--nics", "eth*", "--out", str(out)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["failed"] == {} and data["summary"]["sources"] == ["nodes", "trace"], data
    mine, truth = load_site(out), lab.cluster
    (cls,), (want,) = mine.node_classes, truth.node_classes
    assert str(cls.nodes) == str(want.nodes)
    assert [(n.name, n.kind, n.mtu) for n in cls.nics] == [(n.name, n.kind, n.mtu) for n in want.nics]
    ren = _same_fabric(mine, truth)
    assert "inferred from traced paths" in out.read_text()
    # auto: the hosts' LLDP gives the host cables and leaf names, no switch cable (switches not
    # asked): the routed fabric's switch cables come from traces.
    auto = tmp_path / "auto.toml"

    def auto_discovery():  # lldpd sends every second: right after `lab up` a neighbour may be missing
        rc = cli_run(["--format", "json", "site", "discover", ",".join(_nodes()), "-t", "local", "--netns",
                      "fl-{node}", "--out", str(auto), "--force"])
        data = json.loads(capsys.readouterr().out)
        return (rc, data) if data["summary"]["links"] == len(truth.links) else None
    rc, data = wait_for(auto_discovery, timeout=20, step=1)
    assert rc == 0 and data["summary"]["sources"] == ["nodes", "lldp", "trace"], data["summary"]
    leaves = {s for s, w in truth.switches.items() if w.tier == 1}
    assert {s: t for s, t in _same_fabric(load_site(auto), truth).items() if t in leaves} == {s: s for s in leaves}
    # The same fault as on the lab's file. Traces give no switch loopbacks, so the mesh has no loop
    # probes: in a 2-leaf fabric leaf2->spine1 and spine1->leaf1 lie on the same NIC paths and only
    # the pair is found. With the loopbacks an operator adds (docs/discover.md), exactly the link.
    back = {v: k for k, v in ren.items()}
    lid = next(l for l, link in mine.links.items() if {link.a.device, link.b.device} == {back["leaf2"], back["spine1"]})
    twin = next(l for l, link in mine.links.items()
                if {link.a.device, link.b.device} == {back["leaf1"], back["spine1"]})
    fault = {"type": "link", "id": lid, "direction": f"{back['leaf2']}->{back['spine1']}"}
    if lab.params.leaves == 2:
        rc, found = _mesh_findings(capsys, out)
        assert rc == 2 and found and all(f in (fault, {"type": "link", "id": twin, "direction":
                                                      f"{back['spine1']}->{back['leaf1']}"}) for f in found), found
    text = out.read_text()
    for sid in mine.switches:
        loopback = truth.switches[ren[sid]].address
        text = text.replace(f'id = "{sid}"\ntier', f'id = "{sid}"\naddress = "{loopback}"\ntier')
    out.write_text(text)
    rc, found = _mesh_findings(capsys, out)
    assert rc == 2 and found == [fault], found


def _mesh_findings(capsys, site) -> tuple[int, list]:
    faults.add("leaf2->spine1", "loss", "2")
    try:
        capsys.readouterr()
        rc = cli_run(["--site", str(site), "--format", "json", "audit", "--mesh-only", "--duration", "3",
                      "--rate", "50"])
        findings = json.loads(capsys.readouterr().out)["findings"]
    finally:
        faults.clear()
    return rc, [f["element"] for f in findings]


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


@pytest.mark.slurm
def test_slurm_topology_loads_into_a_real_slurmctld_and_diff_names_a_moved_node(lab, no_site, capsys, tmp_path):
    """topology/tree on every Slurm; topology/block too where the lab's Slurm has it (23.11 and later:
    CI's 24.11 stage, Debian 13's system Slurm)."""
    version = tuple(int(x) for x in lab.state["slurm"]["version"].split("."))
    for plugin in ("tree", "block") if version >= (23, 11) else ("tree",):
        _slurm_topology_round_trip(lab, capsys, tmp_path / plugin, plugin)


def _slurm_topology_round_trip(lab, capsys, tmp_path, plugin):
    from labutil import PrivateSlurmctld

    from fleetctl.nodeset import fold

    tmp_path.mkdir()
    # lldpd sends every second: right after `lab up` a switch-to-switch neighbour may still be missing
    wait_for(lambda: discover(capsys)[1]["summary"]["links"] == len(lab.cluster.links), timeout=20, step=1)
    out = tmp_path / "topology.conf"
    rc, data = discover(capsys, "--slurm-topology", plugin, "--out", str(out))
    assert rc == 0 and data["file"] == str(out)
    leaves = {}
    for host in lab.layout.hosts:
        leaves.setdefault(host.leaf, []).append(host.name)
    assert data["leaves"] == leaves and data["unplaced"] == []
    spines = sorted({l.b.device for l in lab.cluster.links.values() if l.b.device.startswith("spine")})
    assert data["switches"] == {s: sorted(leaves) for s in spines}
    # Slurm itself reads the file: a private slurmctld of the lab's Slurm with TopologyPlugin set.
    with PrivateSlurmctld(lab, tmp_path / "ctld", [f"TopologyPlugin=topology/{plugin}"],
                          {"topology.conf": out.read_text()}) as ctld:
        shown = ctld.scontrol("show", "topology")
    key = "SwitchName" if plugin == "tree" else "BlockName"
    got = {}
    for line in shown.splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if key in words and words.get("Nodes") and "Switches" not in words:
            got[words[key]] = words["Nodes"]
    assert got == {leaf: fold(nodes) for leaf, nodes in leaves.items()}, shown
    # --diff against a file where the first node sits under another leaf.
    first, other = lab.layout.hosts[0].name, sorted(leaves)[-1]
    edited = tmp_path / "edited.conf"
    moved = {leaf: [n for n in nodes if n != first] for leaf, nodes in leaves.items()}
    moved[other] = moved[other] + [first]
    edited.write_text("".join(f"{key}={leaf} Nodes={fold(nodes)}\n" for leaf, nodes in moved.items() if nodes)
                      + "".join(f"SwitchName={s} Switches={fold(k)}\n" for s, k in data["switches"].items()
                                if plugin == "tree"))
    rc, d = discover(capsys, "--slurm-topology", plugin, "--diff", str(edited))
    assert rc == 1 and d["moved"] == [{"node": first, "from": other, "to": lab.layout.hosts[0].leaf}], d
    rc, d = discover(capsys, "--slurm-topology", plugin, "--diff", str(out))
    assert rc == 0 and d["changes"] == 0, d
