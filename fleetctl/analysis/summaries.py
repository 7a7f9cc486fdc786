"""Per-window, per-flow probe summaries (what lens's agents send, mesh/summary.py) on the
coordinator's side: merged per window, turned into per-path figures, clock bounds and loss bins.

A row stands for every probe of one flow sent in one window: sent, answered, received (how many
the responder logged, from its own counts), the median raw forward and back times with the mean
send and receive times, the tightest clock bounds. Lost out = sent - received, lost back =
received - answered. A window's cost here grows with the flows probed, not with the probes.

`from_probes` computes the same summaries from probe records: the tests and benchmarks use it
to drive the summary path with records whose truth they know, and to check the agents' own
summaries against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetctl.analysis.clock import ClockModel
from fleetctl.analysis.windows import US_RESOLUTION, FlowIndex
from fleetctl.model.fabric import PROBE_DTYPE, FixedGroups, group_quantiles
from fleetctl.model.summary import MAX_BINS, SUMMARY_DTYPE, WindowSummary, concat_records

__all__ = ["MAX_BINS", "SUMMARY_DTYPE", "WindowSummary", "clock_records", "from_probes",
           "loop_figures", "merge", "path_figures"]

def merge(parts: list[WindowSummary], window_ns: int, n_bins: int) -> WindowSummary:
    """One summary from parts (agents' batches; a window can leave an agent in two when its ring
    had to be emptied early): counts add up, medians are averaged weighted by their probes, the
    tightest bounds win."""
    parts = [p for p in parts if p.rows.size]
    if not parts:
        return WindowSummary.empty(window_ns, n_bins)
    rows = concat_records([p.rows for p in parts])
    offsets = np.cumsum([0] + [p.rows.size for p in parts[:-1]])
    bin_rows = np.concatenate([p.bin_rows + o for p, o in zip(parts, offsets)])
    bin_sent = np.concatenate([_fit_bins(p.bin_sent, n_bins) for p in parts])
    bin_lost = np.concatenate([_fit_bins(p.bin_lost, n_bins) for p in parts])
    key = row_keys(rows)
    if _all_distinct(key):  # each flow once (the usual window): nothing to merge
        return WindowSummary(window_ns, n_bins, rows, bin_rows, bin_sent, bin_lost)
    uniq, inv = np.unique(key, return_inverse=True)
    n = uniq.size
    out = np.zeros(n, SUMMARY_DTYPE)
    first = np.full(n, rows.size)
    np.minimum.at(first, inv, np.arange(rows.size))
    out["window"], out["flow"] = rows["window"][first], rows["flow"][first]
    for name in ("sent", "answered", "received"):
        out[name] = np.bincount(inv, weights=rows[name], minlength=n).astype(np.uint32)
    w = rows["answered"].astype(np.float64)
    total = np.maximum(np.bincount(inv, weights=w, minlength=n), 1.0)
    for name in ("fwd", "rev", "t1", "t4"):
        out[name] = np.rint(np.bincount(inv, weights=w * rows[name], minlength=n) / total)
    _tightest(out, rows, inv, w > 0)
    sent = np.zeros((n, n_bins), np.int64)
    lost = np.zeros((n, n_bins), np.int64)
    np.add.at(sent, inv[bin_rows], bin_sent)
    np.add.at(lost, inv[bin_rows], bin_lost)
    # rows of a part without bins (all answered there) still sent probes: spread evenly
    plain = np.ones(rows.size, bool)
    plain[bin_rows] = False
    with_bins = np.zeros(n, bool)
    with_bins[inv[bin_rows]] = True
    extra = plain & with_bins[inv]
    np.add.at(sent, inv[extra], _even(rows["sent"][extra], n_bins))
    rows_b = np.flatnonzero(with_bins)
    return WindowSummary(window_ns, n_bins, out, rows_b, sent[rows_b], lost[rows_b])


def row_keys(rows: np.ndarray) -> np.ndarray:
    """A row's (window, flow) as one int64 (a flow id is 32 bits)."""
    return rows["window"].astype(np.int64) * (1 << 32) + rows["flow"].astype(np.int64)


def _dense_span(key: np.ndarray) -> int | None:
    """The keys' span where a table over it is no dearer than sorting them (a window's keys
    are one window's flow ids: a plan's table rows), else None."""
    if not key.size:
        return None
    span = int(key.max()) - int(key.min()) + 1
    return span if span <= 4 * key.size + (1 << 20) else None


