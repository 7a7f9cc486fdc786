"""fleetctl snapshot on the lab: a 2-node CPU DDP job (torch, gloo) under sbatch, snapshotted mid-run by
`fleetctl snapshot take`, one node's task killed, the job requeued by `fleetctl snapshot restore` and
restored by its Snapshotter; its final parameters equal, bit for bit, an uninterrupted run's.

The lab's hosts share this machine's filesystem, so the job runs this venv's python on the working
tree; MASTER_ADDR is the first node's lab (management) address, gloo talks over mgmt0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.lab.topology import MGMT_DEV
from fleetctl.snapshot import catalog, layout, registry

from labutil import wait_for

if os.environ.get("CI"):
    import torch
else:
    torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from test_snapshot_torch import assert_identical, launch  # noqa: E402

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tests" / "snapshot_train.py"
STEPS = 200

JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000 + 7 * ${SLURM_RESTART_COUNT:-0}))
echo "start restart=${SLURM_RESTART_COUNT:-0} master=$first $MASTER_ADDR:$MASTER_PORT"
srun --kill-on-bad-exit=1 "$PY" "$TRAIN" --dir "$SNAP" --steps $STEPS --pace 0.08 --out "$OUT"
"""


def _pid_of_rank(job: str, rank: int) -> int | None:
    """The training process of `rank` in `job` (all lab nodes are processes on this machine)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if str(TRAIN).encode() not in cmd:
                continue
            env = dict(item.split(b"=", 1) for item in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                       if b"=" in item)
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID") == job.encode() and env.get(b"SLURM_PROCID") == str(rank).encode():
            return int(entry)
    return None



def _job_state(lab, job: str) -> str:
    import subprocess

    out = subprocess.run(["scontrol", "show", "job", job, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30).stdout
    for field in out.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "GONE"


def test_snapshot_kill_requeue_restore_is_bit_identical(lab, tmp_path, monkeypatch):
    import subprocess

    work = tmp_path
    reference = work / "reference"
    assert launch(reference, "--steps", str(STEPS), "--out", str(work / "reference.pt")) == [0, 0]

    reg, snap, out = work / "registry", work / "snap", work / "final.pt"
    reg.mkdir()
    log = work / "job.log"
    script = work / "job.sh"
    script.write_text(JOB)
    addrs = lab.state["addresses"]["mgmt"]
    env = {**lab.command_env(), "PY": sys.executable, "TRAIN": str(TRAIN), "SNAP": str(snap), "OUT": str(out),
           "STEPS": str(STEPS), "LAB_ADDRS": json.dumps(addrs), "GLOO_SOCKET_IFNAME": MGMT_DEV,
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", registry.ENV_REGISTRY: str(reg)}
    job = subprocess.run(["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--requeue",
                          "--open-mode=append", f"--output={log}", "--export=ALL", str(script)],
                         env=env, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    monkeypatch.setenv(registry.ENV_REGISTRY, str(reg))
    monkeypatch.setenv("FLEETCTL_SITE", str(lab.site_file))
    for key, value in lab.env.items():
        monkeypatch.setenv(key, value)
    try:
        def progress() -> int:
            try:
                return int((snap / "progress").read_text())
            except (OSError, ValueError):
                return -1

        wait_for(lambda: progress() >= 20, timeout=120)
        assert cli_run(["--format", "json", "snapshot", "take", job, "--wait", "--timeout", "60"]) == 0
        requested = layout.read_latest(snap)
        assert requested is not None and 20 <= requested < STEPS
        # The signal path: scancel --signal=USR2 to the job's steps, no request file.
        assert cli_run(["snapshot", "take", job, "--signal", "--no-request", "--wait", "--timeout", "60"]) == 0
        taken = layout.read_latest(snap)
        assert taken > requested
        reasons = {s["step"]: s["reason"] for s in catalog.describe(snap)["snapshots"]}
        assert reasons[requested] == "request" and reasons[taken] == "signal"
        assert cli_run(["snapshot", "verify", job]) == 0

        wait_for(lambda: progress() >= taken + 10, timeout=60)
        victim = _pid_of_rank(job, 1)
        assert victim is not None, "rank 1's process not found"
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: _job_state(lab, job) in ("FAILED", "COMPLETED", "CANCELLED", "NODE_FAIL"),
                 timeout=90, step=0.5)
        assert not out.exists() and progress() < STEPS - 1  # killed mid-run
        killed_at = progress()

        assert cli_run(["--format", "json", "snapshot", "restore", job]) == 0
        wait_for(lambda: _job_state(lab, job) == "COMPLETED" and out.exists(), timeout=300, step=1.0)
        text = log.read_text()
        assert "start restart=1" in text, text[-2000:]
        assert f"restored={taken}" in text, text[-2000:]
        assert killed_at > taken
        assert_identical(torch.load(out, weights_only=True), torch.load(work / "reference.pt", weights_only=True))
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), timeout=30)
