"""Synthetic probe outcomes with known faults, for unit tests and benchmarks.

Per path and window it draws what a probe run would measure: the number of lost probes (binomial,
with a background of rare single drops) and the window's delay statistic (base delay of the
path's hops plus Gaussian jitter, and rare queuing spikes). Faults act on every path whose true
path crosses the element: a host fault acts on all its NICs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetctl.analysis.signals import WindowStats
from fleetctl.errors import UsageError
from fleetctl.mesh.topology import PathTable, Topology


@dataclass(frozen=True)
class Fault:
    element: str  # label: `leaf1->spine2`, `spine1`, `node3:eth1`, `node3`
    metric: str  # loss | delay | down
    value: float = 0.0  # loss rate (0..1) or added delay in microseconds


def fault_columns(topo: Topology, fault: Fault) -> list[int]:
    el = topo.elements[topo.find(fault.element)]
    if el.type == "host":
        return [topo.index("nic", n) for n, h in zip(topo.nics, topo.nic_host) if h == el.id]
    return [topo.find(fault.element)]


def simulate(topo: Topology, paths: PathTable, faults: list[Fault] = (), windows: int = 3,
             probes: int = 100, jitter_us: float = 3.0, background_loss: float = 1e-4,
             spike_rate: float = 1e-3, seed: int = 0) -> WindowStats:
    """Window stats for traced `paths` with the given faults active in every window."""
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
    sent = np.full(shape, probes, dtype=np.int64)
    lost = rng.binomial(probes, 1.0 - keep * (1.0 - background_loss), size=shape)
    delay = base + extra + rng.normal(0.0, jitter_us, size=shape)
    spikes = rng.random(shape) < spike_rate
    delay[spikes] += rng.exponential(50.0, size=int(spikes.sum()))
    delay[lost == sent] = np.nan
    return WindowStats(sent=sent, lost=lost, delay=delay)
