"""Streamed agent batches in, one window's data out: joined probe records, or merged summaries.

Agents in record mode send a batch per health window: their final sender records, the (flow,
seq) of every probe they answered, and health rows. A probe sent in window [a, b) is final at
b + echo timeout and its answer logged by the responder's next batch; the coordinator closes the
window once that time has passed (coordinator.py). Records of a window already closed (an agent
far behind) are dropped and counted, never analysed twice. Memory: pending records until their
window closes, responder keys and health rows for `keep_s`.

Agents in summary mode (lens's default, mesh/summary.py) send, once a window's echo timeout has
passed, one row per flow of it, and the responders' answer counts per (sender window, flow):
`close_summary` merges a window's rows and joins the counts, O(flows). Summaries of a closed
window are dropped and counted (`late`), as are those of windows far ahead of the wall clock
(`ahead`).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from fleetctl.analysis.summaries import WindowSummary, merge, row_keys, sum_by_key
from fleetctl.errors import DataError
from fleetctl.mesh.collect import decode, decode_summary, join_records
from fleetctl.model.summary import concat_records

MAX_AHEAD_WINDOWS = 60  # summaries of windows further ahead of the wall clock are dropped
MAX_PENDING = 5_000_000  # records waiting for their window: beyond this the oldest are dropped
MAX_HEALTH_ROWS = 64  # health rows (and batches) kept per host between windows: 16 s at 4 a second


def summary_rows_cap(n_flows: int, lag_s: float, window_s: float) -> int:
    """Summary rows held for windows not yet closed before the oldest are shed: every flow once
    a window, for the window being closed, those its lag lets in after it, and one more. A
    fixed 625,000 was two windows at 1,280 x 8 (317,440 flows), and a window closes 2.3 s after
    its end with 1 s health batches: the window about to close was shed, every other window
    read empty (the harness, some runs: 20 windows in the first 30 s)."""
    windows = math.ceil(max(lag_s, 0.0) / max(window_s, 1e-3)) + 2
    return max(MAX_PENDING // 8, windows * max(int(n_flows), 0))


class Ingest:
    def __init__(self, flows: np.ndarray, keep_s: float = 10.0,
                 max_summary_rows: int = MAX_PENDING // 8):
        self.flows = flows
        self.keep_s = keep_s
        self.max_summary_rows = max_summary_rows
        self.chunks: list[dict[str, np.ndarray]] = []
        self.pending = 0
        self.keys: deque[tuple[float, np.ndarray]] = deque()  # (arrival, keys)
        self.health: dict[str, deque] = {}
        self.fields: list[str] = []
        self.closed_until_ns = 0  # records sent before this belong to closed windows
        self.late = 0
        self.dropped = 0
        self.bad_batches = 0
        # agents in summary mode: per window index, the batches' summaries and the responders'
        # counts (window, flow, count) until the window closes
        self.summaries: dict[int, list[WindowSummary]] = {}
        self.received: dict[int, list[np.ndarray]] = {}
        self.summary_rows = 0
        self.window_ns: int | None = None  # the agents' summary window, once one has sent
        self.ahead = 0  # probes summarized for windows far ahead of the wall clock (dropped)

    def add(self, node: str, batch: dict, now: float) -> None:
        if "summary" in batch:
            self._add_summary(node, batch, now)
            return
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
        self._note_health(node, batch)
        while self.keys and self.keys[0][0] < now - self.keep_s:
            self.keys.popleft()
        if self.pending > MAX_PENDING:  # the analysis cannot keep up: shed the oldest
            old = self.chunks.pop(0)
            self.pending -= old["flow"].size
            self.dropped += old["flow"].size

    def _add_summary(self, node: str, batch: dict, now: float) -> None:
        if _empty_summary(batch["summary"]):  # 3 of an agent's 4 batches a second: health only
            self._note_health(node, batch)
            return
        try:
            s, got = decode_summary(batch["summary"], node)
        except DataError:
            self.bad_batches += 1
            return
        if s.rows.size and int(s.rows["flow"].max()) >= len(self.flows) or \
                got.size and int(got["flow"].max()) >= len(self.flows):
            self.bad_batches += 1
            return
        self.window_ns = s.window_ns
        closed = self.closed_until_ns // s.window_ns
        late = s.rows["window"] < closed
        if late.any():
            self.late += int(s.rows["sent"][late].sum())
            s = s.select(~late)
        # windows far ahead of the wall clock (an agent's clock minutes ahead, or a forged
        # batch) would wait here unbounded: dropped, counted
        limit = int(now * 1e9) // s.window_ns + MAX_AHEAD_WINDOWS
        ahead = s.rows["window"] > limit
        if ahead.any():
            self.ahead += int(s.rows["sent"][ahead].sum())
            s = s.select(~ahead)
        for w, part in _by_window(s.rows["window"], s, s.select):
            self.summaries.setdefault(w, []).append(part)
        got = got[(got["window"] >= closed) & (got["window"] <= limit)]
        for w, part in _by_window(got["window"], got, got.__getitem__):
            self.received.setdefault(w, []).append(part)
        self.summary_rows += s.rows.size
        self._note_health(node, batch)
        while self.summary_rows > self.max_summary_rows and self.summaries:  # shed the oldest
            w = min(self.summaries)
            for part in self.summaries.pop(w):
                self.summary_rows -= part.rows.size
                self.dropped += part.size
            self.received.pop(w, None)

    def _note_health(self, node: str, batch: dict) -> None:
        """The batch's health rows as one float array (rows of the wrong width, not numbers or not
        finite dropped): turned into arrays here, once, not at every window (at 1,280 hosts turning
        every host's rows into one array cost a window 95 ms, docs/scale.md)."""
        rows = batch.get("health") or []
        if not rows or not isinstance(rows, list):
            return
        width = len(self.fields) or None
        good = [r for r in rows if isinstance(r, list) and r and (width is None or len(r) == width)]
        if not good:
            return
        try:
            arr = np.array(good, dtype=np.float64)
        except (TypeError, ValueError):  # not numbers, or ragged
            return
        if arr.ndim == 2:
            arr = arr[np.isfinite(arr).all(axis=1)]  # null (NaN) or infinite numbers: not a row
        if arr.ndim == 2 and len(arr):
            self.health.setdefault(node, deque(maxlen=MAX_HEALTH_ROWS)).append(arr)

    def close_summary(self, a_ns: int, b_ns: int) -> WindowSummary | None:
        """The merged summaries of the window [a_ns, b_ns) (one summary window), with each
        row's `received` from the responders' counts; None when no agent sends summaries."""
        w_ns = self.window_ns
        if w_ns is None:
            return None
        lo, hi = a_ns // w_ns, max(a_ns // w_ns + 1, b_ns // w_ns)
        parts = [p for w in range(lo, hi) for p in self.summaries.pop(w, [])]
        got = [g for w in range(lo, hi) for g in self.received.pop(w, [])]
        for w in [w for w in self.summaries if w < lo]:  # behind a skip: dropped, counted
            for part in self.summaries.pop(w):
                self.late += part.size
            self.received.pop(w, None)
        for w in [w for w in self.received if w < lo]:
            self.received.pop(w)
        s = merge(parts, w_ns, parts[0].n_bins if parts else 10)
        self.summary_rows = sum(p.rows.size for ps in self.summaries.values() for p in ps)
        if s.rows.size and got:
            g = concat_records(got)
            s.rows["received"] = sum_by_key(row_keys(g), g["count"].astype(np.float64),
                                            row_keys(s.rows))
        self.closed_until_ns = max(self.closed_until_ns, b_ns)
        return s

    def set_fields(self, fields: list[str]) -> None:
        self.fields = list(fields)

    def close(self, a_ns: int, b_ns: int) -> tuple[np.ndarray, dict]:
        """The joined probe records sent in [a_ns, b_ns), and every host's health table rows
        that overlap the window +- 2 s (for the integrity step). Then `close_summary`."""
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
        return probes, self._health_tables(a_ns, b_ns)

    def _health_tables(self, a_ns: int, b_ns: int) -> dict:
        """Every host's health rows that overlap the window +- 2 s; rows ending before that
        reach are dropped (windows close in order), the last MAX_HEALTH_ROWS of the rest kept as
        one array per host. All hosts' rows in one array: per host it was ~15 us of numpy calls,
        19 ms a window at 1,280 hosts."""
        if not self.fields:
            return {}
        i_t, i_d = self.fields.index("t_start_ns"), self.fields.index("duration_s")
        lo, hi = a_ns - 2e9, b_ns + 2e9
        nf = len(self.fields)
        nodes, arrays, counts = [], [], []
        for node, chunks in self.health.items():
            parts = [c for c in chunks if c.shape[1] == nf]
            chunks.clear()
            if parts:
                nodes.append(node)
                arrays += parts
                counts.append(sum(len(c) for c in parts))
        if not arrays:
            return {}
        rows = np.concatenate(arrays)
        owner = np.repeat(np.arange(len(nodes)), counts)
        keep = rows[:, i_t] + rows[:, i_d] * 1e9 >= lo
        rows, owner = rows[keep], owner[keep]
        ends = np.cumsum(np.bincount(owner, minlength=len(nodes)))
        last = ends[owner] - np.arange(owner.size) <= MAX_HEALTH_ROWS  # its host's last rows
        rows, owner = rows[last], owner[last]
        n_kept = np.bincount(owner, minlength=len(nodes))
        inside = rows[:, i_t] <= hi
        n_in = np.bincount(owner[inside], minlength=len(nodes))
        kept = np.split(rows, np.cumsum(n_kept)[:-1])
        selected = np.split(rows[inside], np.cumsum(n_in)[:-1])
        health = {}
        for node, k, sel in zip(nodes, kept, selected):
            if k.size:
                self.health[node].append(k)
            if sel.size:
                health[node] = {"fields": self.fields, "windows": sel}
        return health
        return probes, health


def _by_window(windows: np.ndarray, whole, pick):
    """(window, the part of `whole` in it) for each window present; a batch nearly always
    holds one window, handed on whole."""
    if windows.size == 0:
        return []
    lo, hi = int(windows.min()), int(windows.max())
    if lo == hi:
        return [(lo, whole)]
    return [(w, pick(windows == w)) for w in np.unique(windows).tolist()]


_EMPTY = {"flow": np.zeros(0, "<u4"), "seq": np.zeros(0, "<u4"), "t1": np.zeros(0, "<i8"),
          "t2": np.zeros(0, "<i8"), "t3": np.zeros(0, "<i8"), "t4": np.zeros(0, "<i8"),
          "state": np.zeros(0, "u1")}


def _empty_summary(doc) -> bool:
    """A summary with no rows, bins or counts (nothing to decode or validate)."""
    try:
        return all(doc[k]["n"] == 0 for k in ("rows", "row_bins", "received"))
    except (KeyError, TypeError):
        return False
