"""The fleet plugin's counters files: `<dir>/<uid>/<pid>.json` (or `<dir>/<pid>.json`), written
atomically by libnccl-net-fleet.so (nccl_plugin/src/events.c) at most every 100 ms. Jobs write them,
so they are read as hostile: bounded size, a JSON object of known non-negative integer fields, the
pid in the name and the body agreeing; anything else is reported as a damaged file, never trusted.

Any user can write a file named after any pid, so a file counts only when the pid exists and the
file's owner is the owner of /proc/<pid>, and a per-user directory `<uid>/` only when it belongs to
that uid (spank_fleetctl or the Prolog prepares it, docs/failover.md); anything else is refused,
with the reason."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_DIR = "/run/fleetctl/failover"
FIELDS = ("connections", "paths_up", "path_down", "replayed_bytes", "replayed_msgs", "failbacks",
          "bytes_sent", "bytes_received", "duplicate_chunks", "reconnect_failures", "errors")
MAX_BYTES = 4096  # the plugin writes < 1 KiB
MAX_FILES = 4096
MAX_VALUE = 2 ** 64
_NAME = re.compile(r"^(\d{1,10})\.json$")
_UID_DIR = re.compile(r"^\d{1,10}$")


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
    refused: dict[str, str] = field(default_factory=dict)  # path -> why: not the process owner's

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


def pid_owner(pid: int, proc: str = "/proc") -> int | None:
    """The uid owning /proc/<pid> (the process's effective uid), None when there is no such process."""
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None


def _candidates(base: Path, out: Scan) -> list[tuple[Path, int, int | None]]:
    """(path, pid, uid its directory belongs to) of every `<pid>.json` in base and in base/<uid>/,
    at most MAX_FILES; a `<uid>` entry that is not a directory of that uid is refused."""
    found: list[tuple[Path, int, int | None]] = []
    with os.scandir(base) as entries:
        names = sorted(e.name for e in entries)
    # The cap counts counters files only: the plugin's <pid>.json.tmp and other names never crowd them out.
    found += [(base / n, int(_NAME.match(n).group(1)), None) for n in names if _NAME.match(n)][:MAX_FILES]
    for name in names:
        if not _UID_DIR.match(name) or len(found) >= MAX_FILES:
            continue
        sub = base / name
        try:
            st = os.lstat(sub)
            if not stat.S_ISDIR(st.st_mode):
                raise ValueError("not a directory")
            if st.st_uid != int(name):
                raise ValueError(f"the directory of uid {name} belongs to uid {st.st_uid}")
            with os.scandir(sub) as entries:
                pids = []
                for e in entries:
                    m = _NAME.match(e.name)
                    if m:
                        pids.append((e.name, int(m.group(1))))
                        if len(found) + len(pids) >= MAX_FILES:
                            break
        except (OSError, ValueError) as exc:
            out.refused[str(sub)] = getattr(exc, "strerror", None) or str(exc)
            continue
        found += [(sub / n, pid, int(name)) for n, pid in sorted(pids)]
    return found[:MAX_FILES]


def scan(directory: str | os.PathLike = DEFAULT_DIR, proc: str = "/proc") -> Scan:
    """Every counters file of the directory and of its per-user directories (none, when it does not
    exist)."""
    out = Scan()
    base = Path(directory)
    try:
        found = _candidates(base, out)
    except (FileNotFoundError, NotADirectoryError):
        return out
    except OSError as exc:
        out.damaged[str(base)] = exc.strerror or str(exc)
        return out
    for path, pid, dir_uid in found:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise ValueError("not a regular file")
                data = fh.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} bytes")
            updated, values = parse(data.decode("utf-8"), pid)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            out.damaged[str(path)] = getattr(exc, "strerror", None) or str(exc)
            continue
        owner = pid_owner(pid, proc)
        if owner is None:
            out.refused[str(path)] = f"no process {pid} here: its owner cannot be checked"
        elif st.st_uid != owner or (dir_uid is not None and st.st_uid not in (dir_uid, 0)):
            out.refused[str(path)] = f"written by uid {st.st_uid}, but process {pid} runs as uid {owner}"
        else:
            out.files.append(Counters(pid, updated, values, pid_alive(pid, proc), str(path)))
    return out
