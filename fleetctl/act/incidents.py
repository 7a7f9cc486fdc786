"""Incident memory: every remediation fleetctl starts on a node (a drain or swap off it, a GPU reset,
a reboot), remembered per node and per GPU, so that the same node failing again is seen as such.

One JSON line per incident in `state_dir/incidents.jsonl`, appended under a lock with the file kit
(partial-line repair, fsync), read back bounded: a line over MAX_LINE or one that does not hold a
valid record is counted and skipped, never trusted. The file is compacted in place (atomically) once
it passes MAX_BYTES, keeping the newest MAX_RECORDS records: the memory is bounded whatever the rate.

    {"time": 1733212345.1, "node": "node3", "gpu": "gpu1", "code": "xid.79", "action": "drain",
     "action_id": "act-...", "source": "audit"}

A node is *suspect* once it has had `suspect_after` incidents within `suspect_window_s` (default 2 in
7 days, as NVIDIA's NVSentinel escalates after more than one remediation in 7 days): the fault that
would be that incident goes to a service request, and the node never back to production by
fleetctl's hand. Mean time between incidents (MTBI) is the mean gap between a node's
incidents, None with fewer than two.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import DataError
from fleetctl.filekit import append_line, loads_json, read_lines
from fleetctl.filekit.locks import open_lock
from fleetctl.nodeset import is_node_name

FILE = "incidents.jsonl"
MAX_LINE = 4096
MAX_BYTES = 8 << 20  # compacted past this
MAX_RECORDS = 20_000  # kept by a compaction (the newest)
MAX_TEXT = 128  # code, action, GPU, source, id
REMEDIATIONS = ("drain", "swap", "reset-gpu", "reboot")  # the actions that make an incident


@dataclass
class NodeHistory:
    node: str
    incidents: list[dict] = field(default_factory=list)  # oldest first
    suspect: bool = False
    in_window: int = 0  # incidents within the suspect window

    @property
    def mtbi_s(self) -> float | None:
        times = [i["time"] for i in self.incidents]
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None

    def to_dict(self) -> dict:
        mtbi = self.mtbi_s
        return {"node": self.node, "incidents": self.incidents, "count": len(self.incidents),
                "in_window": self.in_window, "suspect": self.suspect,
                "mtbi_s": round(mtbi, 1) if mtbi is not None else None}


class IncidentLog:
    def __init__(self, state_dir: str | os.PathLike, *, suspect_after: int = 2,
                 suspect_window_s: float = 7 * 86400.0):
        self.path = Path(state_dir) / FILE
        self.suspect_after, self.suspect_window_s = suspect_after, suspect_window_s
        self.skipped = 0  # lines of the last read that were not valid records
        self._cache: tuple[tuple, list[dict], int] | None = None  # (file identity, records, skipped)

    @classmethod
    def from_config(cls, config) -> "IncidentLog":
        """The log of act's settings (ActConfig): its state directory and suspect rule."""
        return cls(config.state_dir, suspect_after=config.suspect_after, suspect_window_s=config.suspect_window_s)

    def record(self, *, time: float, node: str, code: str, action: str, action_id: str,
               source: str = "", gpu: str = "") -> dict:
        rec = {"time": round(float(time), 3), "node": node, "gpu": gpu[:MAX_TEXT], "code": code[:MAX_TEXT],
               "action": action, "action_id": action_id[:MAX_TEXT], "source": source[:MAX_TEXT]}
        if _problem(rec):
            raise DataError(f"incident record refused: {_problem(rec)}")
        append_line(self.path, json.dumps(rec, sort_keys=True).encode(), what="incident log")
        try:
            if self.path.stat().st_size > MAX_BYTES:
                self._compact()
        except OSError:
            pass  # compaction is housekeeping: the record is written
        return rec

    def records(self) -> list[dict]:
        """Every valid record, oldest first (at most the newest MAX_RECORDS). Read again only when the
        file changed (a storm's detections each ask; the file is up to MAX_BYTES)."""
        try:
            st = os.stat(self.path)
            ident = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            ident = None
        if ident is not None and self._cache is not None and self._cache[0] == ident:
            self.skipped = self._cache[2]
            return list(self._cache[1])
        out = self._read()
        if ident is not None:
            self._cache = (ident, out, self.skipped)
        return list(out)

    def _read(self) -> list[dict]:
        out, self.skipped = [], 0
        for line in read_lines(self.path, max_line=MAX_LINE, what="incident log"):
            rec = _parse(line)
            if rec is None:
                self.skipped += 1
                continue
            out.append(rec)
        out.sort(key=lambda r: r["time"])
        return out[-MAX_RECORDS:]

    def history(self, node: str, now: float, records: list[dict] | None = None) -> NodeHistory:
        mine = [r for r in (self.records() if records is None else records) if r["node"] == node]
        recent = [r for r in mine if r["time"] >= now - self.suspect_window_s]
        return NodeHistory(node, mine, len(recent) >= self.suspect_after, len(recent))

    def suspects(self, now: float) -> dict[str, NodeHistory]:
        records = self.records()
        nodes = sorted({r["node"] for r in records})
        return {n: h for n in nodes if (h := self.history(n, now, records)).suspect}

    def _compact(self) -> None:
        # act run is the one writer (it holds its state directory alone); the lock keeps two
        # compactions apart, and readers see the old file or the new one, whole.
        lock = open_lock(self.path.with_name(FILE + ".lock"), wait_s=5.0)
        if lock is None:
            return  # another writer is compacting
        try:
            keep = self.records()
            body = b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in keep)
            write_atomic(self.path, body, mode=0o644)
        finally:
            os.close(lock)


def _parse(line: bytes | None) -> dict | None:
    if line is None:
        return None
    try:
        rec = loads_json(line, "incident record")
    except DataError:
        return None
    return rec if isinstance(rec, dict) and not _problem(rec) else None


def _problem(rec: dict) -> str:
    t = rec.get("time")
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
        return "time is not a non-negative number"
    if not isinstance(rec.get("node"), str) or not is_node_name(rec["node"]):
        return f"node {str(rec.get('node'))[:80]!r} is not a node name"
    if rec.get("action") not in REMEDIATIONS:
        return f"action {str(rec.get('action'))[:80]!r} is not a remediation ({', '.join(REMEDIATIONS)})"
    for key in ("gpu", "code", "action_id", "source"):
        if not isinstance(rec.get(key, ""), str) or len(rec.get(key, "")) > MAX_TEXT:
            return f"{key} is not a string of at most {MAX_TEXT} characters"
    return ""


def holds(config, now: float) -> dict[str, str]:
    """Suspect nodes and why, for whatever would put a node back (`spares replenish`); an incident
    log that cannot be read holds nothing back but says so through DataError."""
    log = IncidentLog.from_config(config)
    return {node: (f"suspect: {h.in_window} incidents within {config.suspect_window_s / 86400:g} days "
                   "(act.suspect_after): held for its service request")
            for node, h in log.suspects(now).items()}
