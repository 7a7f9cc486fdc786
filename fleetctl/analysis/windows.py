"""From raw probe records to per-window figures: per path (for triangulation) and per NIC pair.

Each probe measures two paths: its flow's forward path (NIC A -> NIC B) and the echo's reverse path
(B -> A). A probe lost on the way out (lost=1) counts against the forward path only; one lost on the
way back (lost=2) was delivered forward and counts against the reverse path; a loss of unknown
direction (lost=3) counts against both, and the clean flows crossing each path sort it out.
Delays are one-way when a clock model is given, else half the round trip less the echo's
turnaround. Records use int64 nanoseconds of each host's clock (model.fabric.PROBE_DTYPE).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetctl.analysis.clock import ClockModel, synchronize
from fleetctl.errors import DataError
from fleetctl.model.fabric import NOT_RECORDED, group_quantiles


US_RESOLUTION = 1e-3  # delays in microseconds, their quantiles to the nanosecond (timestamps' unit)


@dataclass
class Windows:
    window_s: float
    start_ns: np.ndarray  # (W,)
    path_sent: np.ndarray  # (W, P)
    path_lost: np.ndarray
    path_p50_us: np.ndarray
    path_p99_us: np.ndarray
    one_way: bool
    # NIC pairs probed (forward direction, row = source), only when asked (build_windows(pairs=
    # True): a run file's /windows): (K,) each, and (W, K) figures, NaN where a pair had no probe
    # that window. Sparse: a plan probes O(NICs) pairs, never N x N (at 10,000 NICs a dense
    # matrix is 400 MB per window and figure).
    pair_src: np.ndarray | None = None
    pair_dst: np.ndarray | None = None
    pair_sent: np.ndarray | None = None
    pair_loss: np.ndarray | None = None
    pair_p50_us: np.ndarray | None = None
    pair_p99_us: np.ndarray | None = None

    def matrix(self, name: str, n_nics: int, max_nics: int = 4096) -> np.ndarray:
        """One pair figure (`loss`, `p50_us`, `p99_us`) as a dense (W, N, N) array, NaN where not
        probed: for small fabrics and people; refused above `max_nics` NICs."""
        if self.pair_src is None:
            raise DataError("these windows were built without their NIC-pair figures")
        if n_nics > max_nics:
            raise DataError(f"a dense NIC x NIC matrix of {n_nics} NICs is too large "
                            f"(at most {max_nics}); use the pair lists")
        values = getattr(self, f"pair_{name}")
        out = np.full((values.shape[0], n_nics, n_nics), np.nan, dtype=np.float32)
        out[:, self.pair_src, self.pair_dst] = values
        return out


def seconds(ns: np.ndarray, epoch_ns: int) -> np.ndarray:
    """int64 ns timestamps to float seconds since the run epoch; NaN where not recorded (0)."""
    out = (ns - epoch_ns).astype(np.float64)  # the difference in integers: no rounding of ns
    out *= 1e-9  # in place: 5 M records a column at 1,280 x 8
    out[ns == NOT_RECORDED] = np.nan
    return out


def host_clock(probes: np.ndarray, nic_host: np.ndarray, hosts: list[str],
               epoch_ns: int = 0) -> ClockModel:
    """Clock offsets and drifts of every host from the run's own probes."""
    t = [seconds(probes[k], epoch_ns) for k in ("t_send", "t_remote_rx", "t_remote_tx", "t_recv")]
    return synchronize(hosts, nic_host[probes["src_nic"]], nic_host[probes["dst_nic"]], *t)