def _all_distinct(key: np.ndarray) -> bool:
    """No key twice: counted over its span where that is small (2 ms for 306,000 rows, where
    np.unique sorted them in 11), else sorted."""
    if _dense_span(key) is not None:
        return int(np.bincount(key - key.min()).max()) <= 1
    return np.unique(key).size == key.size


def sum_by_key(keys: np.ndarray, weights: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of `wanted`, the sum of `weights` whose key equals it (0 where none does)."""
    if not keys.size or not wanted.size:
        return np.zeros(wanted.size)
    span = _dense_span(keys)
    if span is not None:
        lo = int(keys.min())
        table = np.bincount(keys - lo, weights=weights, minlength=span)
        at = wanted - lo
        inside = (at >= 0) & (at < span)
        return np.where(inside, table[np.clip(at, 0, span - 1)], 0.0)
    uniq, inv = np.unique(keys, return_inverse=True)
    total = np.bincount(inv, weights=weights, minlength=uniq.size)
    pos = np.clip(np.searchsorted(uniq, wanted), 0, uniq.size - 1)
    return np.where(uniq[pos] == wanted, total[pos], 0.0)


def _fit_bins(a: np.ndarray, n_bins: int) -> np.ndarray:
    if a.shape[1] == n_bins:
        return a
    out = np.zeros((a.shape[0], n_bins), np.int64)
    k = min(n_bins, a.shape[1])
    out[:, :k] = a[:, :k]
    return out


def _even(n: np.ndarray, n_bins: int) -> np.ndarray:
    """n probes spread evenly over the bins (integer counts summing to n)."""
    base = (n[:, None] // n_bins).astype(np.int64) * np.ones(n_bins, np.int64)
    rest = (n % n_bins).astype(np.int64)
    return base + (np.arange(n_bins)[None, :] < rest[:, None])


def _tightest(out: np.ndarray, rows: np.ndarray, inv: np.ndarray, ok: np.ndarray) -> None:
    """Per merged row: the smallest forward bound and the largest back bound of its parts."""
    for t_name, v_name, sign in (("bound_t1", "bound_fwd", 1), ("bound_t4", "bound_rev", -1)):
        idx = np.flatnonzero(ok)
        order = idx[np.lexsort((sign * rows[v_name][idx], inv[idx]))]
        head = np.r_[True, inv[order][1:] != inv[order][:-1]] if order.size else \
            np.zeros(0, bool)
        best = order[head]
        out[t_name][inv[best]] = rows[t_name][best]
        out[v_name][inv[best]] = rows[v_name][best]


def from_probes(probes: np.ndarray, window_ns: int, n_bins: int = 10) -> WindowSummary:
    """The summaries agents would send for these probe records (model.fabric.PROBE_DTYPE): per
    window of `window_ns` (by send time) and flow."""
    n_bins = max(1, min(MAX_BINS, int(n_bins)))
    if probes.size == 0:
        return WindowSummary.empty(window_ns, n_bins)
    t1 = probes["t_send"].astype(np.int64)
    win = t1 // window_ns
    key = win * (1 << 32) + probes["flow"].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    n = uniq.size
    lost = probes["lost"]
    ans = lost == 0
    out = np.zeros(n, SUMMARY_DTYPE)
    out["window"], out["flow"] = uniq >> 32, uniq & 0xFFFFFFFF
    out["sent"] = np.bincount(inv, minlength=n)
    out["answered"] = np.bincount(inv, weights=ans, minlength=n)
    out["received"] = np.bincount(inv, weights=(lost == 0) | (lost == 2), minlength=n)
    loop = probes["dst_nic"] < 0
    t2, t3, t4 = (probes[k].astype(np.int64) for k in ("t_remote_rx", "t_remote_tx", "t_recv"))
    fwd = np.where(loop, t4 - t1, t2 - t1).astype(np.float64)
    rev = np.where(loop, 0, t4 - t3).astype(np.float64)
    for name, v in (("fwd", fwd), ("rev", rev)):
        q = group_quantiles(inv[ans], v[ans], [0.5], n, linear=True)[0]
        out[name] = np.where(np.isfinite(q), np.floor(q), 0)
    cnt = np.maximum(out["answered"].astype(np.float64), 1)
    for name, v in (("t1", t1), ("t4", t4)):
        out[name] = np.bincount(inv[ans], weights=v[ans].astype(np.float64), minlength=n) // cnt
    pair_ans = ans & ~loop
    rows_tmp = np.zeros(probes.size, SUMMARY_DTYPE)
    rows_tmp["bound_t1"], rows_tmp["bound_fwd"] = t1, t2 - t1
    rows_tmp["bound_t4"], rows_tmp["bound_rev"] = t4, t3 - t4
    _tightest(out, rows_tmp, inv, pair_ans)
    bad = out["answered"] < out["sent"]
    bin_rows = np.flatnonzero(bad)
    pos = np.full(n, -1)
    pos[bin_rows] = np.arange(bin_rows.size)
    p = pos[inv]
    sel = p >= 0
    b = np.clip((t1[sel] - win[sel] * window_ns) // max(1, window_ns // n_bins), 0, n_bins - 1)
    sent = np.zeros((bin_rows.size, n_bins), np.int64)
    nlost = np.zeros((bin_rows.size, n_bins), np.int64)
    np.add.at(sent, (p[sel], b), 1)
    np.add.at(nlost, (p[sel], b), ~ans[sel])
    return WindowSummary(window_ns, n_bins, out, bin_rows, sent, nlost)


@dataclass
class PathFigures:
    sent: np.ndarray  # (P,) probes per path (forward rows, then what reached the far end back)
    lost: np.ndarray  # (P,)
    p50_us: np.ndarray  # (P,) median over the path's flows of their median delay; NaN: none
    p99_us: np.ndarray  # (P,) the largest of them (a flow median, not a probe's p99)


def flow_rows(s: WindowSummary, flows: np.ndarray) -> np.ndarray:
    """Row of each summary's flow in the flow table: the index the summary carries (set by
    `index_flows`, once per window), else looked up."""
    if s.flow_index is not None:
        return s.flow_index
    return FlowIndex(flows["flow"]).rows(s.rows["flow"])


def index_flows(s: WindowSummary, index: FlowIndex) -> WindowSummary:
    """The summary with its rows' flow-table rows found once, carried by `select` (a window's
    steps looked them up five times, sorting the flow table each time)."""
    s.flow_index = index.rows(s.rows["flow"])
    return s


@dataclass
class PathSlots:
    """Per plan, for `path_figures`: each flow's forward delay (slot f) and return delay (slot
    F + f) as members of their paths, and the flows' paths as plain arrays (a gather from
    them, not from the flow table's records: 6 -> 1 ms a window at 1,280 x 8)."""
    groups: FixedGroups
    fwd_path: np.ndarray  # (F,) int64
    rev_path: np.ndarray


