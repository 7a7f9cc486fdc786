"""`fleetctl audit` and the Slurm hooks end to end in the lab: simulated GPUs and kernel logs, real
sshd, real Slurm, real network namespaces.

Every test leaves the lab as it found it: faults cleared, nodes resumed, hooks removed.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.slurm.parse import parse_record

from labutil import sbatch, wait_for

pytestmark = pytest.mark.lab


def fleetctl_json(capsys, *args) -> tuple[int, dict]:
    capsys.readouterr()
    rc = cli_run(["--format", "json", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def scontrol_node(lab, node) -> dict:
    """The node's `scontrol show node --oneliner` record, parsed as fleetctl parses it (Reason
    without its `[user@time]` tail, "" when there is none)."""
    out = subprocess.run(["scontrol", "show", "node", node, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30, check=True).stdout
    fields = parse_record(out)
    fields.setdefault("Reason", "")
    return fields


@pytest.fixture
def clean(lab):
    """Clear faults and put every node back in service after the test."""
    yield
    cli_run(["lab", "fault", "clear"])
    subprocess.run(["scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME"],
                   env=lab.command_env(), capture_output=True, timeout=30)


def by_node(report: dict) -> dict:
    return {n["node"]: n for n in report["nodes"]}


def test_clean_lab_has_no_failures(lab, capsys, clean):
    rc, report = fleetctl_json(capsys, "audit", "--level", "quick", "--since", "1s")
    assert report["schema"] == "fleetctl.audit/1"
    assert report["simulated"] is True
    assert report["summary"]["fail"] == 0, report["summary"]
    assert rc in (0, 1)
    for node in report["nodes"]:
        assert node["transport"] == "ok" and node["complete"], node
        codes = {r["code"]: r for r in node["results"]}
        assert codes["gpu.count"]["status"] == "ok" and codes["gpu.count"]["simulated"]
        assert codes["nic.link"]["status"] == "ok", codes["nic.link"]
        # judged only where they apply: no NVLink fabric on the simulated GPUs, no IMEX domain here
        assert "gpu.fabric" not in codes and codes["nvlink.imex"]["status"] == "skipped", codes.get("nvlink.imex")


@pytest.mark.slurm
def test_xid79_drains_node_then_resume_after_clear(lab, capsys, clean):
    node, operators = "node2", "node3"
    start = time.time()
    subprocess.run(["scontrol", "update", f"NodeName={operators}", "State=DRAIN",
                    "Reason=cable swap by alice"], env=lab.command_env(), check=True, timeout=30)
    assert cli_run(["lab", "fault", "add", f"{node}:gpu3", "--xid", "79"]) == 0
    assert cli_run(["lab", "fault", "add", f"{operators}:gpu0", "--ecc-dbe"]) == 0

    rc, report = fleetctl_json(capsys, "audit", "--level", "quick", "--since", str(start - 1), "--drain")
    assert rc == 2
    nodes = by_node(report)
    assert nodes[node]["status"] == "fail"
    assert "xid.79" in {r["code"] for r in nodes[node]["results"] if r["status"] == "fail"}
    assert nodes[operators]["status"] == "fail"
    assert report["actions"]["drained"] == [node]
    assert "someone else" in report["actions"]["skipped"][operators]
    state = scontrol_node(lab, node)
    assert "DRAIN" in state["State"] and state["Reason"].startswith("fleetctl:xid.79 ")
    assert scontrol_node(lab, operators)["Reason"] == "cable swap by alice"

    # A second audit does not drain again or touch the operator's node.
    rc, report = fleetctl_json(capsys, "audit", node, "--level", "quick", "--since", str(start - 1),
                               "--drain", "--dry-run")
    assert report["actions"]["drain"] == [] and "already drained by fleetctl" in \
        report["actions"]["skipped"][node]

    assert cli_run(["lab", "fault", "clear"]) == 0
    cleared = time.time()
    rc, report = fleetctl_json(capsys, "audit", "--level", "quick", "--since", str(cleared), "--resume")
    assert report["actions"]["resumed"] == [node]
    assert "DRAIN" not in scontrol_node(lab, node)["State"]
    after = scontrol_node(lab, operators)
    assert "DRAIN" in after["State"] and after["Reason"] == "cable swap by alice"


def test_xid_repaired_by_gpu_reset_is_acknowledged_by_resume(lab, capsys, clean):
    """An Xid whose GPU was reset (no reboot: the kernel log keeps the line) fails the node until
    `audit --resume` acknowledges the log; the node's own Prolog-level checks honour that too, and a
    new Xid after the acknowledgement fails it again."""
    node = "node4"
    log = lab.cluster.checks["kernel_log"].format(node=node)

    def xid_line():  # dmesg --time-format iso: microseconds, so a line just after the watermark is after it
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        return f"{stamp},{int(now % 1 * 1e6):06d}+00:00 NVRM: Xid (PCI:0000:5d:00): 48, pid=77, name=python3, DBE\n"

    original = Path(log).read_text() if Path(log).exists() else ""
    try:
        _acknowledge_by_resume(lab, capsys, node, log, xid_line)
    finally:
        Path(log).write_text(original)  # the other tests expect node4's log as it was


def _acknowledge_by_resume(lab, capsys, node, log, xid_line):
    with open(log, "a") as f:
        f.write(xid_line())
    rc, report = fleetctl_json(capsys, "audit", node, "--level", "quick", "--drain")
    assert rc == 2 and report["actions"]["drained"] == [node]
    assert scontrol_node(lab, node)["Reason"].startswith("fleetctl:xid.48 ")
    # Without an acknowledgement the same log keeps the node drained.
    rc, report = fleetctl_json(capsys, "audit", node, "--level", "quick", "--resume", "--dry-run")
    assert report["actions"]["resume"] == []
    time.sleep(0.1)  # the watermark is later than the line
    rc, report = fleetctl_json(capsys, "audit", node, "--level", "quick", "--resume")
    assert rc == 0 and report["actions"]["resumed"] == [node], report["actions"]
    scan = {r["code"]: r for r in by_node(report)[node]["results"]}["xid.scan"]
    assert scan["evidence"]["acknowledged"]["by"] == "fleetctl audit --resume"
    assert "DRAIN" not in scontrol_node(lab, node)["State"]
    rc, _ = fleetctl_json(capsys, "audit", node, "--level", "quick")
    assert rc == 0
    with open(log, "a") as f:
        f.write(xid_line())
    rc, report = fleetctl_json(capsys, "audit", node, "--level", "quick")
    assert rc == 2 and by_node(report)[node]["status"] == "fail"


def test_nic_down_is_a_failed_check(lab, capsys, clean):
    assert cli_run(["lab", "fault", "add", "node4:eth1", "--down"]) == 0
    rc, report = fleetctl_json(capsys, "audit", "node4", "--level", "quick", "--since", "1s")
    assert rc == 2
    links = {r["subject"]: r for r in by_node(report)["node4"]["results"] if r["code"] == "nic.link"}
    assert links["eth1"]["status"] == "fail", links
    assert links["eth0"]["status"] == "ok", links


def test_nic_symbol_errors_raise_a_ber_warning_and_clean_nics_none(lab, capsys, clean):
    """The lab's emulated mlx5 counters (checks.simulated_nic_stats) go through the same parser as
    `ethtool -S`: clean NICs are steady (no false finding), a NIC with 50 symbol errors/s warns with
    its effective BER over the standard level's 1 s window, and stops once the fault is cleared."""
    def counters(report):
        return {(n["node"], r["subject"]): r for n in report["nodes"] for r in n["results"]
                if r["code"] == "nic.counters"}

    _, report = fleetctl_json(capsys, "audit", "--level", "standard", "--since", "1s")
    clean_run = counters(report)
    assert len(clean_run) == 2 * len(lab.nodes)
    assert {k: r["status"] for k, r in clean_run.items() if r["status"] != "ok"} == {}
    assert all(r["simulated"] and "symbol_error" in r["evidence"]["values"] for r in clean_run.values())
    assert cli_run(["lab", "fault", "add", "node3:eth1", "--symbol-errors", "50"]) == 0
    _, report = fleetctl_json(capsys, "audit", "node3", "--level", "standard", "--since", "1s")
    got = counters(report)
    bad = got[("node3", "eth1")]
    assert bad["status"] == "warn" and bad["action"] == "inspect-hardware", bad
    assert "symbol_error at" in bad["message"] and "effective BER" in bad["message"]
    assert 1e-9 < bad["evidence"]["effective_ber_short"] < 1e-8  # 50/s over 10 Gb/s: 5e-9
    assert got[("node3", "eth0")]["status"] == "ok"
    assert cli_run(["lab", "fault", "clear", "node3:eth1"]) == 0
    fleetctl_json(capsys, "audit", "node3", "--level", "quick", "--since", "1s")  # the snapshot after
    _, report = fleetctl_json(capsys, "audit", "node3", "--level", "standard", "--since", "1s")
    assert counters(report)[("node3", "eth1")]["status"] == "ok"


