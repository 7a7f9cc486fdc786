"""Sampled debug records (`lens.debug_records`, docs/lens.md "Sampled debug records"): beside their
summaries, agents send every record of a small, fixed share of flows (mesh/agent.py, `_debug`); the
coordinator joins each closed window's into PROBE_DTYPE rows for the debug store (debugstore.py).
They never feed the analysis: the summaries do, and a batch whose debug part is malformed is
still ingested whole (ingest.py never reads "debug").

Everything here is hostile input: a malformed part (bad encoding, a count over the agent's cap, a
flow outside the plan or outside the sample, an unknown state) is counted and dropped, never
raised. Memory is bounded: at most MAX_PENDING records wait for their window (beyond, the oldest
are shed, counted), and the responders' answer-log keys of the sampled flows (which tell lost out
from lost back) are kept KEEP_KEYS_S and at most MAX_KEYS.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from fleetctl.errors import DataError
from fleetctl.mesh.agent import DEBUG_HASH
from fleetctl.mesh.collect import decode_debug, join_records
from fleetctl.model.fabric import PROBE_DTYPE

MAX_PENDING = 200_000  # sampled records waiting for their window, all agents together
MAX_KEYS = 400_000  # answer-log keys kept for the join
KEEP_KEYS_S = 10.0
MAX_AHEAD_S = 60.0  # records sent further ahead of the coordinator's clock are dropped
COUNTERS = ("debug_batches", "debug_batches_malformed", "debug_records_in", "debug_records_late",
            "debug_records_shed", "debug_records_agent_dropped")


def sampled(flows: np.ndarray, share: float) -> np.ndarray:
    """mesh.agent.debug_sampled over an array of flow ids."""
    rank = (flows.astype(np.uint64) * np.uint64(DEBUG_HASH)) & np.uint64(0xFFFFFFFF)
    return rank < np.uint64(int(share * 4294967296))


class DebugCollector:
    """The sampled records of one plan (`flows`: its FLOW_DTYPE table, row = flow id) until their
    window closes. `counters`: the coordinator's, updated in place (COUNTERS)."""

    def __init__(self, flows: np.ndarray, share: float, counters: dict | None = None,
                 keep_s: float = KEEP_KEYS_S):
        self.flows, self.share, self.keep_s = flows, float(share), keep_s
        self.counters = counters if counters is not None else {}
        for name in COUNTERS:
            self.counters.setdefault(name, 0)
        self.chunks: list[dict[str, np.ndarray]] = []
        self.pending = 0
        self.keys: deque[tuple[float, np.ndarray]] = deque()  # (arrival, keys)
        self.n_keys = 0
        self.closed_until_ns = 0

    def add(self, node: str, doc, now: float) -> None:
        """One batch's "debug" part: decoded, checked, kept until its window closes."""
        c = self.counters
        c["debug_batches"] += 1
        try:
            fields, keys, dropped = decode_debug(doc, node)
            self._check_flows(fields["flow"], (keys >> np.uint64(32)).astype(np.int64))
        except DataError:
            c["debug_batches_malformed"] += 1
            return
        c["debug_records_agent_dropped"] += dropped
        t1 = fields["t1"]
        keep = (t1 >= self.closed_until_ns) & (t1 <= int((now + MAX_AHEAD_S) * 1e9))
        c["debug_records_late"] += int((~keep).sum())
        if keep.any():
            chunk = fields if keep.all() else {k: v[keep] for k, v in fields.items()}
            self.chunks.append(chunk)
            self.pending += chunk["flow"].size
            c["debug_records_in"] += chunk["flow"].size
        if keys.size:
            self.keys.append((now, keys))
            self.n_keys += keys.size
        self._bound(now)

    def _check_flows(self, flows: np.ndarray, log_flows: np.ndarray) -> None:
        for f in (flows.astype(np.int64), log_flows):
            if f.size and (int(f.max()) >= len(self.flows) or not sampled(f, self.share).all()):
                raise DataError("debug records of a flow outside the plan or the sample")

    def _bound(self, now: float) -> None:
        while self.keys and (self.keys[0][0] < now - self.keep_s or self.n_keys > MAX_KEYS):
            self.n_keys -= self.keys.popleft()[1].size
        while self.pending > MAX_PENDING:  # the store cannot keep up: shed the oldest
            old = self.chunks.pop(0)
            self.pending -= old["flow"].size
            self.counters["debug_records_shed"] += old["flow"].size

    def close(self, a_ns: int, b_ns: int) -> np.ndarray:
        """The sampled records sent in [a_ns, b_ns) as PROBE_DTYPE rows in send order (lost out
        or back from the responders' keys); older ones still held are dropped (counted late)."""
        take, keep = [], []
        for c in self.chunks:
            t1 = c["t1"]
            sel = (t1 >= a_ns) & (t1 < b_ns)
            old = t1 < a_ns
            self.counters["debug_records_late"] += int(old.sum())
            if sel.any():
                take.append({k: v[sel] for k, v in c.items()})
            rest = ~sel & ~old
            if rest.any():
                keep.append(c if rest.all() else {k: v[rest] for k, v in c.items()})
        self.chunks = keep
        self.pending = sum(c["flow"].size for c in keep)
        self.closed_until_ns = max(self.closed_until_ns, b_ns)
        if not take:
            return np.zeros(0, PROBE_DTYPE)
        cat = {k: np.concatenate([c[k] for c in take]) for k in take[0]}
        seen = np.concatenate([k for _, k in self.keys]) if self.keys else np.zeros(0, np.uint64)
        probes = join_records(cat, seen, self.flows)
        return probes[np.argsort(probes["t_send"], kind="stable")]
