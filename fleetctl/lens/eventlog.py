"""The lens event log: JSON lines, appended, never rewritten (docs/lens.md, "Outputs").

    log = EventLog(state_dir / "events.jsonl")
    log.append({"id": new_event_id(), "kind": "open", ...})      # validated, flushed, fsync'ed
    events = read_events(path, open_only=True)                      # current view per event id
    for rec in follow(path, stop=stop_event): ...                   # `lens events --follow`

One record per line; the current view of an event is its last record. Writers take an exclusive
flock on `<log>.lock` (a separate file: the log itself is renamed by rotation) and write each line
with one write(), then fsync: concurrent writers never interleave, and a crash leaves at most one
partial last line, which the next writer ends with a newline so it never swallows a good record.
Readers take the shared lock while they read across the rotated files (`events.jsonl.N` ...
`.1`, then `events.jsonl`), so a rotation never hides records from them.

The log is input like any other file: a line longer than MAX_LINE bytes, a line that is not JSON,
too deeply nested, or not a valid record of a known version is skipped and counted, never a
traceback. Records given to append() are validated and refused with a DataError.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fleetctl.atomic import fsync_dir
from fleetctl.errors import DataError, UsageError
from fleetctl.filekit import loads_json, open_regular, write_whole
from fleetctl.filekit.locks import lock_fd
from fleetctl.model.severity import EVENT_SEVERITIES

VERSION = 1
MAX_LINE = 64 * 1024  # bytes of one record, newline included
DEFAULT_MAX_BYTES = 64 << 20  # rotate the live file past this size
DEFAULT_KEEP = 5  # rotated files kept (events.jsonl.1 .. .5)
MAX_KEEP = 100
MAX_JOBS = 200
MAX_TEXT = 512  # an id, direction, job field
MAX_JOB_FIELDS = 16  # keys of one job object

KINDS = ("open", "update", "close")
STATES = ("open", "closed")
ELEMENT_TYPES = ("link", "switch", "nic", "host", "port", "clock")
METRICS = ("loss", "delay", "down", "flapping", "clock", "hang", "straggler",  # hang, straggler: recovery.signals
           "rank_lost")  # fleetctl run: a training rank lost with no standby left (recovery.launch)
SEVERITIES = EVENT_SEVERITIES
_ID = re.compile(r"ev-\d{8}T\d{6}-\d{4}")
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")


# ---------------------------------------------------------------- records

def utc_iso(t: float | None = None) -> str:
    """ISO-8601 UTC with a Z, millisecond resolution: the format of every time in a record."""
    dt = datetime.fromtimestamp(time.time() if t is None else t, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def new_event_id(t: float | None = None) -> str:
    """ev-<UTC yyyymmddTHHMMSS>-<4 random digits>."""
    dt = datetime.fromtimestamp(time.time() if t is None else t, timezone.utc)
    return f"ev-{dt:%Y%m%dT%H%M%S}-{secrets.randbelow(10_000):04d}"


def parse_time(value) -> float:
    """Seconds since 1970 of an ISO-8601 UTC time (`...Z` or `+00:00`), a datetime or a number."""
    if isinstance(value, bool):
        raise ValueError("a boolean is no time")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("time is not finite")
        return float(value)
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str) and len(value) <= 64:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    else:
        raise ValueError(f"not a time: {str(value)[:64]!r}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _text(value, name: str, *, empty: bool = False) -> str | None:
    if not isinstance(value, str):
        return f"{name} is not a string"
    if len(value) > MAX_TEXT or (not empty and not value):
        return f"{name} is empty or longer than {MAX_TEXT} characters"
    return None


def _iso(value, name: str) -> str | None:
    if not isinstance(value, str) or not _ISO.fullmatch(value):
        return f"{name} is not an ISO-8601 UTC time ending in Z"
    try:
        parse_time(value)
    except ValueError:
        return f"{name} is not a valid time"
    return None


def _element(el, name: str) -> str | None:
    if not isinstance(el, dict):
        return f"{name} is not an object"
    if el.get("type") not in ELEMENT_TYPES:
        return f"{name}.type is not one of {', '.join(ELEMENT_TYPES)}"
    return _text(el.get("id"), f"{name}.id") or \
        ("direction" in el and el["direction"] is not None
         and _text(el["direction"], f"{name}.direction", empty=True)) or None


def problem(rec) -> str | None:
    """Why `rec` is not a valid event record (version 1), or None."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    v = rec.get("v")
    if v != VERSION or isinstance(v, bool):
        return f"version {str(v)[:16]!r} is not {VERSION}"
    if not isinstance(rec.get("id"), str) or not _ID.fullmatch(rec["id"]):
        return "id is not ev-<yyyymmddTHHMMSS>-<4 digits>"
    for name, allowed in (("kind", KINDS), ("state", STATES), ("metric", METRICS),
                          ("severity", SEVERITIES)):
        if rec.get(name) not in allowed:
            return f"{name} is not one of {', '.join(allowed)}"
    if rec["kind"] == "open" and rec["state"] != "open" or \
            rec["kind"] == "close" and rec["state"] != "closed":
        return f"kind {rec['kind']} with state {rec['state']}"
    for name in ("time", "first_seen", "last_seen"):
        why = _iso(rec.get(name), name)
        if why:
            return why
    why = _element(rec.get("element"), "element") or \
        ("refined_from" in rec and _element(rec["refined_from"], "refined_from"))
    if why:
        return why
    c = rec.get("confidence")
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 <= c <= 1.0:
        return "confidence is not a number in 0..1"
    if not isinstance(rec.get("evidence", {}), dict):
        return "evidence is not an object"
    flap = rec.get("flap")
    if flap is not None:
        if not isinstance(flap, dict):
            return "flap is neither null nor an object"
        n, p = flap.get("count"), flap.get("period_s")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or \
                isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < math.inf:
            return "flap is not {count: integer >= 0, period_s: number >= 0}"
    jobs = rec.get("jobs", [])
    if not isinstance(jobs, list) or len(jobs) > MAX_JOBS:
        return f"jobs is not a list of at most {MAX_JOBS}"
    for job in jobs:  # what the renderers print (cli/lens.py) holds for every valid record
        if not isinstance(job, dict) or len(job) > MAX_JOB_FIELDS or any(
                not isinstance(k, str) or len(k) > 64 or not isinstance(v, str)
                or len(v) > MAX_TEXT for k, v in job.items()):
            return f"jobs holds an entry that is not an object of at most {MAX_JOB_FIELDS} strings"
        if not job.get("job_id"):
            return "jobs holds an entry without a job_id"
    return None


