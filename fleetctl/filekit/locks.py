"""Advisory locks: one way to take them. `open_lock` for every fleetctl process that must be alone
on a state (the lens pid file, its segment directory and webhook spool, the spare pool, the audit
history, the lab); `lock_fd` for a file already open (a JSON-lines log under a shared or exclusive
lock). The node-side payload keeps its own copy: it ships stdlib-only, without fleetctl.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

__all__ = ["lock_fd", "open_lock"]


def open_lock(path: str | os.PathLike, *, wait_s: float = 0.0, poll_s: float = 0.05,
              mode: int = 0o600) -> int | None:
    """Open (creating it; a planted symlink is refused, the fd is close-on-exec) and flock `path`
    exclusively, waiting up to `wait_s` for another holder to let go. Returns the open fd, the lock
    held until it is closed, or None when the lock is still held elsewhere after `wait_s`. OSError
    from opening the file is the caller's to report (it names its own state)."""
    fd = os.open(Path(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if lock_fd(fd, wait_s=wait_s, poll_s=poll_s):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def lock_fd(fd: int, *, shared: bool = False, wait_s: float | None = 0.0, poll_s: float = 0.05) -> bool:
    """flock the open `fd`, shared or exclusive, waiting up to `wait_s` (None: as long as it takes).
    True once held (until the fd is closed); False when another holder still has it at the deadline."""
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if wait_s is None:
        fcntl.flock(fd, kind)
        return True
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
