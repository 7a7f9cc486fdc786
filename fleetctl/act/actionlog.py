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
from fleetctl.filekit import append_line, loads_json, read_lines_from

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
    """Reads are incremental: the records and the current view are kept with the file's identity and
    the offset read so far, and only lines appended since (by this process or another) are parsed; a
    decision of a storm no longer re-reads the whole log (it did twice per detection)."""

    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / "actions.jsonl"
        self._identity: tuple[int, int] = (0, 0)
        self._offset = 0
        self._records: list[dict] = []
        self._view: dict[str, dict] = {}
        self._by_detection: dict[str, list[str]] = {}  # detection id -> action ids, first seen first
        self._done: dict[str, list[str]] = {}  # action -> ids of those that reached `done`

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

    def _refresh(self) -> None:
        lines, end, identity = read_lines_from(self.path, self._offset, max_line=MAX_LINE_BYTES,
                                               what="action log")
        if identity != self._identity or end < self._offset:  # new file, or replaced: start over
            if self._offset:
                self._offset = 0
                self._identity = (0, 0)
                self._records, self._view, self._by_detection, self._done = [], {}, {}, {}
                return self._refresh()
            self._identity = identity
        self._offset = end
        for line in lines:
            if not line:
                continue
            try:
                rec = loads_json(line, "action record", kind=dict)
            except DataError:
                continue
            if well_formed(rec):
                self._records.append(rec)
                prev = self._view.get(rec["id"])
                self._view[rec["id"]] = {**prev, **rec, "history": prev["history"] + [rec["phase"]]} if prev \
                    else {**rec, "history": [rec["phase"]]}
                self._index(rec, first=prev is None)
        if len(self._records) > MAX_RECORDS:
            self._records = self._records[-MAX_RECORDS:]

    def _index(self, rec: dict, first: bool) -> None:
        det = rec.get("detection", {}).get("id")
        if first and isinstance(det, str):
            self._by_detection.setdefault(det, []).append(rec["id"])
        if rec["phase"] == "done":
            self._done.setdefault(rec["action"], []).append(rec["id"])

    def for_detection(self, detection_id: str) -> list[dict]:
        """The current view of every action taken or refused for one detection."""
        self._refresh()
        return [self._view[a] for a in self._by_detection.get(detection_id, ()) if a in self._view]

    def done_since(self, since: float, actions: tuple[str, ...]) -> list[dict]:
        """Actions of these kinds that reached `done` at or after `since` (current view; an action
        undone since is still counted, as the budget always did)."""
        self._refresh()
        out = []
        for action in actions:
            for aid in reversed(self._done.get(action, ())):
                rec = self._view.get(aid)
                if rec is None:
                    continue
                done_at = rec["time"]
                if done_at < since and rec["phase"] == "done":
                    break  # in time order: older ones follow
                if rec["phase"] == "done" and done_at >= since:
                    out.append(rec)
        return out

    def records(self) -> list[dict]:
        """Every well-formed record, in order (bad, partial or oversized lines skipped)."""
        self._refresh()
        return list(self._records)

    def current(self) -> dict[str, dict]:
        """The last record of every action id (its current phase), with the first one's details."""
        self._refresh()
        return dict(self._view)

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
