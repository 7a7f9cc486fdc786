"""The fleet plugin's counters files: `<dir>/<pid>.json`, written atomically by libnccl-net-fleet.so
(nccl_plugin/src/events.c) at most every 100 ms. Jobs write them, so they are read as hostile:
bounded size, a JSON object of known non-negative integer fields, the pid in the name and the body
agreeing; anything else is reported as a damaged file, never trusted."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_DIR = "/run/fleetctl/failover"
FIELDS = ("connections", "paths_up", "path_down", "replayed_bytes", "replayed_msgs", "failbacks",
          "bytes_sent", "bytes_received", "duplicate_chunks", "reconnect_failures", "errors")
MAX_BYTES = 4096  # the plugin writes < 1 KiB
MAX_FILES = 4096
MAX_VALUE = 2 ** 64
_NAME = re.compile(r"^(\d{1,10})\.json$")


@dataclass
class Counters:
    pid: int
    updated: float
    values: dict[str, int]
    alive: bool
    path: str

    def to_dict(self) -> dict:
        return {"pid": self.pid, "updated": self.updated, "alive": self.alive, "path": self.path, **self.values}


@dataclass
class Scan:
    files: list[Counters] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)  # path -> why

    def to_dict(self) -> dict:
        return asdict(self)


def parse(text: str, pid: int) -> tuple[float, dict[str, int]]:
    """(updated, counters) of one file's text; ValueError saying why it is not a counters file."""
    try:
        doc = json.loads(text)
    except RecursionError:  # 4 KiB of '[' nests deeper than the interpreter's stack
        raise ValueError("nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("pid") != pid:
        raise ValueError(f"pid {doc.get('pid')!r} does not match the file name")
    updated = doc.get("updated")
    if not isinstance(updated, (int, float)) or isinstance(updated, bool) or not 0 <= updated < 1e11:
        raise ValueError("bad or missing 'updated'")
    values = {}
    for name in FIELDS:
        value = doc.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_VALUE:
            raise ValueError(f"bad or missing {name!r}")
        values[name] = value
    return float(updated), values


def pid_alive(pid: int, proc: str = "/proc") -> bool:
    """Whether the process exists and is not a zombie (PID 1 may reap late)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as fh:
            stat = fh.read(1024).decode("ascii", "replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()
    return bool(state) and state[0] not in ("Z", "X")


def scan(directory: str | os.PathLike = DEFAULT_DIR) -> Scan:
    """Every counters file of the directory (none, when it does not exist)."""
    out = Scan()
    base = Path(directory)
    try:
        names = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return out
    except OSError as exc:
        out.damaged[str(base)] = exc.strerror or str(exc)
        return out
    # The cap counts counters files only: the plugin's <pid>.json.tmp and other names never crowd them out.
    for name in [n for n in names if _NAME.match(n)][:MAX_FILES]:
        m = _NAME.match(name)
        path = base / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                if not os.path.isfile(f"/proc/self/fd/{fh.fileno()}"):
                    raise ValueError("not a regular file")
                data = fh.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} bytes")
            pid = int(m.group(1))
            updated, values = parse(data.decode("utf-8"), pid)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            out.damaged[str(path)] = getattr(exc, "strerror", None) or str(exc)
            continue
        out.files.append(Counters(pid, updated, values, pid_alive(pid), str(path)))
    return out
