#!/usr/bin/env python3
"""The merge's jobs per event (lens/jobs.py FabricJobs) at fleet sizes; prints JSON.

A rail fabric per size (site_configs/gen_rail.py via benchmarks/scale_window.py: 8 NICs a host, 8
rail leaves per scalable unit of 256 hosts, 16 spines), the running jobs of a busy fleet (every
host in a job: a quarter of the hosts in jobs of 256-1,024 nodes, the rest in jobs of 8-64, placed
in whole scalable units where they fit, as a topology-aware scheduler would), then per element of
the shared fabric: the jobs it touches, timed. `build_s`: hosts below each switch and the maps
(once per merge service); `spine_first_s`: a spine's first event (its host -> side map built);
`spine_s`, `uplink_s`: later events.

    python benchmarks/merge_jobs.py [--sus 5,20,50]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale_window import fabric  # noqa: E402

from fleetctl.lens.jobs import FabricJobs  # noqa: E402
from fleetctl.slurm.base import SlurmJob  # noqa: E402


def busy_jobs(hosts: list[str], seed: int) -> list[SlurmJob]:
    rng = np.random.default_rng(seed)
    jobs, i, n = [], 0, len(hosts)
    big_until = n // 4
    while i < n:
        size = int(rng.integers(256, 1025)) if i < big_until else int(rng.choice([8, 16, 32, 64]))
        nodes = hosts[i:i + size]
        jobs.append(SlurmJob(str(len(jobs) + 1), "RUNNING", user="u", partition="gpu", nodes=nodes,
                             nodelist=f"{nodes[0]}..{nodes[-1]}"))
        i += size
    return jobs


def one(sus: int) -> dict:
    topo = fabric(sus)
    jobs = busy_jobs(list(topo.hosts), sus)
    t0 = time.perf_counter()
    fj = FabricJobs(topo)
    fj.set_jobs(jobs)
    build = time.perf_counter() - t0
    spine = next(s for s, t in topo.switch_tier.items() if t == 2)
    uplink = next(lid for lid, ends in topo.links.items() if spine in ends)
    t0 = time.perf_counter()
    hit = fj.affected({"type": "switch", "id": spine})
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fj.affected({"type": "switch", "id": spine})
    again = time.perf_counter() - t0
    t0 = time.perf_counter()
    up = fj.affected({"type": "link", "id": uplink})
    up_s = time.perf_counter() - t0
    return {"sus": sus, "hosts": len(topo.hosts), "switches": len(topo.switch_tier),
            "jobs": len(jobs), "build_s": round(build, 3), "spine_first_s": round(first, 4),
            "spine_s": round(again, 4), "uplink_s": round(up_s, 4),
            "spine_jobs": len(hit), "uplink_jobs": len(up)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", default="5,20,50", help="sizes, in scalable units of 256 hosts")
    args = ap.parse_args()
    rows = [one(int(s)) for s in args.sus.split(",")]
    print(json.dumps({"benchmark": "merge_jobs", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
