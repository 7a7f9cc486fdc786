"""Synthetic probe outcomes with known faults, for unit tests and benchmarks.

Per path and window it draws what a probe run would measure: the number of lost probes (binomial,
with a background of rare single drops) and the window's delay statistic (base delay of the
path's hops plus Gaussian jitter, and rare queuing spikes). Faults act on every path whose true
path crosses the element: a host fault acts on all its NICs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetctl.errors import UsageError
from fleetctl.model.fabric import PathTable, Topology, WindowStats
from tests.support.fabrics import find


@dataclass(frozen=True)
class Fault:
    element: str  # label: `leaf1->spine2`, `spine1`, `node3:eth1`, `node3`
    metric: str  # loss | delay | down
    value: float = 0.0  # loss rate (0..1) or added delay in microseconds


def fault_columns(topo: Topology, fault: Fault) -> list[int]:
    el = topo.elements[find(topo, fault.element)]
    if el.type == "host":
        return [topo.index("nic", n) for n, h in zip(topo.nics, topo.nic_host) if h == el.id]
    return [find(topo, fault.element)]


def simulate(topo: Topology, paths: PathTable, faults: list[Fault] = (), windows: int = 3,
             probes=100, jitter_us: float = 3.0, background_loss: float = 1e-4,
             spike_rate: float = 1e-3, seed: int = 0) -> WindowStats:
    """Window stats for traced `paths` with the given faults active in every window. `probes`:
    per path and window, one number or one per path (unequal rates)."""
    rng = np.random.default_rng(seed)
    inc = paths.matrix(topo.n_elements).tocsc()
    n = len(paths)
    # fixed per-element latency (cable lengths, switch pipelines) plus 5 us of host stack
    per_elem = rng.uniform(0.5, 2.0, topo.n_elements)
    base = 5.0 + inc @ per_elem
    keep = np.ones(n)
    extra = np.zeros(n)
    for f in faults:
        if f.metric not in ("loss", "delay", "down"):
            raise UsageError(f"unknown fault metric {f.metric!r}")
        hit = np.zeros(n, dtype=bool)
        for c in fault_columns(topo, f):
            col = inc.getcol(c)
            hit[col.indices[col.data > 0]] = True
        if f.metric == "down":
            keep[hit] = 0.0
        elif f.metric == "loss":
            keep[hit] *= 1.0 - f.value
        else:
            extra[hit] += f.value
    shape = (windows, n)
    sent = np.broadcast_to(np.asarray(probes, dtype=np.int64), shape).copy()  # per path if given
    lost = rng.binomial(sent, 1.0 - keep * (1.0 - background_loss))
    delay = base + extra + rng.normal(0.0, jitter_us, size=shape)
    spikes = rng.random(shape) < spike_rate
    delay[spikes] += rng.exponential(50.0, size=int(spikes.sum()))
    delay[lost == sent] = np.nan
    return WindowStats(sent=sent, lost=lost, delay=delay)


@dataclass
class ClockProbes:
    """Synthetic probe timestamps (s, each host's own clock) with the injected truth."""

    hosts: list[str]
    offset: np.ndarray  # true clock offset per host at t = 0, s
    drift: np.ndarray  # true drift per host, s/s
    src: np.ndarray
    dst: np.ndarray
    t1: np.ndarray
    t2: np.ndarray
    t3: np.ndarray
    t4: np.ndarray

    def true_theta(self, a, b, t):
        return (self.offset[b] - self.offset[a]) + (self.drift[b] - self.drift[a]) * t


def clock_probes(hosts: int = 16, peers: int = 4, duration: float = 10.0, rate: float = 50.0,
                 max_offset: float = 5e-3, max_drift_ppm: float = 50.0, min_delay: float = 8e-6,
                 asymmetry: float = 3e-7, queuing: float = 20e-6, stamp_jitter: float = 2e-7,
                 loss: float = 1e-3, seed: int = 0) -> ClockProbes:
    """Each host probes `peers` others (a connected circulant) at `rate` Hz for `duration` seconds.

    One-way delay = min_delay + a fixed per-direction asymmetry (Gaussian, sd `asymmetry`) +
    exponential queuing (mean `queuing`, software timestamps see wake-up latency); every
    timestamp gets Gaussian read jitter. Clocks: clock_h(T) = T + offset_h + drift_h T."""
    rng = np.random.default_rng(seed)
    names = [f"node{i + 1}" for i in range(hosts)]
    offset = rng.uniform(-max_offset, max_offset, hosts)
    drift = rng.uniform(-max_drift_ppm, max_drift_ppm, hosts) * 1e-6
    per_pair = int(duration * rate)
    src, dst = [], []
    for h in range(hosts):
        for k in range(1, peers + 1):
            src.append(np.full(per_pair, h))
            # offset 1 first: the ring keeps the probe graph connected
            dst.append(np.full(per_pair, (h + 1 + (k - 1) * max(1, hosts // peers)) % hosts))
    src, dst = np.concatenate(src), np.concatenate(dst)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    n = len(src)
    pair_asym = {}
    fwd_bias = np.empty(n)
    rev_bias = np.empty(n)
    for i, (a, b) in enumerate(zip(src, dst)):
        if (a, b) not in pair_asym:
            pair_asym[(a, b)] = rng.normal(0.0, asymmetry, 2)
        fwd_bias[i], rev_bias[i] = pair_asym[(a, b)]
    send = rng.uniform(0.0, duration, n)
    d_f = min_delay + np.abs(fwd_bias) + rng.exponential(queuing, n)
    turn = rng.uniform(5e-6, 50e-6, n)
    d_r = min_delay + np.abs(rev_bias) + rng.exponential(queuing, n)

    def clock(h, t):
        return t + offset[h] + drift[h] * t + rng.normal(0.0, stamp_jitter, len(t))

    t1 = clock(src, send)
    t2 = clock(dst, send + d_f)
    t3 = clock(dst, send + d_f + turn)
    t4 = clock(src, send + d_f + turn + d_r)
    lost = rng.random(n) < loss
    for t in (t2, t3, t4):
        t[lost] = np.nan
    return ClockProbes(names, offset, drift, src, dst, t1, t2, t3, t4)
