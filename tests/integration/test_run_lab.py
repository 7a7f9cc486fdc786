"""No rollback under the lab's Slurm: an sbatch job of 5 nodes, `srun fleetctl run --standbys 1`, 4
training ranks (gloo over the lab's management network) and 1 warm standby. Rank 2's process on
node3 is SIGKILLed mid-run: the standby on node5 takes rank 2 with its state from a peer's memory,
training goes on in the same job step (no requeue, no disk read), and the parameters at the end are
bit-identical to a run without the fault. A second kill, with no standby left, ends the run for
requeue (every task exits 2), and the launcher of task 0 names the lost rank."""

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
export MASTER_PORT=$((22000 + SLURM_JOB_ID % 10000))
srun --no-kill --output="$OUT/launcher-%t.json" --error="$OUT/launcher-%t.log" \\
    "$PY" -m fleetctl run --standbys 1 --dead-after 3 --format json -- \\
    "$PY" "$TRAIN" --out "$OUT" --steps $STEPS --sleep 0.02
echo $? > "$OUT/srun.rc"
"""


def _submit(lab, out: Path) -> str:
    out.mkdir(parents=True)
    script = out / "job.sh"
    script.write_text(JOB)
    env = {**lab.command_env(), "PY": sys.executable, "TRAIN": str(REPO / "tests" / "resilient_train.py"),
           "LAB_ADDRS": json.dumps(lab.state["addresses"]["mgmt"]), "GLOO_SOCKET_IFNAME": MGMT_DEV,
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "OUT": str(out), "STEPS": str(STEPS)}
    return subprocess.run(["sbatch", "--parsable", "-N5", "-w", "node[1-5]", "--ntasks-per-node=1", "--no-kill",
                           "--output", str(out / "batch.log"), "--export=ALL", str(script)],
                          env=env, capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def test_a_killed_rank_goes_to_the_standby_without_a_requeue_and_the_run_ends_for_requeue_when_none_is_left(lab, tmp_path):
    reference = launch(tmp_path / "ref", 4, 0, STEPS, sleep=0.0)  # the same job without a fault, locally
    assert wait_all(reference) == [0, 0, 0, 0]
    expected = json.loads((tmp_path / "ref" / "final.json").read_text())["sha256"]

    out = tmp_path / "job"
    job = _submit(lab, out)
    try:
        kill_when(out, 2, 60)
        killed = time.monotonic()
        resumed = wait_for(lambda: _generations(out), timeout=60, step=0.2)
        print(f"generation 1 published {time.monotonic() - killed:.1f} s after the kill: {resumed}")
        rc = wait_for(lambda: (out / "srun.rc").exists() and (out / "srun.rc").read_text().strip(), timeout=240)
        logs = [(out / f"launcher-{t}.log").read_text()[-400:] for t in range(5)]
        assert rc == "0", logs
        final = json.loads((out / "final.json").read_text())
        assert final["end"] == "done" and final["sha256"] == expected
        [change, done] = json.loads((out / "launcher-0.json").read_text())["generations"]
        assert change["lost"] == {"2": 2} and "killed by signal 9" in change["reason"] and done["end"] == "done"
        standby = json.loads((out / "rank-2.json").read_text())
        assert standby["slot"] == 4 and standby["sha256"] == expected
        record = subprocess.run(["scontrol", "show", "job", job], env=lab.command_env(), capture_output=True,
                                text=True, timeout=30).stdout
        assert "Restarts=0" in record, record  # the same job, never requeued
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), capture_output=True, timeout=30)

    out = tmp_path / "second"  # standby used up by the first kill, then a second kill: requeue
    job = _submit(lab, out)
    try:
        kill_when(out, 1, 30)
        wait_for(lambda: _generations(out), timeout=60, step=0.2)
        os.kill(int((out / "pid-3").read_text()), signal.SIGKILL)
        rc = wait_for(lambda: (out / "srun.rc").exists() and (out / "srun.rc").read_text().strip(), timeout=240)
        assert rc != "0"
        ends = {json.loads((out / f"launcher-{t}.json").read_text())["end"] for t in (0, 2)}
        assert ends == {"requeue"}
        assert "0 standby left" in (out / "launcher-0.log").read_text()
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), capture_output=True, timeout=30)


def _generations(out: Path):
    """The history rank 0's process keeps is written at the end; the launcher logs each change."""
    log = out / "launcher-0.log"
    return log.exists() and "generation 1" in log.read_text() and log.read_text()
