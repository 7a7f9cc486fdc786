"""From raw probe records to per-window figures: per path (for triangulation) and NIC x NIC.

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


@dataclass
class Windows:
    window_s: float
    start_ns: np.ndarray  # (W,)
    path_sent: np.ndarray  # (W, P)
    path_lost: np.ndarray
    path_p50_us: np.ndarray
    path_p99_us: np.ndarray
    delay_p50_us: np.ndarray  # (W, N, N) forward one-way (or half RTT), NaN where not probed
    delay_p99_us: np.ndarray
    loss: np.ndarray  # (W, N, N) lost / sent, NaN where not probed
    one_way: bool


def seconds(ns: np.ndarray, epoch_ns: int) -> np.ndarray:
    """int64 ns timestamps to float seconds since the run epoch; NaN where not recorded (0)."""
    out = (ns - epoch_ns).astype(np.float64) * 1e-9
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
    if window_s <= 0:
        raise DataError(f"window length must be positive, not {window_s}")
    if probes.size == 0:
        raise DataError("no probe records to analyse")
    flow_pos = {int(f): i for i, f in enumerate(flows["flow"])}
    try:
        fi = np.array([flow_pos[int(f)] for f in probes["flow"]], dtype=np.int64)
    except KeyError as exc:
        raise DataError(f"probe names flow {exc.args[0]} that the flow table lacks") from None
    fwd_path, rev_path = flows["fwd_path"][fi], flows["rev_path"][fi]
    rel = (probes["t_send"] - epoch_ns).astype(np.float64) * 1e-9
    start = float(rel.min())  # windows start with the first probe
    w = ((rel - start) // window_s).astype(np.int64)
    n_w = int(w.max()) + 1
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
    d_fwd = np.where(fwd_ok, d_fwd * 1e6, np.nan)
    d_rev = np.where(rev_ok, d_rev * 1e6, np.nan)

    # per path: forward rows, then reverse rows (only probes that reached the far end, or lost=3)
    fwd_known, rev_known = fwd_path >= 0, (rev_path >= 0) & (lost != 1)
    p_key = np.concatenate([w[fwd_known] * n_paths + fwd_path[fwd_known],
                            w[rev_known] * n_paths + rev_path[rev_known]])
    p_lost = np.concatenate([np.isin(lost[fwd_known], (1, 3)), np.isin(lost[rev_known], (2, 3))])
    p_delay = np.concatenate([d_fwd[fwd_known], d_rev[rev_known]])
    size = n_w * n_paths
    sent = np.bincount(p_key, minlength=size).reshape(n_w, n_paths)
    nlost = np.bincount(p_key, weights=p_lost, minlength=size).reshape(n_w, n_paths)
    pq = group_quantiles(p_key, p_delay, [0.5, 0.99], size).reshape(2, n_w, n_paths)

    # NIC x NIC (forward direction, any loss)
    m_key = (w * n_nics + probes["src_nic"]) * n_nics + probes["dst_nic"]
    msize = n_w * n_nics * n_nics
    m_sent = np.bincount(m_key, minlength=msize)
    m_lost = np.bincount(m_key, weights=(lost != 0), minlength=msize)
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.where(m_sent > 0, m_lost / np.maximum(m_sent, 1), np.nan)
    mq = group_quantiles(m_key, d_fwd, [0.5, 0.99], msize).reshape(2, n_w, n_nics, n_nics)
    return Windows(window_s, (epoch_ns + (start + np.arange(n_w) * window_s) * 1e9).astype(
        np.int64), sent, nlost.astype(np.int64), pq[0], pq[1], mq[0], mq[1],
        loss.reshape(n_w, n_nics, n_nics), clock is not None)
