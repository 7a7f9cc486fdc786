"""No rollback under the lab's Slurm: an sbatch job of 5 nodes, `srun fleetctl run --standbys 1`, 4
training ranks (gloo over the lab's management network) and 1 warm standby. Rank 2's process on
node3 is SIGKILLed mid-run: the standby on node5 takes rank 2 with its state from a peer's memory,
training goes on in the same job step (no requeue, no disk read), and the parameters at the end are
bit-identical to a run without the fault; the used standby is replaced by a one-node job that joins
the run (`--replenish`), and a second kill goes to it. The fallback: in a job that also takes disk snapshots, a
second kill with no standby left ends the run for requeue; task 0 writes a `rank_lost` event on the
node, act's swap policy drains it, releases a spare and requeues the job, which restores its newest
snapshot on the new nodes and ends bit-identical too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.lab.topology import MGMT_DEV
from labutil import wait_for
from runutil import kill_when, launch, wait_all

pytestmark = [pytest.mark.lab, pytest.mark.lab8]
REPO = Path(__file__).resolve().parents[2]
STEPS = 300
JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
# MASTER_PORT left to `fleetctl run`'s default (29400 + job id mod 20000): where act's migrate looks
srun --no-kill --output="$OUT/launcher-%t.json" --error="$OUT/launcher-%t.log" --open-mode=append \\
    "$PY" -m fleetctl run --standbys 1 --dead-after 3 --format json @RUN@ -- \\
    "$PY" "$TRAIN" --out "$OUT" --steps $STEPS --sleep 0.02 @TRAIN@
echo $? > "$OUT/srun.rc.${SLURM_RESTART_COUNT:-0}"
"""


def _submit(lab, out: Path, requeue: bool = False, run: str = "", train: str = "") -> str:
    out.mkdir(parents=True)
    script = out / "job.sh"
    script.write_text(JOB.replace("@RUN@", run).replace("@TRAIN@", train))
    env = {**lab.command_env(), "PY": sys.executable, "TRAIN": str(REPO / "tests" / "resilient_train.py"),
           "LAB_ADDRS": json.dumps(lab.state["addresses"]["mgmt"]), "GLOO_SOCKET_IFNAME": MGMT_DEV,
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "OUT": str(out), "STEPS": str(STEPS)}
    return subprocess.run(["sbatch", "--parsable", "-N5", "-w", "node[1-5]", "--ntasks-per-node=1", "--no-kill",
                           *(["--requeue"] if requeue else []), "--open-mode=append",
                           "--output", str(out / "batch.log"), "--export=ALL", str(script)],
                          env=env, capture_output=True, text=True, timeout=30, check=True).stdout.strip()


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> str:
    """The parameters' digest of the same job without a fault (run locally: the result does not depend
    on where the ranks run)."""
    out = tmp_path_factory.mktemp("reference")
    assert wait_all(launch(out, 4, 0, STEPS, sleep=0.0)) == [0, 0, 0, 0]
    return json.loads((out / "final.json").read_text())["sha256"]


