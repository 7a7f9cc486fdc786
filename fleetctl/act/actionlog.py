"""The action log: every decision of act, taken or refused, and why, one JSON object per line.

`<act.state_dir>/actions.jsonl`, appended under an exclusive flock (several act processes may share
it) and fsynced, never rewritten. An action is written `pending` before anything changes and `done`
(or `failed`) after, so that a crash between the two leaves a `pending` record; the next engine start
reconciles it with Slurm (a drain carries its action id in the reason) as `done` or `abandoned`.
Phases: pending, done, failed, refused, dry-run, undone, abandoned.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from pathlib import Path

from fleetctl.errors import DataError

MAX_LINE_BYTES = 64 << 10
MAX_RECORDS = 200_000
PHASES = ("pending", "done", "failed", "refused", "dry-run", "undone", "abandoned")


def new_action_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    return f"act-{stamp}-{uuid.uuid4().hex[:6]}"


class ActionLog:
    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / "actions.jsonl"

    def append(self, record: dict) -> dict:
        if record.get("phase") not in PHASES:
            raise ValueError(f"unknown phase {record.get('phase')!r}")
        record = {"v": 1, "time": time.time(), **record}
        line = json.dumps(record, sort_keys=True, default=str)
        if len(line) > MAX_LINE_BYTES:
            record["detection"] = {"id": record.get("detection", {}).get("id"), "truncated": True}
            line = json.dumps(record, sort_keys=True, default=str)[:MAX_LINE_BYTES - 2] + "}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o640)
        except OSError as exc:
            raise DataError(f"cannot open the action log {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        except OSError as exc:
            raise DataError(f"cannot write the action log {self.path}: {exc.strerror}") from None
        finally:
            os.close(fd)
        return record

    def records(self) -> list[dict]:
        """Every well-formed record, in order (bad or oversized lines skipped)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise DataError(f"cannot read the action log {self.path}: {exc.strerror}") from None
        out = []
        with os.fdopen(fd, "rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            for line in fh:
                if len(line) > MAX_LINE_BYTES:
                    continue
                try:
                    rec = json.loads(line)
                except (ValueError, UnicodeDecodeError):
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("id"), str) and rec.get("phase") in PHASES:
                    out.append(rec)
        return out[-MAX_RECORDS:]

    def current(self) -> dict[str, dict]:
        """The last record of every action id (its current phase), with the first one's details."""
        view: dict[str, dict] = {}
        for rec in self.records():
            prev = view.get(rec["id"])
            view[rec["id"]] = {**prev, **rec, "history": prev["history"] + [rec["phase"]]} if prev else \
                {**rec, "history": [rec["phase"]]}
        return view

    def taken_since(self, since: float, action: str | None = None) -> list[dict]:
        """Actions done (not dry-run, not refused) at or after `since`."""
        return [r for r in self.current().values()
                if r["phase"] == "done" and r["time"] >= since and (action is None or r["action"] == action)]
