"""A small reader of lens's JSON-lines event log (format: docs/act.md, "Lens events").

Kept here until fleetctl.lens.eventlog is merged; it reads the same records. The file is hostile
input: lines longer than MAX_LINE_BYTES, non-JSON lines and records without the required fields are
skipped and counted, never fatal.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

MAX_LINE_BYTES = 64 << 10
MAX_READ_BYTES = 64 << 20  # read per call; the rest is left for the next one
MAX_EVENTS = 100_000
ELEMENT_TYPES = ("link", "switch", "nic", "host", "port", "clock")
SEVERITIES = ("critical", "warning", "info")


@dataclass
class ReadResult:
    records: list[dict] = field(default_factory=list)
    offset: int = 0  # where the next read starts
    skipped: int = 0  # bad lines


def valid(rec) -> bool:
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or len(rec["id"]) > 64:
        return False
    el = rec.get("element")
    if not isinstance(el, dict) or el.get("type") not in ELEMENT_TYPES or not isinstance(el.get("id"), str):
        return False
    if rec.get("state") not in ("open", "closed") or rec.get("severity") not in SEVERITIES:
        return False
    conf = rec.get("confidence")
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.0 <= conf <= 1.0:
        return False
    jobs = rec.get("jobs", [])
    return isinstance(jobs, list) and all(isinstance(j, dict) for j in jobs)


def read_from(path: str | Path, offset: int = 0) -> ReadResult:
    """The complete records after byte `offset` (a partial last line is left for the next call)."""
    out = ReadResult(offset=offset)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return out
    except OSError as exc:
        from fleetctl.errors import DataError

        raise DataError(f"cannot read lens events {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if offset > size:  # rotated or truncated: start again
            offset = out.offset = 0
        fh.seek(offset)
        data = fh.read(MAX_READ_BYTES)
    end = data.rfind(b"\n")
    if end < 0:
        if len(data) >= MAX_READ_BYTES:  # one line longer than a whole read: skip past it
            out.skipped += 1
            out.offset = offset + len(data)
        return out
    for line in data[:end].split(b"\n"):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            out.skipped += 1
            continue
        try:
            rec = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            out.skipped += 1
            continue
        if not valid(rec):
            out.skipped += 1
            continue
        if len(out.records) < MAX_EVENTS:
            out.records.append(rec)
    out.offset = offset + end + 1
    return out


def current(path: str | Path) -> tuple[dict[str, dict], int]:
    """The current view of every event (its last record), and the number of bad lines skipped."""
    view: dict[str, dict] = {}
    offset, skipped = 0, 0
    while True:
        got = read_from(path, offset)
        for rec in got.records:
            view[rec["id"]] = rec
        skipped += got.skipped
        if got.offset == offset:
            return view, skipped
        offset = got.offset
