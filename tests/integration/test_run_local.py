"""`fleetctl run` and `fleetctl migrate` end to end on this machine, without the lab: real launchers
(one per task, as srun starts them, each task its own "node"), the control store, replica servers
and gloo process groups on localhost. A planned migration moves a rank to the standby at a step
boundary: nothing lost, bit-identical to a run without it. (A SIGKILLed rank and the run with no
standby left: tests/integration/test_run_lab.py under the lab's Slurm.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runutil import REPO, launch, wait_all, wait_for_progress

pytest.importorskip("torch") if not os.environ.get("CI") else None


def test_a_planned_migration_moves_a_rank_at_a_step_boundary_and_loses_nothing(tmp_path):
    reference = launch(tmp_path / "ref", 3, 0, 400, sleep=0)
    assert wait_all(reference) == [0, 0, 0]
    expected = json.loads((tmp_path / "ref" / "final.json").read_text())["sha256"]

    out = tmp_path / "migrate"
    procs = launch(out, 4, 1, 400, sleep=0.03)  # ~15 s: `fleetctl migrate` starts (imports torch) meanwhile
    wait_for_progress(out, 20)
    moved = subprocess.run([sys.executable, "-m", "fleetctl", "migrate", "1", "local1", "--store",
                            f"127.0.0.1:{(out / 'port').read_text()}", "--format", "json"],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert moved.returncode == 0, moved.stderr
    doc = json.loads(moved.stdout)
    assert doc["moved"] == {"1": {"from_slot": 1, "to_slot": 3, "to_node": "local3"}} and doc["seconds"] < 10
    assert wait_all(procs) == [0, 0, 0, 0]
    assert json.loads((out / "final.json").read_text())["sha256"] == expected
    histories = [json.loads(p.read_text())["history"] for p in out.glob("rank-*.json")]
    last = max(h["last_step"] for hist in histories for h in hist if h["gen"] == 0)
    assert doc["resume"] == last  # the boundary it left at: nothing lost

    again = subprocess.run([sys.executable, "-m", "fleetctl", "migrate", "1", "local0", "--store",
                            f"127.0.0.1:{(out / 'port').read_text()}"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert again.returncode == 3 and "unreachable" in again.stderr  # the job is over, its store gone