def test_a_killed_rank_goes_to_the_standby_and_the_used_standby_is_replaced(lab, tmp_path, expected):
    """Rank 2's process killed: the standby (node5) takes rank 2; task 0 submits a one-node job
    (`--replenish 1`, on node6) whose launcher joins the run as a new standby; rank 1's process killed
    next goes to it. One job step, never requeued, bit-identical."""
    from fleetctl.recovery.migrate import connect, hellos

    out = tmp_path / "job"
    job = _submit(lab, out, run=f"--replenish 1 --replenish-args '-w node6 --output={out}/standby-%j.log'",
                  train="--sleep 0.1")  # ~30 s of training: time for the replacement to start
    try:
        kill_when(out, 2, 40)
        killed = time.monotonic()
        resumed = wait_for(lambda: _generations(out), timeout=60, step=0.2)
        print(f"generation 1 published {time.monotonic() - killed:.1f} s after the kill: {resumed}")
        store = connect(lab.state["addresses"]["mgmt"]["node1"], 29400 + int(job) % 20000)
        joined = wait_for(lambda: 5 in hellos(store) and hellos(store)[5], timeout=60, step=0.2)
        print(f"the replacement standby said hello {time.monotonic() - killed:.1f} s after the kill: {joined}")
        assert joined.node == "node6"
        progress = int((out / "progress").read_text())
        assert progress < STEPS - 30, f"training reached {progress} before the replacement joined"
        os.kill(int((out / "pid-1").read_text()), signal.SIGKILL)
        rc = wait_for(lambda: (out / "srun.rc.0").exists() and (out / "srun.rc.0").read_text().strip(), timeout=240)
        logs = [(out / f"launcher-{t}.log").read_text()[-400:] for t in range(5)]
        assert rc == "0", logs
        final = json.loads((out / "final.json").read_text())
        assert final["end"] == "done" and final["sha256"] == expected
        launcher0 = json.loads((out / "launcher-0.json").read_text())
        [first, second, done] = launcher0["generations"]
        assert first["lost"] == {"2": 2} and "killed by signal 9" in first["reason"] and done["end"] == "done"
        assert second["lost"] == {"1": 1} and "killed by signal 9" in second["reason"]
        [standby_job] = launcher0["replenish"]["submitted"]
        assert json.loads((out / "rank-2.json").read_text())["slot"] == 4
        assert json.loads((out / "rank-1.json").read_text())["slot"] == 5  # the joined standby trained
        record = subprocess.run(["scontrol", "show", "job", job], env=lab.command_env(), capture_output=True,
                                text=True, timeout=30).stdout
        assert "Restarts=0" in record, record  # the same job, never requeued
        ended = wait_for(lambda: _ended(lab, standby_job), timeout=60, step=0.5)
        assert ended in ("COMPLETED", "CANCELLED"), ended
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), capture_output=True, timeout=30)


def _ended(lab, job: str) -> str | None:
    """The job's state once it is no longer pending or running (None before)."""
    out = subprocess.run(["scontrol", "show", "job", job, "--oneliner"], env=lab.command_env(), capture_output=True,
                         text=True, timeout=30).stdout
    state = out.split("JobState=")[1].split()[0] if "JobState=" in out else "GONE"
    return None if state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") else state


RESERVATION = "fleetctl-spares"
POLICY = ["", "[[act.policies]]", 'name = "rank-lost"', 'source = "lens"', 'element_types = ["host"]',
          'metrics = ["rank_lost"]', 'actions = ["swap"]', "cooldown_s = 0"]


MIGRATE_POLICY = ["", "[[act.policies]]", 'name = "move-off"', 'source = "lens"', 'element_types = ["host"]',
                  'metrics = ["straggler"]', 'actions = ["migrate", "swap"]', "cooldown_s = 0"]


@pytest.fixture
def fallback_lab(lab, tmp_path, monkeypatch):
    """The lab's site file plus [spares] and [act] with a swap policy on `host.rank_lost` and a
    migrate-else-swap policy on `host.straggler`."""
    lines = [lab.site_file.read_text(), "", "[spares]", f'state_dir = "{tmp_path / "spares"}"',
             "max_audit_age_s = 600", "", "[act]", "enabled = true", f'state_dir = "{tmp_path / "act"}"',
             f'lens_events = "{tmp_path / "events.jsonl"}"', "max_drain_pct = 50", "max_drains_per_hour = 4",
             *POLICY, *MIGRATE_POLICY]
    site = tmp_path / "site.toml"
    site.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("FLEETCTL_SITE", str(site))
    jobs: list[str] = []
    yield jobs
    env = lab.command_env()
    for job in jobs:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
    subprocess.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], env=env, capture_output=True, timeout=30)
    subprocess.run(["scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME"], env=env,
                   capture_output=True, timeout=30)


