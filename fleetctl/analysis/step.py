"""The window step of the probe engine, shared by `audit --mesh` (analysis.triangulate, every window
of a run) and lens (lens.window, one window at a time): per-path signals of one window -> findings.

    step = WindowStep(topo, paths, solver="nnls")      # once per plan: merged paths, incidence, roll-up
    sig = step.signals(sent, lost, delay, baseline)     # per merged path (sums of the traced paths)
    findings = step.findings(sig, window=0)             # Finding objects, every rule applied

Everything that depends only on the plan (the merge of identical paths, the incidence matrix, the
link columns, the roll-up's indexes) is computed once here. Loss is judged path by path (the
solver over bad paths) and, where that sees nothing, pooled per element (pooled_loss_blame: a
fleet's budget leaves a few probes per path and window, too few path by path). A finding rule is a function
`rule(step, sig, window) -> list[Finding]` in RULES: a new kind of network finding is written once,
as a rule, and both `audit --mesh` and lens report it. Triangulation (solver + roll-up, for loss
and for delay) is the first rule.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
from scipy import sparse
from scipy.stats import binom

from fleetctl.analysis.merge import merge_stats, path_groups
from fleetctl.analysis.rollup import Rollup
from fleetctl.analysis.signals import PathSignals, Thresholds, window_signals
from fleetctl.analysis.solvers import Problem, get_solver
from fleetctl.model.fabric import ELEMENT_TYPES, FixedGroups, PathTable, Topology, WindowStats
from fleetctl.model.findings import Finding

Rule = Callable[["WindowStep", PathSignals, int], list[Finding]]


class WindowStep:
    """Built once per plan; `signals` and `findings` per window."""

    def __init__(self, topo: Topology, paths: PathTable, solver: str = "nnls", th: Thresholds | None = None,
                 merge: bool = True):
        self.topo, self.paths = topo, paths
        self.th = th or Thresholds()
        self.solver = get_solver(solver)
        if merge:
            self.merged, self.group = path_groups(paths)
        else:
            self.merged, self.group = paths, np.arange(len(paths))
        self.n_rows = len(self.merged)
        self.group_layout = FixedGroups(self.group, self.n_rows)  # each window's medians
        self.inc = self.merged.matrix(topo.n_elements).tocsc()
        # link directions some path crosses: a shard's plan (or lens over a few nodes) crosses a
        # fraction of a large site's links; the rest can be neither blamed nor cleared, and
        # carrying them made each window's pooled test grow with the site, not the plan
        self.link_cols = np.flatnonzero((topo.element_types() == 0) & (np.diff(self.inc.indptr) > 0))
        self.links_only = self.inc[:, self.link_cols].tocsr()
        self.hop_class = np.rint(np.asarray(self.links_only.sum(axis=1)).ravel()).astype(np.int64)
        self.rollup = Rollup(topo, self.inc, self.th)
        # switches some path crosses, with the positions (in link_cols) of their crossed link
        # directions: the pooled test weighs a whole switch against its links
        crossed = np.diff(self.inc.indptr) > 0
        self.switch_cols = np.flatnonzero((topo.element_types() == ELEMENT_TYPES.index("switch"))
                                          & crossed)
        pos = {int(c): i for i, c in enumerate(self.link_cols)}
        # per crossed switch: its link directions, which go into it, and each one's cable (link id)
        self.switch_links, self.switch_in, self.switch_cables = [], [], []
        for c in self.switch_cols:
            sw = topo.elements[c].id
            mine = sorted(e for e in self.rollup.switch_links[sw] if e in pos)
            self.switch_links.append(np.array([pos[e] for e in mine], dtype=np.int64))
            self.switch_cables.append(np.array([topo.elements[e].id for e in mine]))
            self.switch_in.append(np.array([topo.elements[e].direction.endswith("->" + sw)
                                            for e in mine], dtype=bool))
        self.switches_only = self.inc[:, self.switch_cols].tocsr()

    def rows_through(self, cols: list[int]) -> np.ndarray:
        """Per merged row, whether it crosses any of the elements `cols` (the roll-up's incidence
        is this one)."""
        return self.rollup.paths_through(cols)

    # ------------------------------------------------------------------ per window
    def merge(self, stats: WindowStats) -> WindowStats:
        """Per-path figures (every window) summed or medianed over the merged rows."""
        return merge_stats(stats, self.group, self.n_rows, self.group_layout)

    def signals(self, sent, lost, delay, baseline) -> PathSignals:
        """Signals of merged rows (`sent`, `lost`, `delay`, `baseline` already per merged row)."""
        return window_signals(sent, lost, delay, baseline, self.th)

    def findings(self, sig: PathSignals, window: int = 0) -> list[Finding]:
        """Every rule's findings for one window."""
        out: list[Finding] = []
        for rule in RULES:
            out += rule(self, sig, window)
        return out

    def blame(self, sig: PathSignals, metric: str) -> dict[int, float]:
        """The solver's blamed link directions (element index -> magnitude) for one metric."""
        bad = sig.lossy if metric == "loss" else sig.delayed
        rows = np.flatnonzero(sig.valid)
        if bad[rows].sum() < self.th.min_bad_paths:
            return {}
        y = sig.y_loss if metric == "loss" else sig.y_delay
        problem = Problem(self.links_only[rows], self.link_cols, bad[rows], y[rows], self.th)
        return {int(self.link_cols[c]): v for c, v in self.solver.blame(problem).items()}


