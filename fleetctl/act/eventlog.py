"""act's cursor over lens's event log: the records appended since the last pass.

The records, their validation and the files are lens's (`fleetctl.lens.eventlog`, docs/lens.md,
"Outputs"): one decoder for both. What act adds is a resumable position, (file identity, byte
offset), so `act run` reads each record once across passes and restarts, and follows the log
across a rotation: when the live file is a new one, the rest of the rotated file (`events.jsonl.1`,
same identity as the saved position) is read first. The file is hostile input: bad lines are
skipped and counted, never fatal; a partial last line is left for the next pass.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.errors import DataError
from fleetctl.lens import eventlog as lens_log

MAX_LINE_BYTES = lens_log.MAX_LINE
MAX_READ_BYTES = 64 << 20  # read per call; the rest is left for the next one
MAX_EVENTS = 100_000


@dataclass
class ReadResult:
    records: list[dict] = field(default_factory=list)
    offset: int = 0  # where the next read starts
    skipped: int = 0  # bad lines
    ident: str = ""  # the file the offset belongs to (device:inode), "" when unknown


def valid(rec) -> bool:
    return lens_log.problem(rec) is None


def _ident(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _read_one(path: Path, offset: int, out: ReadResult) -> tuple[int, str] | None:
    """Complete records of one file after `offset` into `out`; (next offset, identity) or None
    when the file does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataError(f"cannot read lens events {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if offset > st.st_size:  # truncated: start again
            offset = 0
        fh.seek(offset)
        data = fh.read(MAX_READ_BYTES)
    end = data.rfind(b"\n")
    if end < 0:
        if len(data) >= MAX_READ_BYTES:  # one line longer than a whole read: skip past it
            out.skipped += 1
            return offset + len(data), _ident(st)
        return offset, _ident(st)
    for line in data[:end].split(b"\n"):
        if not line.strip():
            continue
        rec, _why = lens_log.decode(line)
        if rec is None:
            out.skipped += 1
        elif len(out.records) < MAX_EVENTS:
            out.records.append(rec)
    return offset + end + 1, _ident(st)


def read_from(path: str | Path, offset: int = 0, ident: str = "") -> ReadResult:
    """The complete records after (`ident`, `offset`). With `ident` from a previous result and a
    live file that is no longer that file (rotated), the rotated file's rest comes first."""
    path = Path(path)
    out = ReadResult(offset=offset, ident=ident)
    if ident:
        try:
            live = _ident(os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            live = ""
        if live != ident:
            rotated = path.with_name(path.name + ".1")
            try:
                old = _ident(os.stat(rotated, follow_symlinks=False))
            except FileNotFoundError:
                old = ""
            if old == ident:
                _read_one(rotated, offset, out)
            offset = 0  # the live file is a new one: from its start
    got = _read_one(path, offset, out)
    if got is not None:
        out.offset, out.ident = got
    else:
        out.offset, out.ident = 0, ""
    return out


def current(path: str | Path) -> tuple[dict[str, dict], int]:
    """The current view of every event (its last record, across rotated files), and the number
    of bad lines skipped."""
    if not lens_log.log_files(path):
        return {}, 0
    view = lens_log.read_log(path)
    return dict(view.events), view.skipped
