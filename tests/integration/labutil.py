"""Small helpers shared by the integration tests that drive the lab's Slurm."""

from __future__ import annotations

import subprocess
import time


def wait_for(predicate, timeout=30.0, step=0.2):
    """Poll `predicate` until it returns something true; return that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not reached in time")


def scontrol(lab, *args) -> str:
    return subprocess.run(["scontrol", *args], env=lab.command_env(), capture_output=True, text=True,
                          timeout=30, check=True).stdout


def sbatch(lab, *args) -> str:
    """Submit a batch job (output discarded, not written into the work tree); return its id."""
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return out.strip().split(";")[0]
