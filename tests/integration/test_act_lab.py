"""The Detect -> Act loop on the lab's real Slurm, with a 2-node spare pool (node3, node4).

1. An Xid on a node of a running 2-node training job (fleetctl.snapshot, torch/gloo): `fleetctl act
   run` audits, and by policy snapshots the job, drains the node, releases a spare and requeues the
   job excluding the node; the job runs again on node1 + a spare and restores that snapshot. A lens
   loss event on a link the job crosses then leads to the configured action (a snapshot). `explain`
   gives the account of the Xid, the link event and the drained node.
2. A storm of Xid findings: a crash between the pending record and the drain drains nothing; the
   next run recovers the pending action as abandoned and the budget refuses all drains but one.

Each test restores the lab: faults cleared, nodes resumed, reservation deleted, jobs cancelled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.lab.topology import MGMT_DEV
from fleetctl.slurm.parse import expand_nodelist, parse_record

from labutil import wait_for
from tests.support.crash import CRASH_EXIT

pytestmark = [pytest.mark.lab, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tests" / "snapshot_train.py"
RESERVATION = "fleetctl-spares"

JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000 + 7 * ${SLURM_RESTART_COUNT:-0}))
echo "start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST"
srun --kill-on-bad-exit=1 "$PY" "$TRAIN" --dir "$SNAP" --steps $STEPS --pace 0.1 --out "$OUT"
"""


POLICIES = ["", "[[act.policies]]", 'name = "xid-fatal"', 'codes = ["xid.79", "xid.48"]',
            'actions = ["snapshot", "drain", "swap"]',
            "", "[[act.policies]]", 'name = "lossy-link"', 'source = "lens"', 'element_types = ["link"]',
            'metrics = ["loss"]', 'actions = ["snapshot"]', "cooldown_s = 0"]
LADDER = ["", "[[act.policies]]", 'name = "xid-ladder"', 'codes = ["xid.79", "xid.48"]', "cooldown_s = 0",
          'actions = ["drain", "reset-gpu", "resume", "service-request"]']
# The lab's simulated GPUs stand behind the ladder's two node-side commands (docs/act.md).
LAB_GPU_COMMANDS = {"gpu_busy_command": [sys.executable, "-m", "fleetctl.lab.gpureset", "--busy", "{node}", "{gpu}"],
                    "gpu_reset_command": [sys.executable, "-m", "fleetctl.lab.gpureset", "{node}", "{gpu}"]}


