"""Exclusive advisory locks on lock files: one way to take them, for every fleetctl process that
must be alone on a state (the lens pid file, its segment directory and webhook spool, the spare
pool, the lab). The node-side payload keeps its own copy: it ships stdlib-only, without fleetctl.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

__all__ = ["open_lock"]


def open_lock(path: str | os.PathLike, *, wait_s: float = 0.0, poll_s: float = 0.05,
              mode: int = 0o600) -> int | None:
    """Open (creating it; a planted symlink is refused, the fd is close-on-exec) and flock `path`
    exclusively, waiting up to `wait_s` for another holder to let go. Returns the open fd, the lock
    held until it is closed, or None when the lock is still held elsewhere after `wait_s`. OSError
    from opening the file is the caller's to report (it names its own state)."""
    fd = os.open(Path(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(poll_s)
        except BaseException:
            os.close(fd)
            raise
