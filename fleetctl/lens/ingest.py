"""Streamed agent batches in, one window's joined probe records out.

Agents send a batch per health window: their final sender records, the (flow, seq) of every probe
they answered, and health rows. A probe sent in window [a, b) is final at b + echo timeout and its
answer logged by the responder's next batch; the coordinator closes the window once that time has
passed (coordinator.py). Records of a window already closed (an agent far behind) are dropped and
counted, never analysed twice. Memory: pending records until their window closes, responder keys
and health rows for `keep_s`.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from fleetctl.errors import DataError
from fleetctl.mesh.collect import decode, join_records

MAX_PENDING = 5_000_000  # records waiting for their window: beyond this the oldest are dropped


class Ingest:
    def __init__(self, flows: np.ndarray, keep_s: float = 10.0):
        self.flows = flows
        self.keep_s = keep_s
        self.chunks: list[dict[str, np.ndarray]] = []
        self.pending = 0
        self.keys: deque[tuple[float, np.ndarray]] = deque()  # (arrival, keys)
        self.health: dict[str, deque] = {}
        self.fields: list[str] = []
        self.closed_until_ns = 0  # records sent before this belong to closed windows
        self.late = 0
        self.dropped = 0
        self.bad_batches = 0

    def add(self, node: str, batch: dict, now: float) -> None:
        try:
            fields, keys = decode(batch, node)
        except DataError:
            self.bad_batches += 1
            return
        if fields["flow"].size:
            if fields["flow"].max() >= len(self.flows):
                self.bad_batches += 1
                return
            late = fields["t1"] < self.closed_until_ns
            if late.any():
                self.late += int(late.sum())
                fields = {k: v[~late] for k, v in fields.items()}
            self.chunks.append(fields)
            self.pending += fields["flow"].size
        if keys.size:
            self.keys.append((now, keys))
        rows = batch.get("health") or []
        if rows:
            h = self.health.setdefault(node, deque(maxlen=64))
            h.extend(r for r in rows if isinstance(r, list))
        while self.keys and self.keys[0][0] < now - self.keep_s:
            self.keys.popleft()
        if self.pending > MAX_PENDING:  # the analysis cannot keep up: shed the oldest
            old = self.chunks.pop(0)
            self.pending -= old["flow"].size
            self.dropped += old["flow"].size

    def set_fields(self, fields: list[str]) -> None:
        self.fields = list(fields)

    def close(self, a_ns: int, b_ns: int) -> tuple[np.ndarray, dict]:
        """The joined probe records sent in [a_ns, b_ns), and every host's health table rows
        that overlap the window +- 2 s (for the integrity step)."""
        take, keep = [], []
        for c in self.chunks:
            t1 = c["t1"]
            sel = (t1 >= a_ns) & (t1 < b_ns)
            old = t1 < a_ns  # before a window we already closed (should not happen): dropped
            self.late += int(old.sum())
            if sel.any():
                take.append({k: v[sel] for k, v in c.items()})
            rest = ~sel & ~old
            if rest.any():
                keep.append({k: v[rest] for k, v in c.items()} if not rest.all() else c)
        self.chunks = keep
        self.pending = sum(c["flow"].size for c in keep)
        self.closed_until_ns = max(self.closed_until_ns, b_ns)
        if take:
            cat = {k: np.concatenate([c[k] for c in take]) for k in take[0]}
            seen = np.concatenate([k for _, k in self.keys]) if self.keys else \
                np.zeros(0, np.uint64)
            probes = join_records(cat, seen, self.flows)
            probes = probes[np.argsort(probes["t_send"], kind="stable")]
        else:
            probes = join_records({k: np.zeros(0, v.dtype) for k, v in _EMPTY.items()},
                                  np.zeros(0, np.uint64), self.flows)
        health = {}
        if self.fields:
            i_t, i_d = self.fields.index("t_start_ns"), self.fields.index("duration_s")
            lo, hi = a_ns - 2e9, b_ns + 2e9
            for node, rows in self.health.items():
                sel = [r for r in rows if len(r) == len(self.fields)
                       and r[i_t] + r[i_d] * 1e9 >= lo and r[i_t] <= hi]
                if sel:
                    health[node] = {"fields": self.fields, "windows": sel}
        return probes, health


_EMPTY = {"flow": np.zeros(0, "<u4"), "seq": np.zeros(0, "<u4"), "t1": np.zeros(0, "<i8"),
          "t2": np.zeros(0, "<i8"), "t3": np.zeros(0, "<i8"), "t4": np.zeros(0, "<i8"),
          "state": np.zeros(0, "u1")}