def test_act_migrates_then_swaps_when_no_standby_is_left_and_the_job_restores_its_snapshot(
        lab, tmp_path, capsys, fallback_lab, expected):
    """One job, act's two paths: a `straggler` event on node2 and the policy ["migrate", "swap"]: the
    rank goes to the standby, no swap; then rank 3's process killed with no standby left: the run
    ends for requeue, task 0 writes `rank_lost` on node4, the policy ["swap"] moves the whole job onto
    a spare, where it restores its newest disk snapshot."""
    from fleetctl.cli import run as cli_run

    def act_once() -> list[dict]:
        capsys.readouterr()
        cli_run(["--format", "json", "act", "run", "--once"])
        return json.loads(capsys.readouterr().out)["decisions"]

    capsys.readouterr()
    assert cli_run(["--format", "json", "spares", "add", "node[6-7]"]) == 0  # audited as they join
    out, events = tmp_path / "job", tmp_path / "events.jsonl"
    job = _submit(lab, out, requeue=True, run=f"--events {events} --requeue-wait 120",
                  train=f"--snap {tmp_path / 'snap'}")
    fallback_lab.append(job)
    wait_for(lambda: (out / "progress").exists() and int((out / "progress").read_text() or 0) >= 30, timeout=120)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    events.write_text(json.dumps({  # the event `fleetctl job watch` writes for a slow rank
        "v": 1, "id": "ev-20261204T070000-0007", "kind": "open", "time": now, "state": "open",
        "element": {"type": "host", "id": "node2"}, "metric": "straggler", "severity": "critical",
        "confidence": 0.95, "evidence": {"rank": 1, "job": job, "slower_pct": 31.0, "message": "rank 1 slow"},
        "first_seen": now, "last_seen": now, "flap": None, "jobs": [{"job_id": job}]}) + "\n")
    decisions = act_once()
    assert [(d["action"], d["phase"]) for d in decisions] == [("migrate", "done"), ("swap", "refused")], decisions
    assert decisions[0]["result"]["moved"] == {"1": {"from_slot": 1, "to_slot": 4, "to_node": "node5"}}
    assert "not needed" in decisions[1]["why"]

    kill_when(out, 3, 80)  # no standby left now (a disk snapshot of generation 1 exists by then)
    lost = wait_for(lambda: [r for r in map(json.loads, events.read_text().splitlines())
                             if r["metric"] == "rank_lost"], timeout=60, step=0.2)
    assert [(r["element"]["id"], r["evidence"]["rank"], r["jobs"]) for r in lost] == [("node4", 3, [{"job_id": job}])]
    decisions = act_once()
    assert [(d["action"], d["phase"]) for d in decisions] == [("swap", "done")], decisions

    rc = wait_for(lambda: (out / "srun.rc.1").exists() and (out / "srun.rc.1").read_text().strip(), timeout=300)
    assert rc == "0", (out / "launcher-0.log").read_text()[-600:]
    record = subprocess.run(["scontrol", "show", "job", job], env=lab.command_env(), capture_output=True,
                            text=True, timeout=30).stdout
    assert "Restarts=1" in record and "node4" not in record.split("NodeList=")[1].split()[0], record
    assert int((out / "restored").read_text()) >= 40  # its newest disk snapshot, after the migration
    assert json.loads((out / "final.json").read_text())["sha256"] == expected


