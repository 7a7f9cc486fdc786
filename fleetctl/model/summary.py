"""A window's per-flow probe summaries (lens agents' output, mesh/summary.py) as the coordinator
holds them; analysis/summaries.py turns them into figures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUMMARY_DTYPE = np.dtype([
    ("window", "<i8"), ("flow", "<i4"), ("sent", "<u4"), ("answered", "<u4"), ("received", "<u4"),
    ("fwd", "<i8"), ("rev", "<i8"), ("t1", "<i8"), ("t4", "<i8"),
    ("bound_t1", "<i8"), ("bound_fwd", "<i8"), ("bound_t4", "<i8"), ("bound_rev", "<i8"),
])
MAX_BINS = 100


def concat_records(arrays: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of structured arrays of one dtype, as bytes: numpy promotes a structured
    dtype's fields once per array (1,280 agents' parts: 36 ms a window, this 12 ms). Arrays of
    different dtypes go through np.concatenate."""
    if not arrays:
        raise ValueError("nothing to concatenate")
    dt = arrays[0].dtype
    if dt.names is None or any(a.dtype != dt or a.ndim != 1 for a in arrays):
        return np.concatenate(arrays)
    raw = [np.ascontiguousarray(a).view(np.uint8) for a in arrays]
    return np.concatenate(raw).view(dt)


@dataclass
class WindowSummary:
    window_ns: int
    n_bins: int
    rows: np.ndarray  # SUMMARY_DTYPE, one per (window, flow)
    bin_rows: np.ndarray  # (K,) rows with an unanswered probe
    bin_sent: np.ndarray  # (K, n_bins) probes sent per bin of the window
    bin_lost: np.ndarray  # (K, n_bins) of them unanswered
    # each row's flow in the analyzer's flow table, once found (analysis.summaries.index_flows)
    flow_index: np.ndarray | None = None

    @property
    def size(self) -> int:
        """Probes summarized."""
        return int(self.rows["sent"].sum())

    @classmethod
    def empty(cls, window_ns: int, n_bins: int = 10) -> WindowSummary:
        return cls(window_ns, n_bins, np.zeros(0, SUMMARY_DTYPE), np.zeros(0, np.int64),
                   np.zeros((0, n_bins), np.int64), np.zeros((0, n_bins), np.int64))

    def select(self, keep: np.ndarray) -> WindowSummary:
        """The rows where `keep` is True (bins follow their rows); the summary itself where
        every row is kept (a window's usual case: no copy of 306,000 rows at 1,280 x 8)."""
        if keep.size == self.rows.size and keep.all():
            return self
        new_index = np.cumsum(keep) - 1
        b = keep[self.bin_rows] if self.bin_rows.size else np.zeros(0, bool)
        return WindowSummary(self.window_ns, self.n_bins, self.rows[keep],
                             new_index[self.bin_rows[b]], self.bin_sent[b], self.bin_lost[b],
                             None if self.flow_index is None else self.flow_index[keep])
