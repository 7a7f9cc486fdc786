"""`fleetctl run` end to end on this machine, without the lab: real launchers (one per task, as srun
starts them), the control store, replica servers and gloo process groups on localhost. A training
process SIGKILLed mid-run: a standby takes its rank with its state from a peer, training goes on and
ends bit-identical to a run without the fault; with no standby left, every launcher says so (exit 2)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch") if not os.environ.get("CI") else None
REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tests" / "resilient_train.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out: Path, tasks: int, standbys: int, steps: int, sleep: float = 0.01) -> list[subprocess.Popen]:
    out.mkdir(parents=True, exist_ok=True)
    port = _port()
    procs = []
    for slot in range(tasks):
        env = {**os.environ, "SLURM_PROCID": str(slot), "SLURM_NTASKS": str(tasks), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "fleetctl", "run", "--standbys", str(standbys), "--store", f"127.0.0.1:{port}",
             "--dead-after", "3", "--format", "json", "--", sys.executable, str(TRAIN), "--out", str(out),
             "--steps", str(steps), "--sleep", str(sleep)],
            env=env, stdout=open(out / f"launcher-{slot}.json", "w"), stderr=open(out / f"launcher-{slot}.log", "w")))
    return procs


def _wait(procs, timeout=240) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def _kill_when(out: Path, slot: int, at: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        progress = out / "progress"
        if progress.exists() and progress.read_text().strip() and int(progress.read_text()) >= at:
            os.kill(int((out / f"pid-{slot}").read_text()), signal.SIGKILL)
            return
        time.sleep(0.05)
    raise AssertionError("training never reached the kill point")


def test_a_killed_rank_is_replaced_by_the_standby_and_the_result_is_bit_identical(tmp_path):
    reference = _launch(tmp_path / "ref", 3, 0, 150)
    assert _wait(reference) == [0, 0, 0]
    expected = json.loads((tmp_path / "ref" / "final.json").read_text())["sha256"]

    out = tmp_path / "fault"
    procs = _launch(out, 4, 1, 150)
    _kill_when(out, 2, 40)
    assert _wait(procs) == [0, 0, 0, 0], [(out / f"launcher-{s}.log").read_text()[-500:] for s in range(4)]
    final = json.loads((out / "final.json").read_text())
    assert final["end"] == "done" and final["sha256"] == expected
    launcher0 = json.loads((out / "launcher-0.json").read_text())
    [change, done] = launcher0["generations"]
    assert change["lost"] == {"2": 2} and change["resume"] >= 39 and done["end"] == "done"
    assert json.loads((out / "launcher-2.json").read_text())["end"] == "replaced"
    standby = json.loads((out / "rank-2.json").read_text())
    assert standby["slot"] == 3 and standby["sha256"] == expected and standby["samples"] == 150 * 16


def test_with_no_standby_left_every_launcher_ends_unfinished_for_requeue(tmp_path):
    out = tmp_path / "nostandby"
    procs = _launch(out, 3, 0, 400)
    _kill_when(out, 1, 20)
    codes = _wait(procs)
    assert codes == [2, 2, 2], codes
    ends = {json.loads((out / f"launcher-{s}.json").read_text())["end"] for s in range(3)}
    assert ends == {"requeue"}
    assert "1 rank(s) lost, 0 standby left" in (out / "launcher-0.log").read_text()