def path_slots(flows: np.ndarray, n_paths: int) -> PathSlots:
    fwd, rev = flows["fwd_path"].astype(np.int64), flows["rev_path"].astype(np.int64)
    return PathSlots(FixedGroups(np.concatenate([fwd, rev]), n_paths), fwd, rev)


def path_figures(s: WindowSummary, flows: np.ndarray, n_paths: int, nic_host: np.ndarray,
                 clock: ClockModel | None = None, epoch_ns: int = 0,
                 loss_known: np.ndarray | None = None,
                 slots: PathSlots | None = None) -> PathFigures:
    """Per path: probes, lost and delay (one-way with a clock model, else half the round trip
    less the turnaround), from NIC-pair rows (loops: `loop_figures`). Rows where `loss_known` is
    False (their responder's answer count not in) give delays only: their unanswered probes
    cannot be split into lost out and lost back. `slots` (`path_slots`, once per plan) gives
    the delay quantiles without sorting the window's rows, where each flow has one row."""
    r = s.rows
    fi = flow_rows(s, flows)
    if slots is not None:
        fwd_path, rev_path = slots.fwd_path[fi], slots.rev_path[fi]
    else:
        fwd_path = flows["fwd_path"][fi].astype(np.int64)
        rev_path = flows["rev_path"][fi].astype(np.int64)
    sent = r["sent"].astype(np.int64)
    ans = np.minimum(r["answered"].astype(np.int64), sent)
    # an answer proves the probe arrived: a responder count short of the answers is a count that
    # has not arrived yet (its batch late under load), never a loss on the way out
    recv = np.clip(r["received"].astype(np.int64), ans, sent)
    d_fwd, d_rev = _delays_us(r, flows, fi, nic_host, clock, epoch_ns)
    f_ok, b_ok = fwd_path >= 0, (rev_path >= 0) & (recv > 0)
    delay = np.concatenate([np.where(ans > 0, d_fwd, np.nan)[f_ok],
                            np.where(ans > 0, d_rev, np.nan)[b_ok]])
    if loss_known is not None:
        sent, recv, ans = (np.where(loss_known, x, 0) for x in (sent, recv, ans))
    keys = np.concatenate([fwd_path[f_ok], rev_path[b_ok]])
    n_sent = np.concatenate([sent[f_ok], recv[b_ok]])
    n_lost = np.concatenate([(sent - recv)[f_ok], (recv - ans)[b_ok]])
    out_sent = np.bincount(keys, weights=n_sent, minlength=n_paths).astype(np.int64)
    out_lost = np.bincount(keys, weights=n_lost, minlength=n_paths).astype(np.int64)
    if slots is not None and r.size and r["window"].min() == r["window"].max():
        # one row a flow (a summary has one per window and flow): each delay into its slot
        n_f = len(flows)
        values = np.full(2 * n_f, np.nan)
        values[fi[f_ok]] = delay[:int(f_ok.sum())]
        values[n_f + fi[b_ok]] = delay[int(f_ok.sum()):]
        q = slots.groups.quantiles(values, [0.5, 1.0], linear=True)
        return PathFigures(out_sent, out_lost, q[0], q[1])
    ok = np.isfinite(delay)
    # to the nanosecond (the timestamps' unit), sorted as one packed key: a third of the time
    q = group_quantiles(keys[ok], delay[ok], [0.5, 1.0], n_paths, linear=True,
                        resolution=US_RESOLUTION)
    return PathFigures(out_sent, out_lost, q[0], q[1])


