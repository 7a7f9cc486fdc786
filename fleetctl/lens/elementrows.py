"""A window's per-element figures (link directions, switches, NICs), kept as arrays and made into
rows (dicts, the format docs/lens.md gives) only when read.

A lens window at 1,280 hosts x 8 NICs reports ~32,000 elements; building their dicts every
window cost ~0.03 s of the window thread's CPU and ~15 MB held, while only /metrics (when
enabled) reads them all and status.json reads the 200 lossiest. So the window keeps the arrays;
`worst` ranks them without building a row it does not return.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ElementRows(Sequence):
    """Rows {"type", "id", ["direction"], "loss_pct", "delay_p50_us", "delay_p99_us", "probes",
    "lost", ["delay_window_end"]} of the elements `cols` (topology element indices), built
    from the arrays on first read and kept. `id_rank`: each topology element's rank by id
    (equal ids, a link's two directions, equal ranks), for `worst`."""

    def __init__(self, elements, cols: np.ndarray, loss_pct: np.ndarray, p50: np.ndarray,
                 p99: np.ndarray, probes: np.ndarray, lost: np.ndarray,
                 delay_window_end: float | None, id_rank: np.ndarray):
        self._elements = elements
        self.cols, self.loss_pct, self.p50, self.p99 = cols, loss_pct, p50, p99
        self.probes, self.lost = probes, lost
        self.delay_window_end = delay_window_end
        self._id_rank = id_rank
        self._rows: list[dict] | None = None

    def __len__(self) -> int:
        return len(self.cols)

    def __getitem__(self, i):
        return self.rows()[i]

    def __iter__(self):
        return iter(self.rows())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def rows(self) -> list[dict]:
        if self._rows is None:
            self._rows = self._build(np.arange(len(self.cols)))
        return self._rows

    def worst(self, n: int) -> list[dict]:
        """The `n` rows with the highest loss, ties by element id (then element order), as
        `heapq.nsmallest(n, rows, key=lambda r: (-r["loss_pct"], r["id"]))` gives them."""
        if not len(self.cols) or n <= 0:
            return []
        order = np.lexsort((self._id_rank[self.cols], -self.loss_pct))[:n]
        return self._build(order)

    def _build(self, take: np.ndarray) -> list[dict]:
        # read out as Python lists: per-element numpy scalars cost 0.2 s a window at 8,192 NICs
        cols = self.cols[take].tolist()
        loss = self.loss_pct[take].tolist()
        p50 = self.p50[take].tolist()
        p99 = self.p99[take].tolist()
        probes = self.probes[take].tolist()
        lost = self.lost[take].tolist()
        elements, since = self._elements, self.delay_window_end
        out = []
        for e, lo, d50, d99, n, nl in zip(cols, loss, p50, p99, probes, lost):
            el = elements[e]
            row = {"type": el.type, "id": el.id, "loss_pct": lo,
                   "delay_p50_us": d50 if d50 == d50 else None,
                   "delay_p99_us": d99 if d99 == d99 else None, "probes": n, "lost": nl}
            if el.direction:
                row["direction"] = el.direction
            if since is not None:
                row["delay_window_end"] = since
            out.append(row)
        return out
