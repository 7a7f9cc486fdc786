"""What the fan-out layer takes (a Command) and gives back (one HostResult per node).

A per-host failure is a result, never an exception: one dead node must not hide the others' output.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# Per-host statuses. Stable strings: they appear in JSON output and later issues match on them.
OK = "ok"                      # the command ran and exited 0
FAILED = "failed"              # the command ran and exited non-zero (or was killed by a signal)
TIMEOUT = "timeout"            # the command ran longer than the command timeout and was stopped
UNREACHABLE = "unreachable"    # no route, name not resolved, or connect/handshake timed out
REFUSED = "refused"            # the TCP connection was refused (nothing listening)
AUTH_FAILED = "auth-failed"    # the server rejected every key we offered
HOSTKEY_MISMATCH = "hostkey-mismatch"  # known_hosts holds a different key: possible impersonation
HOSTKEY_UNKNOWN = "hostkey-unknown"    # strict policy and the host is not in known_hosts
ERROR = "error"                # anything else (protocol error, srun could not launch the task, ...)

STATUSES = (OK, FAILED, TIMEOUT, UNREACHABLE, REFUSED, AUTH_FAILED, HOSTKEY_MISMATCH, HOSTKEY_UNKNOWN,
            ERROR)


@dataclass(frozen=True)
class Command:
    """A command as an argv list or as a shell command line; exactly one of the two is set.

    An argv list is quoted word by word wherever a shell sits in between (ssh, srun wrapper), so
    arguments can hold spaces, quotes or `$` safely. A shell line is run by a POSIX shell as is.
    """

    argv: tuple[str, ...] = ()
    shell: str = ""

    def __post_init__(self):
        if bool(self.argv) == bool(self.shell):
            raise ValueError("a Command is either an argv list or a shell command line")

    @classmethod
    def of(cls, command: Command | str | Sequence[str]) -> Command:
        if isinstance(command, Command):
            return command
        if isinstance(command, str):
            return cls(shell=command)
        return cls(argv=tuple(command))

    def as_shell(self) -> str:
        """One shell command line: the shell text, or the argv quoted word by word."""
        return self.shell or shlex.join(self.argv)

    def as_argv(self) -> list[str]:
        """An argv list to exec directly: the argv, or `/bin/sh -c LINE`."""
        return list(self.argv) if self.argv else ["/bin/sh", "-c", self.shell]

    def __str__(self) -> str:
        return self.as_shell()


@dataclass
class HostResult:
    node: str
    status: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    error: str = ""  # one line saying what went wrong, for every status but ok/failed

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict:
        return {"node": self.node, "status": self.status, "exit_code": self.exit_code,
                "stdout": self.stdout, "stderr": self.stderr,
                "duration_s": round(self.duration_s, 4), "error": self.error}


def decode(data: bytes) -> str:
    """Command output as text; undecodable bytes survive as U+FFFD rather than failing the host."""
    return data.decode("utf-8", errors="replace")
