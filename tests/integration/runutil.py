"""Helpers of the `fleetctl run` tests and benchmarks/recovery_inprocess.py: launchers started as
srun would start them, on localhost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tests" / "resilient_train.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, tasks: int, standbys: int, steps: int, sleep: float = 0.01,
           train_args: tuple[str, ...] = (), run_args: tuple[str, ...] = (),
           slot_env=None) -> list[subprocess.Popen]:
    """One `fleetctl run` launcher per task (tests/resilient_train.py under it), as srun starts them;
    also benchmarks/recovery_inprocess.py's. `slot_env(slot)`: more environment for that task
    (benchmarks/device/inprocess_nccl.py: every task on GPU 0 as its own NCCL host)."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (out / "port").write_text(str(port))
    procs = []
    for slot in range(tasks):
        env = {**os.environ, "SLURM_PROCID": str(slot), "SLURM_NTASKS": str(tasks), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
               "SLURMD_NODENAME": f"local{slot}",  # one "node" per task
               "SLURM_LOCALID": str(slot),  # its GPU, where the job is NCCL (benchmarks/device/)
               **(slot_env(slot) if slot_env else {})}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "fleetctl", "run", "--standbys", str(standbys), "--store", f"127.0.0.1:{port}",
             "--dead-after", "3", "--format", "json", *run_args, "--", sys.executable, str(TRAIN), "--out", str(out),
             "--steps", str(steps), "--sleep", str(sleep), *train_args],
            env=env, stdout=open(out / f"launcher-{slot}.json", "w"), stderr=open(out / f"launcher-{slot}.log", "w")))
    return procs


def wait_all(procs, timeout=240) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def wait_for_progress(out: Path, at: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        progress = out / "progress"
        text = progress.read_text().strip() if progress.exists() else ""
        if text and int(text) >= at:
            return
        time.sleep(0.05)
    raise AssertionError(f"training never reached iteration {at}")


def kill_when(out: Path, slot: int, at: int) -> None:
    wait_for_progress(out, at)
    os.kill(int((out / f"pid-{slot}").read_text()), signal.SIGKILL)
