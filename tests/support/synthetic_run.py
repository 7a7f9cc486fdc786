"""A whole synthetic probe run: flows, traced paths and raw probe records with skewed clocks.

What a probe agent run on a faulty fabric would record, for end-to-end tests of the pipeline
records -> clock sync -> windows -> triangulation -> HDF5 store, without a lab.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE, PathTable, Topology
from tests.support.fabrics import ecmp_path
from tests.support.synthetic import Fault, fault_columns

EPOCH_NS = 1_800_000_000_000_000_000  # an arbitrary wall-clock start, far from 0


@dataclass
class SyntheticRun:
    flows: np.ndarray  # FLOW_DTYPE
    paths: PathTable
    probes: np.ndarray  # PROBE_DTYPE
    hosts: list[str]
    nic_host: np.ndarray  # host index per NIC
    offset: np.ndarray  # true clock offset per host, s
    drift: np.ndarray  # true drift per host
    epoch_ns: int = EPOCH_NS


def synthetic_run(topo: Topology, pairs: list[tuple[str, str]], faults: list[Fault] = (),
                  sports: int = 8, rate_hz: float = 20.0, duration: float = 6.0,
                  jitter_us: float = 5.0, max_offset: float = 2e-3, max_drift_ppm: float = 30.0,
                  seed: int = 0) -> SyntheticRun:
    rng = np.random.default_rng(seed)
    hosts = list(dict.fromkeys(topo.nic_host))
    hpos = {h: i for i, h in enumerate(hosts)}
    nic_host = np.array([hpos[h] for h in topo.nic_host])
    offset = rng.uniform(-max_offset, max_offset, len(hosts))
    drift = rng.uniform(-max_drift_ppm, max_drift_ppm, len(hosts)) * 1e-6
    per_elem = rng.uniform(0.5, 2.0, topo.n_elements) * 1e-6
    keep = np.ones(topo.n_elements)
    extra = np.zeros(topo.n_elements)
    for f in faults:
        for c in fault_columns(topo, f):
            if f.metric == "down":
                keep[c] = 0.0
            elif f.metric == "loss":
                keep[c] *= 1.0 - f.value
            else:
                extra[c] += f.value * 1e-6

    flow_rows, path_rows, psrc, pdst, records = [], [], [], [], []
    n_probe = max(1, int(rate_hz * duration))
    for s, d in pairs:
        for sport in range(sports):
            fid = len(flow_rows)
            fwd = np.array(ecmp_path(topo, s, d, sport))
            rev = np.array(ecmp_path(topo, d, s, sport))
            for p, a, b in ((fwd, s, d), (rev, d, s)):
                path_rows.append((p, np.ones(len(p))))
                psrc.append(topo.nic_index(a))
                pdst.append(topo.nic_index(b))
            si, di = topo.nic_index(s), topo.nic_index(d)
            flow_rows.append((fid, si, di, 40000 + sport, 2 * fid, 2 * fid + 1))
            rec = np.zeros(n_probe, dtype=PROBE_DTYPE)
            send = np.sort(rng.uniform(0.0, duration, n_probe))
            d_f = 5e-6 + per_elem[fwd].sum() + extra[fwd].sum() + rng.exponential(jitter_us * 1e-6,
                                                                                  n_probe)
            turn = rng.uniform(5e-6, 30e-6, n_probe)
            d_r = 5e-6 + per_elem[rev].sum() + extra[rev].sum() + rng.exponential(jitter_us * 1e-6,
                                                                                  n_probe)
            lost_f = rng.random(n_probe) > np.prod(keep[fwd])
            lost_r = ~lost_f & (rng.random(n_probe) > np.prod(keep[rev]))
            ha, hb = nic_host[si], nic_host[di]

            def stamp(h, t):
                return EPOCH_NS + np.rint((t + offset[h] + drift[h] * t) * 1e9).astype(np.int64)

            rec["flow"], rec["src_nic"], rec["dst_nic"] = fid, si, di
            rec["sport"], rec["seq"] = 40000 + sport, np.arange(n_probe)
            rec["t_send"] = stamp(ha, send)
            rec["t_remote_rx"] = np.where(lost_f, 0, stamp(hb, send + d_f))
            rec["t_remote_tx"] = np.where(lost_f, 0, stamp(hb, send + d_f + turn))
            rec["t_recv"] = np.where(lost_f | lost_r, 0, stamp(ha, send + d_f + turn + d_r))
            rec["lost"] = np.where(lost_f, 1, np.where(lost_r, 2, 0))
            records.append(rec)
    paths = PathTable.from_rows(path_rows, psrc, pdst, [True] * len(path_rows))
    return SyntheticRun(np.array(flow_rows, dtype=FLOW_DTYPE), paths, np.concatenate(records),
                        hosts, nic_host, offset, drift)