def encode(rec: dict) -> bytes:
    """The record's line (UTF-8, ASCII-escaped, newline-terminated); DataError if invalid or over
    MAX_LINE."""
    why = problem(rec)
    if why:
        raise DataError(f"invalid lens event record {str(rec.get('id', '?'))[:40]!r}: {why}"
                        if isinstance(rec, dict) else f"invalid lens event record: {why}")
    try:
        line = json.dumps(rec, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise DataError(f"lens event {rec['id']}: not serialisable as JSON: {exc}") from None
    data = line.encode()
    if len(data) > MAX_LINE:
        raise DataError(f"lens event {rec['id']}: record is {len(data)} bytes, more than the "
                        f"{MAX_LINE} a line may hold (bound the evidence)")
    return data


def decode(line: bytes) -> tuple[dict | None, str | None]:
    """(record, None) or (None, why it was skipped)."""
    if len(line) > MAX_LINE:
        return None, "too long"
    try:
        rec = loads_json(line, "event record")  # nesting bounded: renderers recurse
    except DataError:
        return None, "not JSON"
    why = problem(rec)
    return (None, why.split(" ")[0] if why else None) if why else (rec, None)


# ---------------------------------------------------------------- files

def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def log_files(path: str | os.PathLike, keep: int = MAX_KEEP) -> list[Path]:
    """The log's files, oldest first: path.N ... path.1, path (those that exist)."""
    path = Path(path)
    rotated = [path.with_name(f"{path.name}.{i}") for i in range(keep, 0, -1)]
    return [p for p in rotated if p.exists()] + ([path] if path.exists() else [])


class _Lock:
    """flock on `<log>.lock`: exclusive for writers, shared for readers (best effort: a reader who
    may not open the lock file reads without it)."""

    def __init__(self, path: Path, exclusive: bool):
        self.path, self.exclusive, self.fd = _lock_path(path), exclusive, None

    def __enter__(self):
        try:
            flags = os.O_RDWR | os.O_CREAT if self.exclusive else os.O_RDONLY
            self.fd = open_regular(self.path, flags, 0o644, what="lock file")
        except (OSError, DataError) as exc:
            if self.exclusive:
                why = exc.strerror if isinstance(exc, OSError) else "not a regular file"
                raise DataError(f"{self.path}: cannot open lock file: {why}") from None
            return self
        lock_fd(self.fd, shared=not self.exclusive, wait_s=None)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


class EventLog:
    """Appends validated records to `path`, rotating past `max_bytes` and keeping `keep` old files."""

    def __init__(self, path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 keep: int = DEFAULT_KEEP):
        if not MAX_LINE <= max_bytes <= 1 << 40:
            raise UsageError(f"event log max_bytes {max_bytes}: between {MAX_LINE} and 2**40")
        if not 0 <= keep <= MAX_KEEP:
            raise UsageError(f"event log keep {keep}: between 0 and {MAX_KEEP}")
        self.path = Path(path)
        self.max_bytes, self.keep = max_bytes, keep
        self._thread_lock = threading.Lock()  # flock is per open file, threads need their own

    def append(self, rec: dict) -> dict:
        """Write one record (`v` and `time` filled in when absent); returns what was written."""
        rec = dict(rec)
        rec.setdefault("v", VERSION)
        rec.setdefault("time", utc_iso())
        data = encode(rec)
        with self._thread_lock, _Lock(self.path, exclusive=True):
            try:
                self._write(data)
            except OSError as exc:
                raise DataError(f"{self.path}: cannot append event: {exc.strerror or exc}") from None
        return rec

    def _write(self, data: bytes) -> None:
        created = not self.path.exists()
        fd = open_regular(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, what="event log")
        try:
            size = os.fstat(fd).st_size
            if size and size + len(data) > self.max_bytes:
                os.close(fd)
                fd = None
                self._rotate()
                created = True
                fd = open_regular(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, what="event log")
                size = 0
            write_whole(fd, data)  # a crashed writer's partial line is ended first
        finally:
            if fd is not None:
                os.close(fd)
        if created:
            fsync_dir(self.path.parent)

    def _rotate(self) -> None:
        """path -> path.1 -> ... -> path.keep; the oldest beyond `keep` is deleted."""
        name = self.path.name
        if self.keep == 0:
            os.unlink(self.path)
            return
        oldest = self.path.with_name(f"{name}.{self.keep}")
        if oldest.exists() or oldest.is_symlink():
            os.unlink(oldest)
        for i in range(self.keep - 1, 0, -1):
            src = self.path.with_name(f"{name}.{i}")
            if src.exists() or src.is_symlink():
                os.replace(src, self.path.with_name(f"{name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{name}.1"))
        fsync_dir(self.path.parent)

    def read(self, since=None, open_only: bool = False) -> list[dict]:
        return read_events(self.path, since=since, open_only=open_only)


# ---------------------------------------------------------------- reading

@dataclass
class LogView:
    """What a read found: the current view per event id (in order of first appearance)."""

    events: dict[str, dict] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0
    reasons: Counter = field(default_factory=Counter)

    def take(self, line: bytes) -> dict | None:
        rec, why = decode(line)
        if rec is None:
            self.skip(why)
            return None
        self.records += 1
        self.events[rec["id"]] = rec
        return rec

    def skip(self, why: str) -> None:
        self.skipped += 1
        self.reasons[why] += 1


def _lines(fh, view: LogView) -> Iterator[bytes]:
    """Complete lines of at most MAX_LINE bytes; longer ones (and a final partial line) skipped."""
    while True:
        line = fh.readline(MAX_LINE + 1)
        if not line:
            return
        if not line.endswith(b"\n"):
            if len(line) <= MAX_LINE:  # end of file without a newline: a crashed write
                view.skip("partial")
                return
            view.skip("too long")
            while line and not line.endswith(b"\n"):  # the rest of the long line
                line = fh.readline(MAX_LINE + 1)
            continue
        if line.strip():
            yield line


def read_log(path: str | os.PathLike) -> LogView:
    """Every record of the log and its rotated files, with counts of the lines skipped."""
    path = Path(path)
    view = LogView()
    with _Lock(path, exclusive=False):
        for p in log_files(path):
            try:
                fd = open_regular(p, what="event log")
            except (OSError, DataError):
                view.skip("unreadable file")
                continue
            with os.fdopen(fd, "rb") as fh:
                for line in _lines(fh, view):
                    view.take(line)
    return view


def read_events(path: str | os.PathLike, since=None, open_only: bool = False) -> list[dict]:
    """The current view of each event (its last record), oldest event first. `since` (ISO time,
    datetime or epoch seconds): only events whose last record was written at or after it;
    `open_only`: only events whose state is open."""
    cut = None if since is None else parse_time(since)
    out = []
    for rec in read_log(path).events.values():
        if open_only and rec["state"] != "open":
            continue
        if cut is not None and parse_time(rec["time"]) < cut:
            continue
        out.append(rec)
    return out


class Follower:
    """Iterates over records as they are appended to `path` (`lens events --follow`).

    Polls (no inotify): each turn reads the complete new lines of the file it has open; when the
    log was rotated (a new inode under `path`) it reads the old file to its end first, then the
    new one from its start; a file truncated below the position read is read again from 0.
    `stop` (a threading.Event or a callable) ends the iteration; `skipped` counts bad lines."""

    def __init__(self, path: str | os.PathLike, *, from_start: bool = False, poll_s: float = 0.5,
                 stop: threading.Event | Callable[[], bool] | None = None):
        self.path = Path(path)
        self.poll_s = min(max(poll_s, 0.01), 60.0)
        self.stop = stop
        self.view = LogView()
        self._fh = None
        self._ino = None
        self._buf = b""
        self._discarding = False
        self._backlog: list[Path] = log_files(self.path)[:-1] if from_start else []
        self._from_start = from_start

    @property
    def skipped(self) -> int:
        return self.view.skipped

    def _stopped(self) -> bool:
        s = self.stop
        if s is None:
            return False
        return s.is_set() if isinstance(s, threading.Event) else bool(s())

    def __iter__(self) -> Iterator[dict]:
        try:
            for p in self._backlog:  # --follow from the start: the rotated files first
                yield from self._whole(p)
            self._open(at_end=not self._from_start)
            while True:
                yield from self._drain()
                if self._stopped():
                    return
                yield from self._check_file()
                if self._stopped():
                    return
                time.sleep(self.poll_s)
        finally:
            self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _open(self, at_end: bool) -> None:
        try:
            fd = open_regular(self.path, what="event log")
        except (OSError, DataError):
            self._fh, self._ino = None, None
            return
        self._fh = os.fdopen(fd, "rb")
        self._ino = os.fstat(fd).st_ino
        self._buf, self._discarding = b"", False
        if at_end:
            self._fh.seek(0, os.SEEK_END)

    def _check_file(self) -> Iterator[dict]:
        """Follow a rotation or truncation, then read what is new."""
        try:
            st = os.stat(self.path)
        except OSError:
            st = None  # rotated away, not yet recreated: keep reading the old file
        if st is not None and self._fh is None:
            self._open(at_end=False)
        elif st is not None and st.st_ino != self._ino:
            yield from self._drain()  # what was appended to the old file before it was renamed
            old = self._ino
            self.close()
            self._open(at_end=False)  # the live file first: one rotated while the files between were
            # read would be skipped otherwise (a burst in CI lost a file so); later ones show next poll
            yield from self._between(old, self._ino)
        elif st is not None and st.st_size < self._fh.tell():  # truncated in place
            self._fh.seek(0)
            self._buf, self._discarding = b"", False
        yield from self._drain()

    def _between(self, old_ino: int | None, new_ino: int | None) -> Iterator[dict]:
        """Rotated files newer than the one just finished and older than the one now open: several
        rotations between two polls (a burst of events) leave whole files the follower never had
        open. The one now open may itself have been rotated since: it is read through its handle."""
        rotated = log_files(self.path)[:-1]  # oldest first, the live file left out
        inos = []
        for p in rotated:
            try:
                inos.append(os.stat(p, follow_symlinks=False).st_ino)
            except OSError:
                inos.append(None)
        if old_ino is None or old_ino not in inos:
            return
        for p, ino in zip(rotated[inos.index(old_ino) + 1:], inos[inos.index(old_ino) + 1:]):
            if new_ino is not None and ino == new_ino:
                return
            yield from self._whole(p)

    def _whole(self, path: Path) -> Iterator[dict]:
        """Every record of one rotated file."""
        try:
            with os.fdopen(open_regular(path, what="event log"), "rb") as fh:
                for line in _lines(fh, self.view):
                    rec = self.view.take(line)
                    if rec is not None:
                        yield rec
        except (OSError, DataError):
            self.view.skip("unreadable file")

    def _drain(self) -> Iterator[dict]:
        if self._fh is None:
            return
        while True:
            chunk = self._fh.read(MAX_LINE)
            if not chunk:
                return
            self._buf += chunk
            while True:
                nl = self._buf.find(b"\n")
                if nl < 0:
                    if len(self._buf) > MAX_LINE:
                        self.view.skip("too long")
                        self._buf, self._discarding = b"", True
                    break
                line, self._buf = self._buf[:nl + 1], self._buf[nl + 1:]
                if self._discarding:  # the tail of a line already counted as too long
                    self._discarding = False
                    continue
                if line.strip():
                    rec = self.view.take(line)
                    if rec is not None:
                        yield rec


def follow(path: str | os.PathLike, *, from_start: bool = False, poll_s: float = 0.5,
           stop: threading.Event | Callable[[], bool] | None = None) -> Follower:
    """Records appended to the log from now on (or, with from_start, every record first)."""
    return Follower(path, from_start=from_start, poll_s=poll_s, stop=stop)
