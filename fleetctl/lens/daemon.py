"""The coordinator as a service: pid file (locked while it runs), background start, stop.

The pid file holds `<pid> <start time in clock ticks>` (from /proc/PID/stat), so a stale file
whose pid was reused by another process is never taken for a running coordinator, and `stop`
never signals a stranger. The lock (flock on the pid file) keeps a second coordinator of the same
state directory from starting.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

from fleetctl.errors import DataError, FleetctlError, UsageError
from fleetctl.filekit import read_text
from fleetctl.filekit.locks import open_lock


def _start_ticks(pid: int) -> str | None:
    try:
        stat = read_text(f"/proc/{pid}/stat", "process status", max_bytes=4096) or ""
    except DataError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] == "Z":  # a zombie is no coordinator
        return None
    return fields[19]


def running_pid(pid_file: Path) -> int | None:
    """The pid of the coordinator that owns `pid_file`, or None."""
    try:  # a planted FIFO, link or huge file is no pid file (never a hang)
        text = (read_text(pid_file, "lens pid file", max_bytes=100, missing_ok=True) or "").split()
        pid, ticks = int(text[0]), text[1]
    except (DataError, ValueError, IndexError):
        return None
    return pid if pid > 1 and _start_ticks(pid) == ticks else None


class PidLock:
    """Held for the coordinator's life: the locked pid file."""

    def __init__(self, pid_file: Path):
        self.path = pid_file
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = open_lock(self.path, mode=0o644)
        except OSError as exc:  # a planted symbolic link (never followed), a directory
            raise DataError(f"{self.path}: cannot open the lens pid file: {exc.strerror}") from None
        if fd is not None and not stat.S_ISREG(os.fstat(fd).st_mode):  # a planted FIFO
            os.close(fd)
            raise DataError(f"{self.path}: the lens pid file is not a regular file")
        if fd is None:
            raise UsageError(f"a lens coordinator already runs for {self.path.parent} "
                             f"(pid {running_pid(self.path) or '?'})",
                             hint="fleetctl lens status; fleetctl lens stop") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {_start_ticks(os.getpid())}\n".encode())
        os.fsync(fd)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


def daemonize(log_file: Path) -> bool:
    """Double fork; True in the daemon (stdin /dev/null, stdout and stderr to `log_file`), the
    parent returns False once the daemon exists."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(w)
        os.read(r, 1)  # the daemon's child has started
        os.close(r)
        os.waitpid(pid, 0)
        return False
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.write(w, b"x")
    os.close(w)
    os.chdir("/")
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    return True


def stop(pid_file: Path, timeout: float = 20.0) -> dict:
    """SIGTERM the coordinator and wait for it to finish its window and exit."""
    pid = running_pid(pid_file)
    if pid is None:
        return {"stopped": False, "running": False, "pid": None}
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return {"stopped": True, "running": False, "pid": pid}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running_pid(pid_file) != pid:
            return {"stopped": True, "running": False, "pid": pid}
        time.sleep(0.1)
    raise FleetctlError(f"the lens coordinator (pid {pid}) did not stop within {timeout:g} s")