def pooled_loss_blame(step: WindowStep, sig: PathSignals) -> dict[int, float]:
    """Link directions whose pooled loss stands out, greedily (element index -> -log(1 - loss)).

    Path by path, a 2 % loss needs tens of probes per path and window to show; a fleet's budget
    gives a few (at 1,000 hosts, ~7 per path in a 1 s window), so most paths over a lossy cable
    lose nothing that window and the path classifier sees too few bad paths. Pooled over every
    path through an element, the same probes are thousands: the element's loss is tested against
    the loss of all paths not through it (binomial, `loss_alpha` over the candidates), the most
    concentrated excess (log-likelihood ratio) is blamed, its paths are set aside (they explain
    the excess of every element they cross: its switch, its twin), and the search repeats.

    Switches are candidates beside link directions: a switch losing on every link (a gray spine)
    shows on each of its links at the same rate, and pooled over all of them it is the most
    concentrated excess; it is blamed as all its crossed link directions (the roll-up then names
    the switch) only where `switch_min_links` of them stand out on their own, and half or more
    of those into it and of those out of it: three lossy cables into a spine raise the loss of
    every link out of it too (their paths leave through them), but not of its other links in.
    One cable lossy both ways raises every link of its spine, in and out (its paths cross them
    all): the switch must still stand so with that cable's paths set aside (`_beyond_one_cable`)."""
    th = step.th
    a = step.links_only  # merged rows x link directions
    n_links = a.shape[1]
    rows = np.array(sig.valid, dtype=bool)  # as path by path: a window's thin tail says nothing
    sent, lost = np.asarray(sig.sent, float), np.asarray(sig.lost, float)
    blamed: dict[int, float] = {}
    counted = None  # (rows, n, k): the rows n and k count, kept from round to round
    for _ in range(th.pooled_max_faults):
        counted = _pooled_counts(step, rows, sent, lost, counted)
        n, k = counted[1], counted[2]
        total_n, total_k = sent[rows].sum(), lost[rows].sum()
        if total_k < th.pooled_min_lost:
            break
        p0 = np.maximum(th.background_loss, (total_k - k) / np.maximum(total_n - n, 1.0))
        rate = k / np.maximum(n, 1.0)
        stands = _stands(k, n, p0, th)
        for j, (links, into) in enumerate(zip(step.switch_links, step.switch_in)):
            if stands[n_links + j]:
                stands[n_links + j] = _switch_pattern(stands[links], into, th) and \
                    _beyond_one_cable(step, j, rows, sent, lost)
        cand = np.flatnonzero(stands)
        if cand.size == 0:
            break
        p = binom.sf(np.rint(k[cand]) - 1, np.rint(n[cand]), p0[cand])
        ok = cand[p < th.loss_alpha / max(1, n.size)]
        if ok.size == 0:
            break
        best = int(ok[np.nanargmax(_llr(k[ok], n[ok], np.minimum(rate[ok], 1 - 1e-12), p0[ok]))])
        magnitude = float(-np.log(1 - min(rate[best], 1 - 1e-12)))
        if best < n_links:
            c = int(step.link_cols[best])
            blamed[c] = magnitude
        else:  # a switch: every link direction of it that paths cross
            c = int(step.switch_cols[best - n_links])
            for pos in step.switch_links[best - n_links]:
                blamed.setdefault(int(step.link_cols[pos]), magnitude)
        rows &= ~step.rows_through([c])  # its paths: they explain the excess of all they cross
        # an untraced row spreads its loss over every candidate ECMP element it may cross:
        # after the first fault it would name those candidates too (the untraced k=8 fat-tree
        # benchmark: 179 -> 489 wrong); further faults are searched on traced rows only
        rows &= np.asarray(step.merged.traced, dtype=bool)
        if (counted[0] & ~rows).sum() > POOLED_UPDATE_SHARE * counted[0].sum():
            counted = None  # most rows gone (untraced ones): count the rest afresh
    return blamed


POOLED_UPDATE_SHARE = 0.25  # rows set aside at most, as a share of those left, to update in place