def test_the_same_fault_on_two_nodes_is_one_block_of_the_report(lab, capsys, clean):
    for node in ("node3", "node4"):
        assert cli_run(["lab", "fault", "add", f"{node}:eth1", "--down"]) == 0
    capsys.readouterr()
    assert cli_run(["audit", "--level", "quick", "--since", "1s", "--no-color"]) == 2
    out = capsys.readouterr().out
    assert "node[3-4] (2)" in out and out.count("nic.link eth1") == 1, out
    assert cli_run(["audit", "--level", "quick", "--since", "1s", "--no-color", "--wide"]) == 2
    assert capsys.readouterr().out.count("nic.link eth1") == 2


def test_mtu_change_is_a_fleet_finding(lab, capsys, clean):
    lab.run_in("node1", ["ip", "link", "set", "eth0", "mtu", "1400"])
    try:
        rc, report = fleetctl_json(capsys, "audit", "--level", "quick", "--since", "1s")
    finally:
        lab.run_in("node1", ["ip", "link", "set", "eth0", "mtu", "1500"])
    assert rc == 2
    mtu = [f for f in report["fleet"] if f["code"] == "fleet.nic.mtu" and f["subject"] == "eth0"]
    assert mtu and mtu[0]["nodes"] == "node1", report["fleet"]