def _delays_us(r: np.ndarray, flows: np.ndarray, fi: np.ndarray, nic_host: np.ndarray,
               clock: ClockModel | None, epoch_ns: int) -> tuple[np.ndarray, np.ndarray]:
    fwd, rev = r["fwd"].astype(np.float64) * 1e-9, r["rev"].astype(np.float64) * 1e-9
    if clock is None:
        half = (fwd + rev) / 2 * 1e6
        return half, half
    a = nic_host[np.maximum(flows["src_nic"][fi], 0)]
    b = nic_host[np.maximum(flows["dst_nic"][fi], 0)]
    t1 = (r["t1"] - epoch_ns).astype(np.float64) * 1e-9
    t4 = (r["t4"] - epoch_ns).astype(np.float64) * 1e-9
    return (fwd - clock.theta(a, b, t1)) * 1e6, (rev + clock.theta(a, b, t4)) * 1e6


def loop_figures(s: WindowSummary, flows: np.ndarray, n_paths: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Loop rows per path: (paths, sent, lost, round-trip median in us)."""
    r = s.rows
    fi = flow_rows(s, flows)
    path = flows["fwd_path"][fi].astype(np.int64)
    sent = np.bincount(path, weights=r["sent"], minlength=n_paths)
    lost = np.bincount(path, weights=r["sent"].astype(np.int64) - r["answered"], minlength=n_paths)
    ok = r["answered"] > 0
    q = group_quantiles(path[ok], r["fwd"][ok] * 1e-3, [0.5, 1.0], n_paths, linear=True,
                        resolution=US_RESOLUTION)
    return np.unique(path), sent.astype(np.int64), lost.astype(np.int64), q


def clock_records(s: WindowSummary, flows: np.ndarray) -> np.ndarray:
    """The rows' tightest bounds as probe records (PROBE_DTYPE) for the clock fit, which keeps
    only the tightest bound per time bin of each direction anyway."""
    r = s.rows
    fi = flow_rows(s, flows)
    dst = flows["dst_nic"][fi]
    ok = np.flatnonzero((r["answered"] > 0) & (dst >= 0))
    # the fields it needs, row by row: not a copy of every summary field first (306,000 rows a
    # window at 1,280 x 8)
    fi = fi[ok]
    t1, t4 = r["bound_t1"][ok], r["bound_t4"][ok]
    out = np.zeros(ok.size, PROBE_DTYPE)
    out["flow"], out["src_nic"], out["dst_nic"] = r["flow"][ok], flows["src_nic"][fi], dst[ok]
    out["t_send"] = t1
    out["t_remote_rx"] = t1 + r["bound_fwd"][ok]
    out["t_recv"] = t4
    out["t_remote_tx"] = t4 + r["bound_rev"][ok]
    return out