def _pooled_counts(step: WindowStep, rows: np.ndarray, sent: np.ndarray, lost: np.ndarray,
                   counted: tuple | None) -> tuple:
    """(rows, n, k): pooled probes and losses per link direction, then per switch, over `rows`.
    With the previous round's (rows, n, k), the rows it counted and `rows` drops are subtracted
    (a cable's paths, a few per cent of the rows) instead of four sparse products over every
    row again (11 ms a round at 1,280 x 8)."""
    if counted is None:
        s, l = np.where(rows, sent, 0.0), np.where(rows, lost, 0.0)
        a, sw = step.links_only, step.switches_only
        return rows.copy(), np.concatenate([a.T @ s, sw.T @ s]), np.concatenate([a.T @ l, sw.T @ l])
    before, n, k = counted
    gone = np.flatnonzero(before & ~rows)
    a, sw = step.links_only[gone], step.switches_only[gone]
    s, l = sent[gone], lost[gone]
    n = np.maximum(n - np.concatenate([a.T @ s, sw.T @ s]), 0.0)
    k = np.maximum(k - np.concatenate([a.T @ l, sw.T @ l]), 0.0)
    return rows.copy(), n, k


def _stands(k: np.ndarray, n: np.ndarray, p0: np.ndarray, th: Thresholds) -> np.ndarray:
    """Elements whose pooled loss stands out: enough lost probes, at twice the rest's rate and
    at least `pooled_min_loss`."""
    return (k >= th.pooled_min_lost) & (k / np.maximum(n, 1.0) >= np.maximum(2 * p0, th.pooled_min_loss))


def _switch_pattern(own: np.ndarray, into: np.ndarray, th: Thresholds) -> bool:
    """A switch's own link directions (`own`: standing) as a switch's fault shows on them:
    `switch_min_links` or more, half or more of those into it and of those out of it."""
    return bool(own.sum() >= th.switch_min_links and 2 * own[into].sum() >= into.sum()
                and 2 * own[~into].sum() >= (~into).sum())


