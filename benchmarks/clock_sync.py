#!/usr/bin/env python3
"""Clock offset estimation error on synthetic probes with known offsets and drifts; prints JSON.

Scenarios follow the lab's software timestamps (LAB.md: RTT p50 7.6 us / p99 20 us busy-polling,
10-100 us with blocking sockets). Each host probes `peers` others at 50 Hz for 10 s; clocks start
up to 5 ms apart and drift up to 50 ppm. The error is |estimated - true| offset of every host
relative to the reference host, sampled over the run. Goal: p99 <= 5 us.

    python benchmarks/clock_sync.py [--hosts 16,64] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: the synthetic fabrics

from fleetctl.analysis.clock import synchronize
from tests.support.synthetic import clock_probes

SCENARIOS = {
    # name: (mean queuing s, per-direction asymmetry sd s, timestamp read jitter sd s)
    "busy-poll": (5e-6, 3e-7, 1e-7),
    "blocking-sockets": (40e-6, 1e-6, 5e-7),
    "congested": (200e-6, 2e-6, 1e-6),
}


def errors_us(p, model) -> np.ndarray:
    ts = np.linspace(0.0, 10.0, 21)
    h = np.arange(len(p.hosts))
    est = model.theta(np.zeros((len(ts), len(h)), dtype=int), np.broadcast_to(h, (len(ts), len(h))),
                      ts[:, None])
    true = p.true_theta(np.zeros_like(h), h, ts[:, None])
    return np.abs(est - true).ravel() * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="16,64")
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    results = []
    for name, (queuing, asym, jitter) in SCENARIOS.items():
        for hosts in (int(x) for x in args.hosts.split(",")):
            errs, resid, secs, probes = [], [], [], 0
            for seed in range(args.seeds):
                p = clock_probes(hosts=hosts, peers=args.peers, queuing=queuing, asymmetry=asym,
                                 stamp_jitter=jitter, seed=seed)
                t = time.perf_counter()
                m = synchronize(p.hosts, p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
                secs.append(time.perf_counter() - t)
                errs.append(errors_us(p, m))
                resid.append(np.abs(m.residual) * 1e6)
                probes = len(p.src)
            e, r = np.concatenate(errs), np.concatenate(resid)
            results.append({
                "scenario": name, "hosts": hosts, "peers": args.peers, "probes": probes,
                "queuing_mean_us": queuing * 1e6, "asymmetry_sd_us": asym * 1e6,
                "error_us": {"p50": round(float(np.percentile(e, 50)), 3),
                             "p99": round(float(np.percentile(e, 99)), 3),
                             "max": round(float(e.max()), 3)},
                "pair_residual_us_p99": round(float(np.percentile(r, 99)), 3),
                "seconds": round(float(np.median(secs)), 3),
            })
    print(json.dumps({"benchmark": "clock_sync", "goal_p99_us": 5.0, "seeds": args.seeds,
                      "results": results,
                      "worst_p99_us": max(r["error_us"]["p99"] for r in results)}, indent=2))


if __name__ == "__main__":
    main()
