#!/usr/bin/env python3
"""Triangulation time per solver on a synthetic 3-tier fat-tree; prints JSON.

Default: k=24 fat-tree (10,368 links, 20,736 link directions, 3,456 NICs), the covering pair design
(k=3 distinct sources per link direction) widened to 8 peers per NIC and 4 traced flows per pair:
110,592 paths. Per scenario and solver it reports the wall time of one `triangulate` call on one
window (best of --repeat) and whether the findings name exactly the injected faults.

    python benchmarks/triangulation.py [--k 24] [--peers 8] [--flows 4] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import time

from fleetctl.analysis.solvers import solver_names
from fleetctl.analysis.synthetic import Fault, simulate
from fleetctl.analysis.triangulate import triangulate
from fleetctl.mesh.fattree import fat_tree
from fleetctl.mesh.pairs import select_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=24, help="fat-tree arity")
    ap.add_argument("--peers", type=int, default=8, help="destinations per NIC (>= design k)")
    ap.add_argument("--flows", type=int, default=4, help="traced flows (source ports) per pair")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--solvers", default=",".join(solver_names()))
    args = ap.parse_args()

    t0 = time.perf_counter()
    topo = fat_tree(args.k)
    plan = select_pairs(topo, k=3, full_mesh_max=0)
    t_plan = time.perf_counter() - t0
    pairs = set(plan.pairs)
    n = len(topo.nics)
    hop = max(1, n // args.peers) + 1
    for i in range(n):  # widen to `peers` destinations per NIC, spread over the ring
        for j in range(max(0, args.peers - plan.k)):
            b = (i + 7 + j * hop) % n
            if topo.nic_host[b] != topo.nic_host[i]:
                pairs.add((i, b))
    flows = [(topo.nics[a], topo.nics[b], f) for a, b in sorted(pairs) for f in range(args.flows)]
    t1 = time.perf_counter()
    paths = topo.path_table(flows)
    t_paths = time.perf_counter() - t1
    m = paths.matrix(topo.n_elements)

    scenarios = {
        "no-fault": [],
        "core-link-loss-2pct": [Fault("p3-a1->c14", "loss", 0.02)],
        "leaf-uplink-down": [Fault("p7-l2->p7-a0", "down")],
        "agg-switch-delay-100us": [Fault("p11-a3", "delay", 100.0)],
        "nic-down+link-delay": [Fault("n01000:eth0", "down"), Fault("c100->p20-a8", "delay", 80.0)],
    }
    expected = {
        "no-fault": [],
        "core-link-loss-2pct": [("link", "p3-a1->c14", "loss")],
        "leaf-uplink-down": [("link", "p7-l2->p7-a0", "down")],
        "agg-switch-delay-100us": [("switch", "p11-a3", "delay")],
        "nic-down+link-delay": [("link", "c100->p20-a8", "delay"), ("nic", "n01000:eth0", "down")],
    }
    results = []
    for name, faults in scenarios.items():
        stats = simulate(topo, paths, faults, windows=1, probes=100, jitter_us=3.0, seed=1)
        for solver in args.solvers.split(","):
            best = float("inf")
            for _ in range(args.repeat):
                s = time.perf_counter()
                found = triangulate(topo, paths, stats, solver)
                best = min(best, time.perf_counter() - s)
            got = sorted((f["element"]["type"], f["element"].get("direction") or
                          f["element"]["id"], f["metric"]) for f in found)
            results.append({"scenario": name, "solver": solver, "seconds": round(best, 3),
                            "correct": got == sorted(expected[name]),
                            "findings": [list(g) for g in got]})
    print(json.dumps({
        "benchmark": "triangulation",
        "topology": {"name": topo.name, "links": len(topo.links),
                     "link_directions": 2 * len(topo.links), "nics": n,
                     "elements": topo.n_elements},
        "paths": len(paths), "path_matrix_nnz": int(m.nnz), "pairs": len(pairs),
        "covering_design": plan.to_dict() | {"short": len(plan.short)},
        "setup_seconds": {"pair_design": round(t_plan, 2), "path_table": round(t_paths, 2)},
        "goal_seconds": 2.0,
        "results": results,
        "max_seconds": max(r["seconds"] for r in results),
        "all_correct": all(r["correct"] for r in results),
    }, indent=2))


if __name__ == "__main__":
    main()
