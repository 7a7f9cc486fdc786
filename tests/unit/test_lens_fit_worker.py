"""lens's clock-fit worker process (lens/clocktrack.py): it ends with its owner."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

_KILLED_OWNER = """
import os, signal, sys
from fleetctl.lens.clocktrack import worker_pool
if __name__ == "__main__":
    pool = worker_pool()
    print(pool.submit(os.getpid).result(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_fit_worker_ends_with_a_coordinator_killed_hard(tmp_path):
    """A coordinator killed with SIGKILL (the lens lab test does it) left its fit worker and
    the forkserver behind for good: the worker holds its own queue's write end. It now watches
    its owner's pidfd and exits with it, and the forkserver after it."""
    script = tmp_path / "owner.py"
    script.write_text(_KILLED_OWNER)
    root = str(Path(__file__).resolve().parents[2])
    out = tmp_path / "out"
    with out.open("w") as f:  # a file, not a pipe: a leaked worker would hold a pipe open
        proc = subprocess.run([sys.executable, str(script)], stdout=f, stderr=subprocess.STDOUT,
                              timeout=60, env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == -9, out.read_text()
    worker = int(out.read_text().split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{worker}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{worker}").exists(), "the fit worker outlived its owner"