def act_site(lab, tmp_path: Path, policies=POLICIES, **act) -> Path:
    """The lab's site file plus [spares] and [act] (enabled, in tmp_path)."""
    extra = {"max_drain_pct": 50, "max_drains_per_hour": 4, "snapshot_timeout_s": 40, **act}
    lines = [lab.site_file.read_text(), "", "[spares]", f'state_dir = "{tmp_path / "spares"}"',
             "max_audit_age_s = 600", "", "[act]", "enabled = true", f'state_dir = "{tmp_path / "act"}"',
             f'lens_events = "{tmp_path / "events.jsonl"}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    lines += policies
    path = tmp_path / "site.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def fleetctl_json(capsys, *args):
    capsys.readouterr()
    rc = cli_run(["--format", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


def job_record(lab, job: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", job, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30).stdout
    return parse_record(out.splitlines()[0]) if out.strip() else {}


def node_record(lab, node: str) -> dict:
    out = subprocess.run(["scontrol", "show", "node", node, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30, check=True).stdout
    rec = parse_record(out)
    rec.setdefault("Reason", "")
    return rec


@pytest.fixture
def restore_lab(lab, monkeypatch):
    jobs: list[str] = []
    yield jobs
    env = lab.command_env()
    for job in jobs:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
    cli_run(["lab", "fault", "clear"])
    subprocess.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], env=env, capture_output=True,
                   timeout=30)
    subprocess.run(["scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME"], env=env,
                   capture_output=True, timeout=30)


def test_xid_snapshot_drain_swap_restore_then_link_event_and_explain(lab, tmp_path, capsys, monkeypatch,
                                                                      restore_lab):
    pytest.importorskip("torch") if not os.environ.get("CI") else None
    from fleetctl.snapshot import layout, registry

    site = act_site(lab, tmp_path)
    monkeypatch.setenv("FLEETCTL_SITE", str(site))
    reg, snap, out, log = tmp_path / "registry", tmp_path / "snap", tmp_path / "final.pt", tmp_path / "job.log"
    reg.mkdir()
    monkeypatch.setenv(registry.ENV_REGISTRY, str(reg))

    # The pool: node3 and node4, audited as they join.
    rc, change = fleetctl_json(capsys, "spares", "add", "node[3-4]")
    assert change["changed"] == ["node3", "node4"], change
    rc, status = fleetctl_json(capsys, "spares", "status")
    assert status["free"] == ["node3", "node4"] and {m["verdict"] for m in status["members"]} <= {"ok", "warn"}

    script = tmp_path / "job.sh"
    script.write_text(JOB)
    env = {**lab.command_env(), "PY": sys.executable, "TRAIN": str(TRAIN), "SNAP": str(snap), "OUT": str(out),
           "STEPS": "400", "LAB_ADDRS": json.dumps(lab.state["addresses"]["mgmt"]), "GLOO_SOCKET_IFNAME": MGMT_DEV,
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", registry.ENV_REGISTRY: str(reg)}
    # Slurm 25.11+ (the sid stage): expedited requeue, the job starts again at once after the swap
    expedite = tuple(int(x) for x in lab.state["slurm"]["version"].split(".")) >= (25, 11)
    requeue = "--requeue=expedite" if expedite else "--requeue"
    job = subprocess.run(["sbatch", "--parsable", "-N2", "-w", "node[1-2]", "--ntasks-per-node=1", requeue,
                          "--open-mode=append", f"--output={log}", "--export=ALL", str(script)],
                         env=env, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    restore_lab.append(job)

    def progress() -> int:
        try:
            return int((snap / "progress").read_text())
        except (OSError, ValueError):
            return -1

    wait_for(lambda: progress() >= 10, timeout=120)
    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--xid", "79"]) == 0
    injected = time.monotonic()
    rc, run = fleetctl_json(capsys, "act", "run", "--once", "--audit", "node[1-2]")
    taken = {(d["action"], d["phase"]) for d in run["decisions"]}
    assert {("snapshot", "done"), ("drain", "done"), ("swap", "done")} <= taken, run["decisions"]
    snap_step = next(d for d in run["decisions"] if d["action"] == "snapshot")["result"]["step"]
    assert node_record(lab, "node2")["Reason"].startswith("fleetctl:xid.79 act-")

    def running_again():
        rec = job_record(lab, job)
        return rec.get("JobState") == "RUNNING" and int(rec.get("Restarts", "0")) >= 1 and rec
    try:
        rec = wait_for(running_again, timeout=60, step=0.5)
    except AssertionError:
        raise AssertionError(f"job not running again: {job_record(lab, job)}") from None
    elapsed = time.monotonic() - injected
    nodes = expand_nodelist(rec["NodeList"])
    assert "node2" not in nodes and "node1" in nodes and set(nodes) & {"node3", "node4"}, nodes
    wait_for(lambda: f"restored={snap_step}" in log.read_text(), timeout=60)
    rc, status = fleetctl_json(capsys, "spares", "status")
    assert len(status["members"]) == 1
    print(f"fault to running again: {elapsed:.1f} s (expedited requeue: {expedite})")
    if expedite:  # no credential-lifetime wait (cred_expire=20 in the lab): well under it
        assert rec.get("ExpeditedRequeue") == "Yes" and elapsed < 15, (elapsed, rec)

    # A lens loss event on a link the job crosses: the configured action (a snapshot) for that job.
    before = layout.read_latest(snap)
    event = {"v": 1, "id": "ev-20261201T070000-0042", "kind": "open", "time": "2026-12-01T07:00:03Z",
             "state": "open", "element": {"type": "link", "id": "leaf1--spine1"}, "metric": "loss",
             "severity": "critical", "confidence": 0.98, "evidence": {"loss_pct": 5.1, "probes": 4000},
             "first_seen": "2026-12-01T07:00:00Z", "last_seen": "2026-12-01T07:00:03Z", "flap": None,
             "jobs": [{"job_id": job, "user": "root", "nodes": rec["NodeList"], "partition": "gpu"}]}
    (tmp_path / "events.jsonl").write_text(json.dumps(event) + "\n")
    rc, run = fleetctl_json(capsys, "act", "run", "--once")
    assert [(d["action"], d["phase"]) for d in run["decisions"]] == [("snapshot", "done")], run["decisions"]
    assert layout.read_latest(snap) > before

    rc, finding = fleetctl_json(capsys, "explain", "node2:xid.79")
    assert finding["what"].startswith("GPU error Xid 79: GPU has fallen off the bus")
    assert {a["action"] for a in finding["fleetctl"] if a["phase"] == "done"} >= {"drain"}
    assert finding["next"].startswith("reboot the node")
    rc, ev = fleetctl_json(capsys, "explain", "ev-20261201T070000-0042")
    assert ev["what"] == "packet loss of 5.1 % on link leaf1--spine1" and ev["jobs"][0]["job_id"] == job
    assert ev["fleetctl"][0]["action"] == "snapshot" and ev["fleetctl"][0]["phase"] == "done"
    rc, node = fleetctl_json(capsys, "explain", "node2")
    assert node["what"].startswith("node2 is drained by fleetctl for xid.79 (action act-")
    assert "spares replenish" in node["next"]


def test_crash_mid_policy_drains_nothing_and_the_budget_refuses_a_storm(lab, tmp_path, capsys, monkeypatch,
                                                                         restore_lab):
    site = act_site(lab, tmp_path, max_drains_per_hour=1)
    monkeypatch.setenv("FLEETCTL_SITE", str(site))
    report = {"schema": "fleetctl.audit/1", "level": "quick", "started": time.time(), "finished": time.time(),
              "fleet": [], "nodes": [
                  {"node": n, "status": "fail", "complete": True, "transport": "ok", "error": "",
                   "results": [{"code": "xid.79", "status": "fail", "message": "GPU has fallen off the bus",
                                "action": "reboot", "subject": "0000:1b:00", "evidence": {}}]}
                  for n in ("node1", "node2", "node3")]}
    path = tmp_path / "storm.json"
    path.write_text(json.dumps(report))
    # `act run` whose engine crashes between the pending record and the drain (tests/support/crash.py)
    crashed = subprocess.run([sys.executable, "-m", "tests.support.crash", "drain:after-pending", "act", "run",
                              "--once", "--report", str(path)],
                             env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert crashed.returncode == CRASH_EXIT, crashed.stderr[-2000:]
    assert all("DRAIN" not in node_record(lab, n)["State"] for n in ("node1", "node2", "node3"))

    rc, run = fleetctl_json(capsys, "act", "run", "--once", "--report", str(path))
    assert [r["phase"] for r in run["recovered"]] == ["abandoned"]
    drains = [d for d in run["decisions"] if d["action"] == "drain"]
    assert [d["phase"] for d in drains] == ["done", "refused", "refused"], drains
    assert all("limit is 1 per hour" in d["why"] for d in drains[1:])
    drained = [n for n in ("node1", "node2", "node3") if "DRAIN" in node_record(lab, n)["State"]]
    assert drained == [drains[0]["targets"]["nodes"][0]]
    assert rc == 1  # refusals are reported in the exit code

    rc, undone = fleetctl_json(capsys, "act", "undo", drains[0]["id"])
    assert undone["phase"] == "undone"
    assert "DRAIN" not in node_record(lab, drained[0])["State"]


def test_ladder_reset_heals_then_the_second_fault_is_suspect_and_a_storm_opens_the_breaker(
        lab, tmp_path, capsys, monkeypatch, restore_lab):
    """The remediation ladder, the incident memory and the breaker on the lab's real Slurm: an Xid 48
    (the catalogue: reset the GPU) -> drain -> GPU reset (the lab's simulated GPU) -> re-audit (only
    what follows the reset) -> resume;
    the same GPU failing again within the window -> suspect: drained, no reset, a ticket, no resume,
    held back by `spares replenish`, explained with its history; then a storm over the partition ->
    the breaker refuses every drain, with one line."""
    site = act_site(lab, tmp_path, LADDER, max_drain_pct=100, max_drains_per_hour=100, breaker_pct=30,
                    breaker_min_nodes=2, **LAB_GPU_COMMANDS)
    monkeypatch.setenv("FLEETCTL_SITE", str(site))

    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--xid", "48"]) == 0
    rc, run = fleetctl_json(capsys, "act", "run", "--once", "--audit", "node2")
    steps = [(d["action"], d["phase"]) for d in run["decisions"] if d["detection"]["code"] == "xid.48"]
    assert steps == [("drain", "done"), ("reset-gpu", "done"), ("resume", "done")], run["decisions"]
    reset = next(d for d in run["decisions"] if d["action"] == "reset-gpu")["result"]
    assert reset["reaudit"] == {"status": "ok", "failing": []} or reset["reaudit"]["status"] == "warn", reset
    assert "DRAIN" not in node_record(lab, "node2")["State"]
    rc, faults = fleetctl_json(capsys, "lab", "fault", "list")
    assert not [f for f in faults if f.get("node") == "node2"], faults  # the reset cleared the lab's fault

    # The same GPU again, within the window: its second incident makes it suspect.
    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--xid", "48"]) == 0
    rc, run = fleetctl_json(capsys, "act", "run", "--once", "--audit", "node2")
    decisions = [d for d in run["decisions"] if d["detection"]["code"] == "xid.48"]
    steps = [(d["action"], d["phase"]) for d in decisions]
    assert steps == [("drain", "done"), ("reset-gpu", "refused"), ("resume", "refused"),
                     ("service-request", "done")], run["decisions"]
    assert "suspect" in decisions[2]["why"] and "DRAIN" in node_record(lab, "node2")["State"]
    ticket = json.loads(Path(decisions[3]["result"]["ticket"]).read_text())
    assert ticket["node"] == "node2" and ticket["history"]["count"] == 2 and ticket["history"]["suspect"]
    rc, held = fleetctl_json(capsys, "spares", "replenish", "--dry-run")
    assert "node2" in held["held"] and "node2" not in held["candidates"], held
    rc, node = fleetctl_json(capsys, "explain", "node2")
    assert node["history"]["suspect"] and node["history"]["count"] == 2, node
    assert any("mean time between incidents" in line for line in node["why"])

    # A storm: Xid 79 on node3 and node4 while node2 is out. The catalogue sends Xid 79 to a reboot,
    # which this policy does not list: no reset, no resume, a ticket, and the node stays out. The
    # first drain makes 2 of 4 (50 %); the breaker (30 %, at least 2 nodes) refuses the next node's
    # every remediation and its ticket, fleet-wide, with one line.
    for n in ("node3", "node4"):
        assert cli_run(["lab", "fault", "add", f"{n}:gpu0", "--xid", "79"]) == 0
    rc, run = fleetctl_json(capsys, "act", "run", "--once", "--audit", "node[3-4]")
    first, second = ([d for d in run["decisions"] if d["targets"].get("nodes") == [n]] for n in ("node3", "node4"))
    assert [(d["action"], d["phase"]) for d in first] == [
        ("drain", "done"), ("reset-gpu", "refused"), ("resume", "refused"), ("service-request", "done")], first
    assert "the check catalogue's action for xid.79 is reboot" in first[1]["why"]
    assert {d["phase"] for d in second} == {"refused"} and len(second) == 4, second
    assert all(d["why"].startswith("circuit breaker open: 2 of 4 nodes of partition") for d in second), second
    assert "DRAIN" in node_record(lab, "node3")["State"] and "DRAIN" not in node_record(lab, "node4")["State"]


def test_ladder_reboot_through_slurm_brings_the_node_back(lab, tmp_path, capsys, monkeypatch, restore_lab):
    """The ladder's second rung on the lab's real Slurm: Xid 48 on a busy GPU is not reset, so the node is
    rebooted through Slurm (`scontrol reboot ASAP nextstate=RESUME`); the lab's RebootProgram
    (fleetctl.lab.reboot) clears the node's simulated faults and starts its slurmd with a new boot
    time, and Slurm puts the node back in service by itself."""
    policy = [line.replace('"drain", "reset-gpu", "resume"', '"drain", "reset-gpu", "reboot", "resume"')
              for line in LADDER]
    site = act_site(lab, tmp_path, policy, max_drain_pct=100, max_drains_per_hour=100, **LAB_GPU_COMMANDS)
    monkeypatch.setenv("FLEETCTL_SITE", str(site))
    from fleetctl.lab import paths

    busy = paths.lab_dir() / "hosts" / "node1" / "gpu1.busy"
    busy.write_text("777\n")
    try:
        assert cli_run(["lab", "fault", "add", "node1:gpu1", "--xid", "48"]) == 0  # the catalogue: reset
        rc, run = fleetctl_json(capsys, "act", "run", "--once", "--audit", "node1")
    finally:
        busy.unlink(missing_ok=True)
    decisions = [d for d in run["decisions"] if d["detection"]["code"] == "xid.48"]
    steps = [(d["action"], d["phase"]) for d in decisions]
    assert steps == [("drain", "done"), ("reset-gpu", "failed"), ("reboot", "done"), ("resume", "refused")], \
        run["decisions"]
    assert "runs 1 process(es) (777)" in decisions[1]["why"]
    assert "Slurm resumes it after its reboot" in decisions[3]["why"]
    try:
        # back in service; Slurm 24.11 keeps the old reason on the idle node, 22.05 clears it
        wait_for(lambda: node_record(lab, "node1")["State"] == "IDLE", timeout=45, step=0.5)
    except AssertionError:
        raise AssertionError(f"node1 not back: {node_record(lab, 'node1')}") from None
    assert (paths.lab_dir() / "hosts" / "node1" / "kern.log").read_text() == ""  # a new boot's log
    rc, faults = fleetctl_json(capsys, "lab", "fault", "list")
    assert not [f for f in faults if f.get("node") == "node1"], faults
    # A second reboot of the same node (its slurmd now in a time namespace of its own) comes back too.
    subprocess.run(["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=fleetctl:test again"],
                   env=lab.command_env(), check=True, timeout=30)
    subprocess.run(["scontrol", "reboot", "ASAP", "nextstate=RESUME", "node1"], env=lab.command_env(),
                   check=True, timeout=30)
    wait_for(lambda: "REBOOT" in node_record(lab, "node1")["State"] or node_record(lab, "node1")["State"] == "IDLE",
             timeout=10, step=0.2)
    try:
        wait_for(lambda: node_record(lab, "node1")["State"] == "IDLE", timeout=30, step=0.5)
    except AssertionError:
        raise AssertionError(f"node1 not back from its second reboot: {node_record(lab, 'node1')}") from None
    # The lab knows its new slurmd (lab status, lab down): its start time as the machine reads it.
    rc, status = fleetctl_json(capsys, "lab", "status")
    assert rc == 0 and not status.get("problems"), status
