"""The action log: every decision of act, taken or refused, and why, one JSON object per line.

`<act.state_dir>/actions.jsonl`, appended under an exclusive flock (several act processes may share
it) and fsynced, never rewritten. An action is written `pending` before anything changes and `done`
(or `failed`) after, so that a crash between the two leaves a `pending` record; the next engine start
reconciles it with Slurm (a drain carries its action id in the reason) as `done` or `abandoned`.
Phases: pending, done, failed, refused, dry-run, undone, abandoned.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path

from fleetctl.errors import DataError
from fleetctl.filekit import append_line, loads_json, read_lines

MAX_LINE_BYTES = 64 << 10
MAX_RECORDS = 200_000
MAX_WHY = 2000
PHASES = ("pending", "done", "failed", "refused", "dry-run", "undone", "abandoned")
# Fields later decisions read (cool-downs, the budget, undo, recover): kept whole when a record is
# shrunk to fit a line; everything else is cut to its first items and characters.
_KEY_FIELDS = ("v", "time", "id", "policy", "action", "phase")


def new_action_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    return f"act-{stamp}-{uuid.uuid4().hex[:6]}"


class ActionLog:
    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / "actions.jsonl"

    def append(self, record: dict) -> dict:
        """Write one record as one whole line: fields are bounded to fit MAX_LINE_BYTES (a record is
        never cut into invalid JSON, which readers would skip: a cool-down or budget would miss it)."""
        if record.get("phase") not in PHASES:
            raise ValueError(f"unknown phase {record.get('phase')!r}")
        record = {"v": 1, "time": time.time(), **record}
        if isinstance(record.get("why"), str) and len(record["why"]) > MAX_WHY:
            record["why"] = record["why"][:MAX_WHY] + "..."
        line = fit(record)
        append_line(self.path, line.encode(), what="action log")
        return json.loads(line)

    def records(self) -> list[dict]:
        """Every well-formed record, in order (bad, partial or oversized lines skipped)."""
        out = []
        for line in read_lines(self.path, max_line=MAX_LINE_BYTES, what="action log"):
            if not line:
                continue
            try:
                rec = loads_json(line, "action record", kind=dict)
            except DataError:
                continue
            if well_formed(rec):
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


def well_formed(rec: dict) -> bool:
    """What every reader of the log relies on: an id, a known phase, a finite time, an action and
    policy as text, targets and detection as objects when present."""
    t = rec.get("time")
    return isinstance(rec.get("id"), str) and rec.get("phase") in PHASES \
        and isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) \
        and isinstance(rec.get("action"), str) and isinstance(rec.get("policy", ""), str) \
        and isinstance(rec.get("targets", {}), dict) and isinstance(rec.get("detection", {}), dict)


def fit(record: dict) -> str:
    """The record as one JSON line of at most MAX_LINE_BYTES: shrunk field by field when too long."""
    line = _dumps(record)
    if len(line.encode()) < MAX_LINE_BYTES:
        return line
    record = dict(record, truncated=True)
    for key in ("result", "detection", "targets", "undo", "why"):
        if key in record:
            record[key] = _shrink(record[key])
            line = _dumps(record)
            if len(line.encode()) < MAX_LINE_BYTES:
                return line
    keep = {k: record[k] for k in _KEY_FIELDS if k in record}
    det = record.get("detection")
    if isinstance(det, dict) and isinstance(det.get("id"), str):
        keep["detection"] = {"id": det["id"][:512]}
    return _dumps({**keep, "why": str(record.get("why", ""))[:MAX_WHY], "truncated": True})


def _dumps(record: dict) -> str:
    return json.dumps(record, sort_keys=True, default=str)


def _shrink(value, depth: int = 0):
    """A smaller copy: strings to 512 characters, lists and objects to 32 items, 6 levels deep."""
    if isinstance(value, str):
        return value if len(value) <= 512 else value[:512] + "..."
    if depth >= 6:
        return None if isinstance(value, (dict, list)) else value
    if isinstance(value, list):
        out = [_shrink(v, depth + 1) for v in value[:32]]
        return out + [f"... {len(value) - 32} more"] if len(value) > 32 else out
    if isinstance(value, dict):
        items = list(value.items())
        out = {str(k)[:128]: _shrink(v, depth + 1) for k, v in items[:32]}
        if len(items) > 32:
            out["..."] = f"{len(items) - 32} more"
        return out
    return value