def test_node_not_answering_is_reported_and_others_complete(lab, capsys, clean):
    # Stop node3's sshd answering by taking its management interface down.
    lab.run_in("node3", ["ip", "link", "set", "mgmt0", "down"], check=False)
    try:
        rc, report = fleetctl_json(capsys, "audit", "--level", "quick", "--since", "1s")
    finally:
        lab.run_in("node3", ["ip", "link", "set", "mgmt0", "up"], check=False)
    nodes = by_node(report)
    assert nodes["node3"]["status"] == "error" and nodes["node3"]["transport"] in ("unreachable", "timeout")
    assert all(nodes[n]["complete"] for n in ("node1", "node2", "node4"))
    assert rc == 1 and report["actions"] is None


def test_node_that_stops_answering_mid_audit_is_reported(lab, capsys, clean):
    """node2 answers the connection, then its link goes away while its checks run (the standard
    level samples NIC counters for a second): it times out, the other nodes are all reported."""
    import threading

    timer = threading.Timer(0.8, lambda: lab.run_in("node2", ["ip", "link", "set", "mgmt0", "down"],
                                                    check=False))
    timer.start()
    try:
        rc, report = fleetctl_json(capsys, "audit", "--level", "standard", "--budget", "3", "--since", "1s")
    finally:
        timer.join()
        lab.run_in("node2", ["ip", "link", "set", "mgmt0", "up"], check=False)
    nodes = by_node(report)
    assert nodes["node2"]["status"] == "error" and nodes["node2"]["transport"] == "timeout", nodes["node2"]
    assert all(nodes[n]["complete"] and nodes[n]["transport"] == "ok" for n in ("node1", "node3", "node4"))
    assert rc == 1


