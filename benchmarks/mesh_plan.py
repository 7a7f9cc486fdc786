"""The probe plan of a rail-optimized site (site_configs/gen_rail.py): time to plan, pairs,
coverage, per-host load against the budget, and the loss floor against the run's duration.

    python benchmarks/mesh_plan.py                      # 2,048 hosts x 8 NICs (256 x 8 SUs)
    python benchmarks/mesh_plan.py --sus 2 --nodes-per-su 64 --budget 2000 --k 3

Prints one JSON object. plan_s covers the pair design and the rate (what `audit --mesh` does before
probing); the per-link probe estimate and the loss floors are computed after it, from the plan.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetctl.config.site import parse_site  # noqa: E402
from fleetctl.mesh.pairs import _Coverage  # noqa: E402
from fleetctl.mesh.plan import element_probes, host_ends, loss_floor, plan_probes  # noqa: E402
from fleetctl.model.fabric import Topology  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", type=int, default=8)
    ap.add_argument("--nodes-per-su", type=int, default=256)
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--spines", type=int, default=16)
    ap.add_argument("--budget", type=float, default=2000.0)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--durations", default="5,10,30,60,300")
    args = ap.parse_args()
    text = subprocess.run([sys.executable, str(ROOT / "site_configs" / "gen_rail.py"), "--sus",
                           str(args.sus), "--nodes-per-su", str(args.nodes_per_su), "--rails",
                           str(args.rails), "--spines", str(args.spines)], capture_output=True,
                          text=True, check=True).stdout
    t0 = time.perf_counter()
    topo = Topology.from_site(parse_site(text))
    t1 = time.perf_counter()
    plan = plan_probes(topo, budget_pps=args.budget, k=args.k, duration=10.0)
    t2 = time.perf_counter()
    counts, need = _Coverage(topo).sources(plan.pairs, args.k)
    ends = host_ends(plan.pairs, topo.nic_host)
    per_link = np.array(list(element_probes(topo, plan).values()))
    floors = {}
    for d in (float(x) for x in args.durations.split(",")):
        n = per_link * d / plan.duration
        floors[f"{d:g}s"] = {"worst_link_pct": round(float(loss_floor(n.min()) * 100), 4),
                             "median_link_pct": round(float(loss_floor(np.median(n)) * 100), 4)}
    print(json.dumps({
        "hosts": len(set(topo.nic_host)), "nics": len(topo.nics),
        "switches": len(topo.switch_tier), "links": len(topo.links),
        "load_site_s": round(t1 - t0, 3), "plan_s": round(t2 - t1, 3),
        "design": plan.design, "pairs": len(plan.pairs), "k": args.k,
        "rate_per_pair_pps": round(plan.rate, 3), "budget_pps": args.budget,
        "max_host_pps": round(max(ends.values()) * plan.rate, 1),
        "median_host_pps": round(float(np.median(list(ends.values()))) * plan.rate, 1),
        "min_coverage": int(counts.min()), "link_dirs_short": int((counts < need).sum()),
        "probes_per_link_10s_min": int(per_link.min()),
        "loss_floor_95": floors,
    }, indent=1))


if __name__ == "__main__":
    main()
