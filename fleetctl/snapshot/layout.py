"""Names inside a snapshot directory, and the small files that point into it.

    DIR/step_120/          a committed snapshot: shards, per-rank state, MANIFEST.json (written last)
    DIR/step_130.tmp/      a snapshot being written (or interrupted): never read, never LATEST
    DIR/LATEST             "step_120": the newest snapshot every rank confirmed (atomic replace)
    DIR/REQUEST            a snapshot request from `fleetctl snapshot take` (JSON); the job takes it
    DIR/STATUS.json        what the job last measured (cost, bytes, interval), for `snapshot interval`

Everything read here may come from another user (the CLI can run as root): sizes are bounded, names
are matched against a strict grammar, and links are never followed to a snapshot.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import SnapshotError
from fleetctl.filekit import read_json, read_text

LATEST = "LATEST"
REQUEST = "REQUEST"
STATUS = "STATUS.json"
MANIFEST = "MANIFEST.json"
TMP_SUFFIX = ".tmp"
MAX_STEP = 10**15
MAX_SMALL_FILE = 64 * 1024  # LATEST, REQUEST, STATUS.json, registry entries
REQUEST_REASONS = ("request", "drain")

_STEP_RE = re.compile(r"^step_(\d{1,15})$")
_TMP_RE = re.compile(r"^step_(\d{1,15})\.tmp$")
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def step_name(step: int) -> str:
    if not isinstance(step, int) or step < 0 or step > MAX_STEP:
        raise SnapshotError(f"snapshot step {step!r} out of range 0..{MAX_STEP}")
    return f"step_{step}"


def parse_step(name: str) -> int | None:
    """The step of a committed snapshot directory name, or None (a .tmp name is not committed)."""
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else None


def parse_tmp_step(name: str) -> int | None:
    m = _TMP_RE.match(name)
    return int(m.group(1)) if m else None


@dataclass
class Entry:
    step: int
    path: Path
    committed: bool  # False: a step_N.tmp directory (in progress or interrupted)


def scan(root: Path) -> list[Entry]:
    """Snapshot directories under `root` (real directories only, links ignored), newest first."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        raise SnapshotError(f"{root}: no such snapshot directory") from None
    except NotADirectoryError:
        raise SnapshotError(f"{root}: not a directory") from None
    except OSError as exc:
        raise SnapshotError(f"{root}: cannot read: {exc.strerror}") from None
    out = []
    for name in names:
        step, committed = parse_step(name), True
        if step is None:
            step, committed = parse_tmp_step(name), False
        if step is None:
            continue
        try:
            st = os.lstat(root / name)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out.append(Entry(step, root / name, committed))
    out.sort(key=lambda e: (e.step, e.committed), reverse=True)
    return out


def read_small(path: Path, what: str) -> str | None:
    """A small regular file's text (None if missing); links, oversized or binary files refused."""
    return read_text(path, what, max_bytes=MAX_SMALL_FILE, missing_ok=True, error=SnapshotError)


def read_json_object(path: Path, what: str) -> dict | None:
    """A small JSON object (None if missing); nesting bounded (filekit), never a RecursionError."""
    return read_json(path, what, max_bytes=MAX_SMALL_FILE, missing_ok=True, kind=dict, error=SnapshotError)


def check_not_link(path: Path) -> None:
    """A snapshot directory given by path is used only if it is a real directory, not a link to one:
    root pruning or writing through a user's link would act on another user's files."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise SnapshotError(f"{path}: is a symbolic link; give the directory it points to, "
                            f"{os.path.realpath(path)}, if that is meant (links are never followed)")
    if not stat.S_ISDIR(st.st_mode):
        raise SnapshotError(f"{path}: not a directory")


# ---------------------------------------------------------------- LATEST
def read_latest(root: Path) -> int | None:
    """The step LATEST names, or None when there is none. A malformed LATEST is an error."""
    text = read_small(root / LATEST, "LATEST")
    if text is None:
        return None
    step = parse_step(text.strip())
    if step is None:
        raise SnapshotError(f"{root / LATEST}: does not name a snapshot (expected step_N): "
                            f"{text.strip()[:80]!r}")
    return step


def write_latest(root: Path, step: int) -> None:
    """Point LATEST at step_N: temp file, fsync, rename, fsync of the directory (fleetctl.atomic)."""
    write_atomic(root / LATEST, step_name(step) + "\n", mkdir=False)


# ---------------------------------------------------------------- requests
def write_request(root: Path, reason: str = "request") -> str:
    """Ask the job writing into `root` for a snapshot at its next iteration; return the request id."""
    if reason not in REQUEST_REASONS:
        raise SnapshotError(f"unknown request reason {reason!r}; known: {', '.join(REQUEST_REASONS)}")
    request_id = f"{int(time.time())}-{uuid.uuid4().hex[:12]}"
    body = json.dumps({"id": request_id, "reason": reason, "time": time.time()})
    write_atomic(root / REQUEST, body + "\n", mkdir=False)
    return request_id


def take_request(root: Path) -> dict | None:
    """Claim a pending request (rename, so that one written meanwhile is a new request); None if none.

    A cheap stat first: this runs at every poll of a training loop."""
    path = root / REQUEST
    try:
        os.stat(path)
    except OSError:
        return None
    claimed = root / f".{REQUEST}.taken"
    try:
        os.replace(path, claimed)
    except OSError:
        return None
    try:
        data = read_json_object(claimed, "snapshot request") or {}
    except SnapshotError:
        data = {}  # an unreadable request still asks for a snapshot
    finally:
        try:
            os.unlink(claimed)
        except OSError:
            pass
    request_id = data.get("id")
    reason = data.get("reason")
    return {"id": request_id if isinstance(request_id, str) and _REQUEST_ID_RE.match(request_id) else None,
            "reason": reason if reason in REQUEST_REASONS else "request"}


# ---------------------------------------------------------------- status
def write_status(root: Path, status: dict) -> None:
    write_atomic(root / STATUS, json.dumps(status, indent=1) + "\n", mkdir=False)


def read_status(root: Path) -> dict | None:
    return read_json_object(root / STATUS, "snapshot status")