def test_prom_and_history(lab, capsys, clean, tmp_path):
    prom, history = tmp_path / "fleetctl.prom", tmp_path / "history"
    fleetctl_json(capsys, "audit", "--level", "quick", "--since", "1s", "--prom", str(prom),
                  "--history", str(history))
    assert cli_run(["lab", "fault", "add", "node1:gpu1", "--temp", "99"]) == 0
    rc, report = fleetctl_json(capsys, "audit", "--level", "quick", "--since", "1s", "--prom", str(prom),
                               "--history", str(history))
    text = prom.read_text()
    assert 'fleetctl_audit_node_status{cluster="lab",node="node1"} 2' in text
    assert 'code="gpu.temperature"' in text
    assert len(list(history.glob("audit-*.json"))) == 2
    assert "gpu.temperature/gpu1" in report["changes"]["nodes"]["node1"]["new"]


# ---------------------------------------------------------------- Slurm hooks

@pytest.fixture
def hooks(lab, tmp_path, clean):
    """Install fleetctl's hooks into the lab's Slurm (by dropping them into its hook directories)."""
    target = tmp_path / "hooks"
    assert cli_run(["hook", "install", str(target), "--log", str(tmp_path / "hooks.log")]) == 0
    links = []
    for hook in ("prolog", "epilog"):
        link = Path(lab.lab_dir) / "hooks" / f"{hook}.d" / f"50-fleetctl-{hook}"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target / f"fleetctl-{hook}")
        links.append(link)
    yield target
    for link in links:
        link.unlink(missing_ok=True)