def build_windows(probes: np.ndarray, flows: np.ndarray, n_paths: int, n_nics: int,
                  nic_host: np.ndarray, window_s: float, epoch_ns: int = 0,
                  clock: ClockModel | None = None) -> Windows:
    """Per window and path: probes, lost, delay p50/p99 (add_pair_figures adds the same per NIC
    pair probed). Memory and time grow with probes + windows x paths, never with NICs squared."""
    if window_s <= 0:
        raise DataError(f"window length must be positive, not {window_s}")
    if probes.size == 0:
        raise DataError("no probe records to analyse")
    if probes["src_nic"].min() < 0 or max(probes["src_nic"].max(), probes["dst_nic"].max()) >= n_nics:
        raise DataError(f"a probe names a NIC outside the {n_nics} NICs of the topology")
    fi = _flow_rows(probes["flow"], flows["flow"])
    fwd_path, rev_path = flows["fwd_path"][fi], flows["rev_path"][fi]
    rel = (probes["t_send"] - epoch_ns).astype(np.float64) * 1e-9
    start = float(rel.min())  # windows start with the first probe
    w = ((rel - start) // window_s).astype(np.int64)
    n_w = int(w.max()) + 1
    lost = probes["lost"]
    d_fwd, d_rev = _delays_us(probes, nic_host, epoch_ns, clock)

    # per path: forward rows, then reverse rows (only probes that reached the far end, or lost=3)
    fwd_known, rev_known = fwd_path >= 0, (rev_path >= 0) & (lost != 1)
    p_key = np.concatenate([w[fwd_known] * n_paths + fwd_path[fwd_known],
                            w[rev_known] * n_paths + rev_path[rev_known]])
    p_lost = np.concatenate([np.isin(lost[fwd_known], (1, 3)), np.isin(lost[rev_known], (2, 3))])
    p_delay = np.concatenate([d_fwd[fwd_known], d_rev[rev_known]])
    size = n_w * n_paths
    sent = np.bincount(p_key, minlength=size).reshape(n_w, n_paths)
    nlost = np.bincount(p_key, weights=p_lost, minlength=size).reshape(n_w, n_paths)
    pq = group_quantiles(p_key, p_delay, [0.5, 0.99], size, resolution=US_RESOLUTION
                         ).reshape(2, n_w, n_paths)
    out = Windows(window_s, (epoch_ns + (start + np.arange(n_w) * window_s) * 1e9).astype(np.int64),
                  sent, nlost.astype(np.int64), pq[0], pq[1], clock is not None)
    return out


def _delays_us(probes: np.ndarray, nic_host: np.ndarray, epoch_ns: int,
               clock: ClockModel | None) -> tuple[np.ndarray, np.ndarray]:
    """Per probe: forward and reverse delay in us (one-way with a clock model, else half the round
    trip less the turnaround), NaN where that direction was not delivered."""
    lost = probes["lost"]
    t1, t2, t3, t4 = (seconds(probes[k], epoch_ns)
                      for k in ("t_send", "t_remote_rx", "t_remote_tx", "t_recv"))
    fwd_ok, rev_ok = lost == 0, lost == 0
    if clock is not None:
        a, b = nic_host[probes["src_nic"]], nic_host[probes["dst_nic"]]
        d_fwd, d_rev = clock.one_way_delays(a, b, t1, t2, t3, t4)
        fwd_ok = (lost == 0) | (lost == 2)
    else:
        d_fwd = d_rev = ((t4 - t1) - (t3 - t2)) / 2
    return np.where(fwd_ok, d_fwd * 1e6, np.nan), np.where(rev_ok, d_rev * 1e6, np.nan)


def add_pair_figures(w: Windows, probes: np.ndarray, n_nics: int, nic_host: np.ndarray,
                     epoch_ns: int = 0, clock: ClockModel | None = None) -> None:
    """The per-NIC-pair figures of windows built without them (what a run file stores), from
    NIC-to-NIC probe records, in the windows' own time slots."""
    n_w = len(w.start_ns)
    if probes.size == 0 or n_w == 0:
        empty = np.zeros(0, dtype=np.int32)
        w.pair_src, w.pair_dst = empty, empty
        w.pair_sent = np.zeros((n_w, 0), dtype=np.int32)
        w.pair_loss = w.pair_p50_us = w.pair_p99_us = np.zeros((n_w, 0), dtype=np.float32)
        return
    slot = np.clip((probes["t_send"] - int(w.start_ns[0])) // int(round(w.window_s * 1e9)), 0,
                   n_w - 1).astype(np.int64)
    d_fwd, _ = _delays_us(probes, nic_host, epoch_ns, clock)
    _pair_figures(w, probes, slot, n_w, n_nics, d_fwd)


class FlowIndex:
    """Rows of flow ids in a flow table: sorted once (per plan), one searchsorted per call (a
    dict lookup per probe took most of a 10-million-probe run's window step)."""

    def __init__(self, flow_ids: np.ndarray):
        self.order = np.argsort(flow_ids, kind="stable")
        self.ids = flow_ids[self.order]
        # a plan's flow ids are its table's rows (mesh/discovery.py), loops after them: then a
        # flow's row is its id less the first, no search (8 -> 1 ms a window at 1,280 x 8)
        ids = np.asarray(flow_ids)
        self.first = int(ids[0]) if len(ids) and \
            bool((np.diff(ids.astype(np.int64)) == 1).all()) else None

    def rows(self, probe_flows: np.ndarray) -> np.ndarray:
        rows, known = self.rows_known(probe_flows)
        if not known.all():
            raise DataError(f"probe names flow {int(probe_flows[np.argmin(known)])} that the flow "
                            f"table lacks")
        return rows

    def rows_known(self, probe_flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, known): each flow's row, and whether the table has it (rows of unknown ones
        are 0)."""
        ids = self.ids
        if not len(ids):
            return np.zeros(len(probe_flows), dtype=np.int64), np.zeros(len(probe_flows), bool)
        if self.first is not None:
            rows = np.asarray(probe_flows).astype(np.int64) - self.first
            known = (rows >= 0) & (rows < len(ids))
            return np.where(known, rows, 0), known
        pos = np.minimum(np.searchsorted(ids, probe_flows), len(ids) - 1)
        known = ids[pos] == probe_flows
        return np.where(known, self.order[pos], 0).astype(np.int64), known


def _flow_rows(probe_flows: np.ndarray, flow_ids: np.ndarray) -> np.ndarray:
    """Row of each probe's flow in the flow table."""
    return FlowIndex(flow_ids).rows(probe_flows)


