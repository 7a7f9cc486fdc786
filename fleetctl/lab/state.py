"""The lab's state file and locks.

state.json records everything `up` created (namespaces, root links, UTS mounts, processes with their
start times, faults in force) so that `down` removes exactly that, also after a crash.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import LabError
from fleetctl.lab import paths
from fleetctl.filekit.locks import open_lock

# Held by a whole test session (tests/conftest.py): two pytest runs on one machine take turns.
SESSION_LOCK = Path("/run/fleetctl-lab.lock")
# Held for the length of one operation (up, down, fault add/clear) so that they never interleave.
OPERATION_LOCK = Path("/run/fleetctl-lab.op.lock")


def load() -> dict | None:
    try:
        return json.loads(paths.state_file().read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"{paths.state_file()}: unreadable lab state: {exc}",
                       hint="remove the file after checking no lab runs (`fleetctl lab down` cleans up "
                            "by name as well)") from None


def save(state: dict) -> None:
    write_atomic(paths.state_file(), json.dumps(state, indent=2) + "\n")


def remove() -> None:
    for p in (paths.state_file(), paths.state_file().with_suffix(".tmp")):  # .tmp: older fleetctl's
        p.unlink(missing_ok=True)


@contextmanager
def locked(path: Path = OPERATION_LOCK, timeout: float = 300.0, what: str = "another lab operation"):
    try:
        fd = open_lock(path, wait_s=timeout, poll_s=0.2, mode=0o644)
    except OSError as exc:
        raise LabError(f"{path}: cannot open the lab lock: {exc.strerror}") from None
    if fd is None:
        raise LabError(f"{path}: {what} holds the lab lock for more than {timeout:.0f} s")
    try:
        yield
    finally:
        os.close(fd)


def session_busy() -> bool:
    """True when another process holds the test-session lock (a pytest run is using the lab)."""
    if os.environ.get("FLEETCTL_LAB_SESSION") == "1":
        return False  # we are that session, or run from it
    try:
        fd = os.open(SESSION_LOCK, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