def job_state(lab, job_id) -> dict:
    out = subprocess.run(["scontrol", "show", "job", job_id, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30).stdout
    return dict(w.partition("=")[::2] for w in out.split() if "=" in w)


def cancel(lab, job_id):
    subprocess.run(["scancel", job_id], env=lab.command_env(), capture_output=True, timeout=30)


@pytest.mark.slurm
def test_prolog_drains_node_with_fatal_fault_and_job_is_requeued(lab, hooks):
    assert cli_run(["lab", "fault", "add", "node1:gpu2", "--remap-pending"]) == 0
    job = sbatch(lab, "-w", "node1", "-N1", "--requeue", "--wrap", "sleep 1")
    try:
        state = wait_for(lambda: (s := scontrol_node(lab, "node1")) and "DRAIN" in s["State"] and s)
        assert "fleetctl:gpu.remap" in state["Reason"] or state["Reason"] == "Prolog error", state
        js = wait_for(lambda: (j := job_state(lab, job)) and j.get("JobState") == "PENDING" and j)
        assert int(js.get("Restarts", "0")) >= 1 or "held" in js.get("Reason", "").lower() \
            or js.get("Priority") == "0", js
    finally:
        cancel(lab, job)
    log = (hooks.parent / "hooks.log").read_text()
    assert "fleetctl prolog node=node1" in log and "verdict=fail" in log


def _write_env(hooks: Path, **values):
    env = hooks / "fleetctl-hooks.env"
    lines = [l for l in env.read_text().splitlines() if l.split("=")[0] not in values]
    env.write_text("\n".join(lines + [f"{k}={v}" for k, v in values.items()]) + "\n")


@pytest.mark.slurm
@pytest.mark.parametrize("breakage", ["crash", "hang"])
def test_broken_fleetctl_in_prolog_drains_nothing(lab, hooks, tmp_path, breakage):
    if breakage == "crash":
        bad = tmp_path / "broken-site.toml"
        bad.write_text("[cluster\nname = ")
        _write_env(hooks, FLEETCTL_SITE=str(bad))
    else:
        hang = tmp_path / "fleetctl-hangs"
        hang.write_text("#!/bin/sh\nsleep 600\n")
        hang.chmod(0o755)
        _write_env(hooks, FLEETCTL=str(hang), FLEETCTL_PROLOG_BUDGET="2")
    job = sbatch(lab, "-w", "node4", "-N1", "--wrap", "true")
    try:
        wait_for(lambda: job_state(lab, job).get("JobState") == "COMPLETED", timeout=60)
    finally:
        cancel(lab, job)
    assert "DRAIN" not in scontrol_node(lab, "node4")["State"]
    log = (hooks.parent / "hooks.log").read_text()
    assert "fail-open" in log


def test_escalation_reruns_suspects_at_the_next_level(lab, capsys, clean):
    assert cli_run(["lab", "fault", "add", "node2:gpu1", "--temp", "88"]) == 0  # a warning
    rc, report = fleetctl_json(capsys, "audit", "node[1-2]", "--level", "quick", "--escalate",
                               "--since", "1s")
    nodes = by_node(report)
    # Still warm at standard, so on to deep, whose tools the lab lacks: skipped, never passed.
    assert nodes["node2"]["escalated_from"] == ["quick", "standard"] and nodes["node2"]["level"] == "deep"
    deep = {r["code"]: r for r in nodes["node2"]["results"] if r["code"].startswith("deep.")}
    assert deep and all(r["status"] == "skipped" and r["message"] for r in deep.values()), deep
    assert nodes["node1"]["escalated_from"] == [] and nodes["node1"]["level"] == "quick"
    assert rc == 1


@pytest.mark.slurm
def test_epilog_drains_node_after_xid_during_job(lab, hooks, tmp_path):
    # The Prolog marks the job's start and keeps its check document; the Epilog judges kernel-log
    # lines from then on only and what got worse since that document.
    _write_env(hooks, FLEETCTL_HOOK_STATE_DIR=str(tmp_path / "state"))
    job = sbatch(lab, "-w", "node2", "-N1", "--wrap", "sleep 4")
    log = hooks.parent / "hooks.log"
    try:
        # A job shows RUNNING while its Prolog still runs: inject the fault only after the Prolog's
        # verdict, so that the fault happens during the job.
        wait_for(lambda: log.exists() and f"fleetctl prolog node=node2 job={job} " in log.read_text())
        assert job_state(lab, job).get("JobState") == "RUNNING"
        assert cli_run(["lab", "fault", "add", "node2:gpu0", "--xid", "48"]) == 0
        state = wait_for(lambda: (s := scontrol_node(lab, "node2")) and "DRAIN" in s["State"] and s,
                         timeout=60)
        # Xid 48 comes with the double-bit ECC error it reports: either may be named first.
        assert re.match(r"fleetctl:(xid\.48|gpu\.ecc) .*\(epilog\)$", state["Reason"]), state
        # The node is drained while the Epilog still runs; the job itself is not failed by it.
        final = wait_for(lambda: (j := job_state(lab, job)).get("JobState") not in
                         ("RUNNING", "COMPLETING", None) and j, timeout=60)
        assert final["JobState"] == "COMPLETED", final
    finally:
        cancel(lab, job)
    text = log.read_text()
    assert f"fleetctl prolog node=node2 job={job} verdict=pass" in text
    assert f"fleetctl epilog node=node2 job={job} verdict=fail" in text
    last = json.loads((tmp_path / "state" / "last-epilog-node2.json").read_text())
    rose = [f for f in last["new_findings"] if f["code"] == "change.gpu.ecc"]
    assert rose and "volatile_dbe rose from 0 to 1" in rose[0]["message"], last["new_findings"]
    assert not list((tmp_path / "state").glob("job-*"))  # the Epilog removes the job's mark


@pytest.mark.slurm
def test_healthcheck_drains_then_resumes_its_own_drain(lab, hooks):
    hook = str(hooks / "fleetctl-healthcheck")
    env = ["env", "SLURMD_NODENAME=node3"]
    assert cli_run(["lab", "fault", "add", "node3:gpu1", "--pcie-width", "8"]) == 0
    r = lab.run_in("node3", env + [hook], check=False)
    assert r.returncode == 0, r.stderr  # Slurm ignores its exit status: it drains the node itself
    state = scontrol_node(lab, "node3")
    assert "DRAIN" in state["State"] and state["Reason"].startswith("fleetctl:gpu.pcie "), state
    assert cli_run(["lab", "fault", "clear", "node3:gpu1"]) == 0
    r = lab.run_in("node3", env + [hook], check=False)
    assert r.returncode == 0, r.stderr
    assert "DRAIN" not in scontrol_node(lab, "node3")["State"]
    log = (hooks.parent / "hooks.log").read_text()
    assert "verdict=fail drained=1" in log and "resumed=1" in log
