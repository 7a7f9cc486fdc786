"""Clock offsets and drifts from the probes themselves (Huygens-style, software timestamps).

A probe from host A to host B carries four timestamps: t1 (A sends, A's clock), t2 (B receives,
B's clock), t3 (B echoes, B's clock), t4 (A receives, A's clock). With theta = clock_B - clock_A
and one-way delays d >= 0:  t3 - t4 <= theta <= t2 - t1. Queuing only loosens these bounds, so
per pair we keep the tightest bound of each time bin (minimum-delay filtering; the coded-probe
filter of Huygens needs paired probes the agent does not send) and fit the line
theta(t) = a + b t that separates upper from lower bounds with the largest margin (a two-variable
LP, solved exactly by max_margin_line).

Pair fits disagree by their errors; the network fixes them: per host offset o_h and drift r_h,
theta_AB(t) = (o_B - o_A) + (r_B - r_A) t, solved by weighted least squares over every measured
pair (offsets around any loop then sum to zero). One reference host per connected component is
held at zero. The fit is iteratively reweighted (Huber), so one pair biased by an asymmetric path
is outvoted by the loops around it. The residual of a pair is its own fit minus the network's.

What no probe can see: a constant asymmetry between a pair's forward and reverse minimum delays
biases that pair by half the asymmetry; the network fit spreads, but cannot remove, it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.sparse.linalg import lsqr

from fleetctl.errors import DataError

MAX_DRIFT = 1e-3  # |b| bound in the LP: 1000 ppm is far beyond any working oscillator
MIN_SIGMA = 1e-7  # floor of a pair's uncertainty (s), so one lucky pair cannot dominate
IRLS_ROUNDS = 4  # reweighted least-squares rounds of the network fit
HUBER_C = 3.0  # residuals beyond 3 robust sigmas are down-weighted
MAX_PEERS = 8  # host pairs fitted per host (by most probes), plus a spanning forest
# weight of a row r_h = 0 per host (drift relative to the reference): a host whose pairs say
# nothing of its drift (free slopes, fit_pair) would otherwise get the least-squares minimum-norm
# answer, which spreads offsets into drift x t0 (64 sparse hosts: 1,046 ppm for a -28 ppm host);
# 100 ppm costs what 0.1 us costs an offset row at 1 us, nothing against a pair's drift row
DRIFT_PRIOR = 1e3


@dataclass
class PairFit:
    a: int  # host index of A (the sender)
    b: int  # host index of B
    t0: float  # reference time of the fit (A's clock, s)
    offset: float  # theta_AB(t0), s
    drift: float  # d theta / dt
    margin: float  # half the gap between the bound envelopes, s (negative: bounds overlap)
    span: float  # time covered, s
    probes: int
    drift_known: bool = True  # False: the bounds left the slope free (fit_pair), offset only


@dataclass
class ClockModel:
    hosts: list[str]
    offset: np.ndarray  # s, at t = 0 of the reference clock, relative to the component reference
    drift: np.ndarray  # s/s
    component: np.ndarray  # connected component per host (-1: no usable pair)
    pairs: list[PairFit]
    residual: np.ndarray  # per pair: own fit minus network value at t0, s

    def theta(self, a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
        """clock_B - clock_A at time t (A's clock), for arrays of host indices."""
        return (self.offset[b] - self.offset[a]) + (self.drift[b] - self.drift[a]) * t

    def one_way_delays(self, a, b, t1, t2, t3, t4) -> tuple[np.ndarray, np.ndarray]:
        """Forward (A->B) and reverse (B->A) one-way delays in seconds, clocks corrected."""
        fwd = (t2 - self.theta(a, b, t1)) - t1
        rev = t4 - (t3 - self.theta(a, b, t4))
        return fwd, rev


def fit_pair(t1, t2, t3, t4, bins: int = 32) -> tuple[float, float, float, float] | None:
    """Max-margin line between upper bounds (t1, t2-t1) and lower bounds (t4, t3-t4).

    Returns (t0, a, b, margin) with theta(t) = a + b (t - t0), or None with too few probes.
    A slope at the +-MAX_DRIFT bound means the bounds did not pin it (a few of them, the upper
    ones early and the lower ones late, say: tilting widens the gap without end); the caller
    then keeps the offset at b = 0 and no drift (synchronize)."""
    t1, t2, t3, t4 = (np.asarray(x, dtype=np.float64) for x in (t1, t2, t3, t4))
    ok = np.isfinite(t1) & np.isfinite(t2) & np.isfinite(t3) & np.isfinite(t4)
    if ok.sum() < 4:
        return None
    t1, t2, t3, t4 = t1[ok], t2[ok], t3[ok], t4[ok]
    t0 = float(np.median(t1))
    up_t, up_v = t1 - t0, t2 - t1
    lo_t, lo_v = t4 - t0, t3 - t4
    edges = np.linspace(up_t.min(), up_t.max(), min(bins, max(2, ok.sum() // 4)) + 1)
    which = np.clip(np.searchsorted(edges, up_t, side="right") - 1, 0, len(edges) - 2)
    # the tightest bound of each bin: the first of its bin once sorted by (bin, bound)
    order_up = np.lexsort((up_v, which))
    order_lo = np.lexsort((-lo_v, which))
    first = np.r_[True, which[order_up][1:] != which[order_up][:-1]]
    keep_up = order_up[first]
    keep_lo = order_lo[np.r_[True, which[order_lo][1:] != which[order_lo][:-1]]]
    return (t0, *max_margin_line(up_t[keep_up], up_v[keep_up], lo_t[keep_lo], lo_v[keep_lo]))


def max_margin_line(ut, uv, lt, lv) -> tuple[float, float, float]:
    """(a, b, m) maximising m with a + b t + m <= uv at ut and a + b t - m >= lv at lt, |b| <=
    MAX_DRIFT: the line through the middle of the widest slab between the two point sets.

    For a fixed slope b the best line sits halfway between U(b) = min(uv - b ut) and L(b) =
    max(lv - b lt), with margin (U - L) / 2: concave in b, so its maximum lies where U or L
    bends, or at a bound. U bends only at the slopes of the lower convex hull of the upper
    bounds, L at those of the upper hull of the lower bounds: ~60 candidate slopes, where every
    crossing of two bound lines made ~1,000 (which cost ~0.5 ms a pair). Where the top is flat,
    the middle of the flat part is taken. Exact."""
    ut, uv, lt, lv = (np.asarray(x, dtype=np.float64) for x in (ut, uv, lt, lv))
    b = np.array([-MAX_DRIFT, MAX_DRIFT, *_hull_slopes(ut, uv, lower=True),
                  *_hull_slopes(lt, lv, lower=False)])
    b = np.sort(b[(b >= -MAX_DRIFT) & (b <= MAX_DRIFT)])
    upper = (uv[None, :] - b[:, None] * ut[None, :]).min(axis=1)
    lower = (lv[None, :] - b[:, None] * lt[None, :]).max(axis=1)
    margin = (upper - lower) / 2
    best = margin.max()
    tie = np.flatnonzero(margin >= best - 1e-12 * max(1.0, abs(best)))
    slope = float((b[tie[0]] + b[tie[-1]]) / 2)  # b is sorted: the flat top's middle
    up = float((uv - slope * ut).min())
    lo = float((lv - slope * lt).max())
    return (up + lo) / 2, slope, (up - lo) / 2


def _hull_slopes(t: np.ndarray, v: np.ndarray, lower: bool) -> list[float]:
    """Slopes of the edges of the points' lower (or upper) convex hull, left to right (Andrew's
    monotone chain; a few dozen points, so plain Python)."""
    order = np.lexsort((v if lower else -v, t))
    hull: list[tuple[float, float]] = []
    for x, y in zip(t[order].tolist(), v[order].tolist()):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            cross = (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)
            if (cross <= 0) if lower else (cross >= 0):
                hull.pop()
            else:
                break
        hull.append((x, y))
    return [(y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in zip(hull, hull[1:]) if x2 != x1]


def synchronize(hosts: list[str], src: np.ndarray, dst: np.ndarray, t1, t2, t3, t4,
                max_peers: int = MAX_PEERS) -> ClockModel:
    """Fit host pairs, then the network. Lost probes carry NaN timestamps.

    A pair's probes in both directions make one fit (B -> A probes bound theta_AB too, from the
    other side), and each host keeps its `max_peers` partners with the most probes, plus what a
    spanning forest of the probe graph needs to stay connected: the fit count grows with hosts,
    not with the pairs a plan probes (12,240 directed pairs at 1,024 hosts, 2.5 ms each before)."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    arrays = [np.asarray(x, dtype=np.float64) for x in (t1, t2, t3, t4)]
    n = len(hosts)
    if not (len(src) == len(dst) == len(arrays[0])):
        raise DataError("clock sync: probe arrays differ in length")
    if len(src) and (src.min() < 0 or max(src.max(), dst.max()) >= n):
        raise DataError("clock sync: a probe names a host index outside the host list")
    lo_h, hi_h = np.minimum(src, dst), np.maximum(src, dst)
    flipped = src > dst  # B -> A: (t1, t2, t3, t4) read as A -> B bounds are (t3, t4, t1, t2)
    a1 = np.where(flipped, arrays[2], arrays[0])
    a2 = np.where(flipped, arrays[3], arrays[1])
    a3 = np.where(flipped, arrays[0], arrays[2])
    a4 = np.where(flipped, arrays[1], arrays[3])
    key = lo_h * n + hi_h
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, int)
    ends = np.r_[starts[1:], len(key)].astype(np.int64)
    chosen = _chosen_pairs(key[starts] // n, key[starts] % n, ends - starts, n, max_peers)
    fits: list[PairFit] = []
    for s, e in zip(starts[chosen].tolist(), ends[chosen].tolist()):
        idx = order[s:e]
        a, b = int(lo_h[idx[0]]), int(hi_h[idx[0]])
        if a == b:
            continue
        got = fit_pair(a1[idx], a2[idx], a3[idx], a4[idx])
        if got is None:
            continue
        t0, off, drift, margin = got
        t = a1[idx]
        span = float(np.nanmax(t) - np.nanmin(t))
        known = abs(drift) < MAX_DRIFT * (1 - 1e-9)
        if not known:  # the slope is free: the offset at t0 with no drift, and no drift said
            off, margin = _offset_only(a1[idx], a2[idx], a3[idx], a4[idx], t0)
            drift = 0.0
        fits.append(PairFit(a, b, t0, off, drift, margin, span, len(idx), known))
    return network_fit(hosts, fits)


def _offset_only(t1, t2, t3, t4, t0: float) -> tuple[float, float]:
    """(offset, margin) of the flat line between a pair's bounds: halfway between the tightest
    upper bound (t2 - t1) and the tightest lower one (t3 - t4)."""
    up = float(np.nanmin(t2 - t1))
    lo = float(np.nanmax(t3 - t4))
    return (up + lo) / 2, (up - lo) / 2


def _chosen_pairs(a: np.ndarray, b: np.ndarray, probes: np.ndarray, n: int, max_peers: int
                  ) -> np.ndarray:
    """Which host pairs to fit: each host's `max_peers` partners with the most probes, and the
    pairs of a maximum spanning forest (by probes), so that no component falls apart."""
    m = len(a)
    if m == 0:
        return np.zeros(0, dtype=bool)
    keep = np.zeros(m, dtype=bool)
    ends = np.concatenate([a, b])
    idx = np.concatenate([np.arange(m), np.arange(m)])
    order = np.lexsort((-np.concatenate([probes, probes]), ends))  # per host, most probes first
    ends, idx = ends[order], idx[order]
    first = np.r_[True, ends[1:] != ends[:-1]]
    rank = np.arange(len(ends)) - np.maximum.accumulate(np.where(first, np.arange(len(ends)), 0))
    keep[idx[rank < max_peers]] = True
    if not keep.all():
        weight = probes.max() + 1.0 - probes  # the spanning forest with the most probes
        tree = minimum_spanning_tree(coo_matrix((weight, (a, b)), shape=(n, n))).tocoo()
        in_tree = set(zip(np.minimum(tree.row, tree.col).tolist(),
                          np.maximum(tree.row, tree.col).tolist()))
        keep |= np.array([(x, y) in in_tree for x, y in zip(a.tolist(), b.tolist())])
    return keep


def _solve(fits: list[PairFit], col: np.ndarray, nf: int, robust: np.ndarray) -> np.ndarray:
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for f, rw in zip(fits, robust):
        sigma = max(abs(f.margin), MIN_SIGMA)
        w_off = rw / sigma
        w_dr = rw * max(f.span, 1e-3) / (2.0 * sigma) if f.drift_known else 0.0  # a drift
        # error e moves the ends e*span/2; a pair whose bounds left the slope free says nothing
        for h, sign in ((f.b, 1.0), (f.a, -1.0)):
            if col[h] >= 0:
                rows += [r, r, r + 1]
                cols += [col[h], nf + col[h], nf + col[h]]
                vals += [sign * w_off, sign * w_off * f.t0, sign * w_dr]
        rhs += [w_off * f.offset, w_dr * f.drift]
        r += 2
    for j in range(nf):  # DRIFT_PRIOR
        rows.append(r)
        cols.append(nf + j)
        vals.append(DRIFT_PRIOR)
        rhs.append(0.0)
        r += 1
    mat = coo_matrix((vals, (rows, cols)), shape=(r, 2 * nf)).tocsr()
    return lsqr(mat, np.array(rhs), atol=1e-14, btol=1e-14, iter_lim=20 * (2 * nf + 10))[0]


def _theta_sol(sol: np.ndarray, col: np.ndarray, nf: int, a: int, b: int, t: float) -> float:
    def at(h):
        return (sol[col[h]] + sol[nf + col[h]] * t) if col[h] >= 0 else 0.0
    return at(b) - at(a)


def network_fit(hosts: list[str], fits: list[PairFit]) -> ClockModel:
    n = len(hosts)
    offset = np.full(n, np.nan)
    drift = np.full(n, np.nan)
    component = np.full(n, -1)
    if not fits:
        return ClockModel(hosts, offset, drift, component, fits, np.zeros(0))
    pa = np.array([f.a for f in fits])
    pb = np.array([f.b for f in fits])
    graph = coo_matrix((np.ones(len(fits)), (pa, pb)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    used = np.zeros(n, dtype=bool)
    used[pa] = used[pb] = True
    refs = {lab: int(np.flatnonzero(labels == lab)[0]) for lab in np.unique(labels[used])}
    # unknowns: offsets then drifts of every host; one reference per component held at 0
    free = np.array([used[h] and refs[labels[h]] != h for h in range(n)])
    col = -np.ones(n, dtype=np.int64)
    col[free] = np.arange(free.sum())
    nf = int(free.sum())
    sol = np.zeros(2 * nf)
    robust = np.ones(len(fits))
    for _ in range(IRLS_ROUNDS if nf else 0):
        sol = _solve(fits, col, nf, robust)
        resid = np.array([f.offset - _theta_sol(sol, col, nf, f.a, f.b, f.t0) for f in fits])
        scale = max(1.4826 * float(np.median(np.abs(resid))), MIN_SIGMA)
        # Huber weights: a pair far off the network's consensus (one asymmetric path) is
        # down-weighted instead of dragging its loop along
        robust = np.minimum(1.0, HUBER_C * scale / np.maximum(np.abs(resid), 1e-15))
    for h in range(n):
        if not used[h]:
            continue
        component[h] = labels[h]
        offset[h] = sol[col[h]] if col[h] >= 0 else 0.0
        drift[h] = sol[nf + col[h]] if col[h] >= 0 else 0.0
    model = ClockModel(hosts, offset, drift, component, fits, np.zeros(len(fits)))
    model.residual = np.array([f.offset - model.theta(np.array([f.a]), np.array([f.b]),
                                                      np.array([f.t0]))[0] for f in fits])
    return model