def _llr(k: np.ndarray, n: np.ndarray, r: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Log-likelihood ratio of k lost of n at rate r against the background rate q."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return k * np.log(r / q) + (n - k) * np.log((1 - r) / (1 - q))


def _beyond_one_cable(step: WindowStep, j: int, rows: np.ndarray, sent: np.ndarray,
                      lost: np.ndarray) -> bool:
    """Does the switch's pattern hold with the paths of its worst cable (both directions: the
    one whose loss stands out most, log-likelihood ratio) set aside? A cable lossy both ways
    raises every link of its switch (a 2 % cable of a rail-optimized spine put its 14 other link
    directions at 0.3-0.9 %, over the 0.5 % floor for most: the spine was named, not the cable);
    a switch losing on every link still shows on the others. A switch of two cables or fewer is
    left to the first test: without one cable too few of its links remain to tell."""
    th, into, ids = step.th, step.switch_in[j], step.switch_cables[j]
    if np.unique(ids).size < 3:
        return True
    a = step.links_only[:, step.switch_links[j]]

    def counts(keep: np.ndarray):
        s, l = np.where(keep, sent, 0.0), np.where(keep, lost, 0.0)
        n, k = a.T @ s, a.T @ l
        p0 = np.maximum(th.background_loss, (l.sum() - k) / np.maximum(s.sum() - n, 1.0))
        return n, k, p0

    n, k, p0 = counts(rows)
    llr = np.nan_to_num(_llr(k, n, np.clip(k / np.maximum(n, 1.0), p0, 1 - 1e-12), p0))
    cable = ids == ids[int(np.argmax(llr))]
    through = np.asarray(a[:, cable].sum(axis=1)).ravel() > 0
    n, k, p0 = counts(rows & ~through)
    return _switch_pattern(_stands(k, n, p0, th)[~cable], into[~cable], th)


def for_metric(sig: PathSignals, metric: str) -> PathSignals:
    """A lossy path's delay figure comes from the probes that survived: for a delay finding it is
    neither bad nor clean."""
    return replace(sig, valid=sig.valid & ~sig.lossy) if metric == "delay" else sig


def triangulation(step: WindowStep, sig: PathSignals, window: int) -> list[Finding]:
    """Loss, then delay: bad paths -> the solver's blamed link directions -> the roll-up (switches,
    NICs, hosts)."""
    out: list[Finding] = []
    for metric in ("loss", "delay"):
        msig = for_metric(sig, metric)
        blamed = step.blame(msig, metric)
        if blamed:
            out += step.rollup.findings(blamed, metric, msig, window)
        if metric == "loss":  # too few probes per path to see it path by path: pooled
            rest = _beyond_blamed(step, msig, blamed)
            pooled = {c: v for c, v in pooled_loss_blame(step, rest).items() if c not in blamed}
            if pooled:
                out += step.rollup.findings(pooled, metric, rest, window, pooled=True)
    return out


def _beyond_blamed(step: WindowStep, sig: PathSignals, blamed: dict[int, float]) -> PathSignals:
    """The signals the pooled test still weighs once the solver has blamed elements path by
    path: their paths set aside (they explain their own excess and their neighbours'), and
    untraced rows too, as after the pooled test's own first pick. A cable down beside a 2 %
    cable hid the 2 %: the pooled test ran only where nothing was blamed (the scale benchmark's
    two-fault windows: 5 of 86 faults missed at 1,280 x 8, all of them so)."""
    if not blamed:
        return sig
    keep = sig.valid & ~step.rows_through(list(blamed)) & np.asarray(step.merged.traced, dtype=bool)
    return replace(sig, valid=keep)


RULES: list[Rule] = [triangulation]


@contextmanager
def extra_rule(rule: Rule):
    """Add a finding rule for the duration of a block (tests; a site's own rules)."""
    RULES.append(rule)
    try:
        yield rule
    finally:
        RULES.remove(rule)


def element_stats(inc, sent: np.ndarray, lost: np.ndarray, delay: np.ndarray,
                  percentiles: tuple[float, ...] = (50.0, 99.0)) -> dict[str, np.ndarray]:
    """Per element of the incidence `inc` (paths x elements): probes through it (weighted by the
    crossing probability of candidate rows), probes lost, paths crossing it, and percentiles
    (linear interpolation, as numpy's) of the delays of the paths crossing it with a finite
    delay. `inc` may be an ElementIndex (built once per plan, as lens does)."""
    index = inc if isinstance(inc, ElementIndex) else ElementIndex(inc)
    return index.stats(sent, lost, delay, percentiles)


class ElementIndex:
    """The incidence's forms element_stats needs, built once per plan. The percentiles need no
    sort of the incidence's entries per window: the paths are sorted by delay (P log P), the
    incidence's rows permuted into that order and turned into columns (linear in the entries,
    and each column's rows come out ascending), so each element's k-th smallest path delay is
    its column's k-th entry."""

    def __init__(self, inc):
        if sparse.isspmatrix_csc(inc) and inc.dtype == np.float64:
            self.csc_t = inc.T  # elements x paths, the weighted sums: inc's own arrays, no copy
            csr = inc.tocsr()
        else:
            csr = inc.tocsr().astype(np.float64)
            self.csc_t = csr.T.tocsr()
        # crossing or not: the percentiles' paths. One byte an entry: the per-window transpose
        # moves 5 bytes an entry, not 12 (4.5 M entries at 1,280 x 8: 112 -> 66 ms)
        csr = sparse.csr_matrix(((csr.data > 0).astype(np.int8), csr.indices, csr.indptr),
                                shape=csr.shape)
        csr.eliminate_zeros()
        self.csr = csr
        self.n_paths, self.n_elements = csr.shape
        self.paths = np.diff(csr.tocsc().indptr)

    def loads(self, sent, lost) -> dict[str, np.ndarray]:
        """Per element: probes through it and lost (weighted), paths crossing it. One product
        with both columns: one pass over the incidence, not two (~30 % less at 4.5 M entries)."""
        both = self.csc_t @ np.column_stack([np.asarray(sent, float), np.asarray(lost, float)])
        return {"sent": both[:, 0], "lost": both[:, 1], "paths": self.paths}

    def stats(self, sent, lost, delay, percentiles=(50.0, 99.0)) -> dict[str, np.ndarray]:
        out = self.loads(sent, lost)
        out["delay"] = self.percentiles(np.asarray(delay, float), percentiles)
        return out

    def percentiles(self, delay: np.ndarray, percentiles) -> np.ndarray:
        # only the paths with a delay are ranked, permuted and transposed (a window's probes
        # reach some of the plan's paths: the cost follows them, not the plan); equal delays in
        # any order give the same figures
        finite = np.flatnonzero(np.isfinite(delay))
        order = finite[np.argsort(delay[finite])]
        ranked = delay[order]
        cols = self.csr[order].tocsc()  # row i of this is the i-th smallest delay's path
        if not cols.has_sorted_indices:  # scipy builds columns in row order; make sure
            cols.sort_indices()
        starts = cols.indptr[:-1]
        n = np.diff(cols.indptr)  # per element: the paths through it with a delay
        out = np.full((len(percentiles), self.n_elements), np.nan)
        has = n > 0
        for i, p in enumerate(percentiles):
            pos = p / 100.0 * (n[has] - 1)
            lo = np.floor(pos).astype(np.int64)
            hi = np.minimum(lo + 1, n[has] - 1)
            v_lo = ranked[cols.indices[starts[has] + lo]]
            v_hi = ranked[cols.indices[starts[has] + hi]]
            out[i, has] = v_lo + (v_hi - v_lo) * (pos - lo)
        return out