def _pair_figures(out: Windows, probes: np.ndarray, w: np.ndarray, n_w: int, n_nics: int,
                  d_fwd: np.ndarray) -> None:
    """Per probed NIC pair (forward direction, any loss): probes, lost share, delay p50/p99."""
    sel = probes["dst_nic"] >= 0  # a loop probe (to a switch) has no pair
    pair_id = probes["src_nic"][sel].astype(np.int64) * n_nics + probes["dst_nic"][sel]
    uniq, k = np.unique(pair_id, return_inverse=True)
    n_k = len(uniq)
    key = w[sel] * n_k + k.reshape(-1)
    size = n_w * n_k
    m_sent = np.bincount(key, minlength=size)
    m_lost = np.bincount(key, weights=(probes["lost"][sel] != 0), minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.where(m_sent > 0, m_lost / np.maximum(m_sent, 1), np.nan)
    q = group_quantiles(key, d_fwd[sel], [0.5, 0.99], size, resolution=US_RESOLUTION
                        ).reshape(2, n_w, n_k)
    out.pair_src, out.pair_dst = (uniq // n_nics).astype(np.int32), (uniq % n_nics).astype(np.int32)
    out.pair_sent = m_sent.reshape(n_w, n_k).astype(np.int32)
    out.pair_loss = loss.reshape(n_w, n_k).astype(np.float32)
    out.pair_p50_us, out.pair_p99_us = q[0].astype(np.float32), q[1].astype(np.float32)