def test_fleetctl_migrate_moves_a_rank_at_a_step_boundary_and_loses_nothing(tmp_path, expected):
    """`fleetctl migrate` from the command line, on the same job run by local launchers (each task its
    own "node"; no Slurm needed, so the store is given): nothing lost, bit-identical. The job carries
    4 MB of state that replicas copy, with `every="auto"` and a budget of 0.2 % of the loop: the
    ranks agree on a K > 1, and the rank leaves at the next iteration where every rank took a copy."""
    out = tmp_path / "migrate"
    procs = launch(out, 5, 1, STEPS, sleep=0.03,  # ~10 s: `fleetctl migrate` starts (imports torch) meanwhile
                   train_args=("--every", "auto", "--state-mb", "4", "--replica-budget", "0.002"))
    wait_for(lambda: (out / "progress").exists() and int((out / "progress").read_text() or 0) >= 20, timeout=120)
    store = f"127.0.0.1:{(out / 'port').read_text()}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    moved = subprocess.run([sys.executable, "-m", "fleetctl", "migrate", "1", "local1", "--store", store,
                            "--format", "json"], capture_output=True, text=True, timeout=120, env=env)
    assert moved.returncode == 0, moved.stderr
    doc = json.loads(moved.stdout)
    assert doc["moved"] == {"1": {"from_slot": 1, "to_slot": 4, "to_node": "local4"}} and doc["seconds"] < 10
    assert wait_all(procs) == [0] * 5
    assert json.loads((out / "final.json").read_text())["sha256"] == expected
    ranks = [json.loads(p.read_text()) for p in out.glob("rank-*.json")]
    histories = [r["history"] for r in ranks]
    assert doc["resume"] == max(h["last_step"] for hist in histories for h in hist if h["gen"] == 0)  # nothing lost
    assert all(r["cadence"]["every"] == "auto" and r["cadence"]["k"] > 1 for r in ranks), [r["cadence"] for r in ranks]
    again = subprocess.run([sys.executable, "-m", "fleetctl", "migrate", "1", "local0", "--store", store],
                           capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 3 and "unreachable" in again.stderr  # the job is over, its store gone


def test_a_rank_hung_in_its_own_work_is_killed_and_its_rank_goes_to_the_standby(tmp_path, expected):
    """A deadlock in rank 1's loop (process and heartbeat alive, no iteration): the controller judges
    the hang from the ranks' progress (3 x the median iteration + the floor, 2 s here), kills it, and
    the standby takes rank 1; the hang is an event in the log for act. Bit-identical at the end."""
    out = tmp_path / "hang"
    events = tmp_path / "events.jsonl"
    procs = launch(out, 5, 1, STEPS, sleep=0.01, train_args=("--hang", "1:40"),
                   run_args=("--hang-floor", "2", "--events", str(events)))
    assert wait_all(procs) == [0] * 5
    assert json.loads((out / "final.json").read_text())["sha256"] == expected
    log = (out / "launcher-0.log").read_text()
    assert "slot 1 lost: hung: rank 1 is stuck in its own work" in log, log[-3000:]
    records = [json.loads(line) for line in events.read_text().splitlines()]
    hangs = [(r["kind"], r["element"]["id"], r["evidence"]["rank"]) for r in records if r["metric"] == "hang"]
    assert hangs == [("open", "local1", 1), ("close", "local1", 1)], records
    stalled = [r for r in records if r["metric"] == "hang"][0]["evidence"]["seconds_without_progress"]
    assert 2.0 < stalled < 6.0  # judged within a look (1 s) of its threshold


def test_a_job_being_cancelled_ends_the_run_without_replacing_anyone(tmp_path):
    """SIGTERM to every task, as scancel, preemption or the time limit send it: the processes that
    end are not lost ranks; no standby takes one, the run ends (requeue: Slurm may run it again)."""
    out = tmp_path / "cancel"
    procs = launch(out, 3, 1, STEPS, sleep=0.05)
    wait_for(lambda: (out / "progress").exists() and int((out / "progress").read_text() or 0) >= 10, timeout=120)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert wait_all(procs, 60) == [2, 2, 2]
    [end] = json.loads((out / "launcher-0.json").read_text())["generations"]
    assert end["end"] == "requeue" and end["lost"] == {} and "SIGTERM to task 0" in end["reason"], end


def _generations(out: Path):
    """The history rank 0's process keeps is written at the end; the launcher logs each change."""
    log = out / "launcher-0.log"
    return log.exists() and "generation 1" in log.read_text() and log.read_text()
