#!/usr/bin/env python3
"""Triangulation time per solver on a synthetic 3-tier fat-tree; prints JSON.

Default: k=24 fat-tree (10,368 links, 20,736 link directions, 3,456 NICs), the covering pair design
(k=3 distinct sources per link direction) widened to 8 peers per NIC and 4 traced flows per pair:
110,592 paths. Per scenario and solver it reports the wall time of one window with the window step
built once (as lens keeps it; best of --repeat), the time of
audit's whole `triangulate` call (the step built inside), and whether the findings name exactly
the injected faults. Setup (pair design, window step) and peak RSS are reported apart. Then, on the
lab's shape with synthetic probes, precision and recall per solver over randomized single faults.

    python benchmarks/triangulation.py [--k 24] [--peers 8] [--flows 4] [--repeat 1] [--trials 40]
    python benchmarks/triangulation.py --k 48 --trials 0 --realistic-trials 0   # issue 22's size
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: the synthetic fabrics

from fleetctl.analysis.signals import path_baseline
from fleetctl.analysis.solvers import solver_names
from fleetctl.analysis.step import WindowStep
from fleetctl.analysis.triangulate import triangulate
from fleetctl.mesh.pairs import select_pairs
from tests.support.fabrics import fat_tree, path_table
from tests.support.synthetic import Fault, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=24, help="fat-tree arity")
    ap.add_argument("--peers", type=int, default=8, help="destinations per NIC (>= design k)")
    ap.add_argument("--flows", type=int, default=4, help="traced flows (source ports) per pair")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--solvers", default=",".join(solver_names()))
    ap.add_argument("--trials", type=int, default=40,
                    help="randomized single-fault runs on the lab shape (0: skip)")
    ap.add_argument("--realistic-trials", type=int, default=200,
                    help="the same with realistic noise, nnls only (0: skip)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    topo = fat_tree(args.k)
    topo.switch_distances()  # the fabric's routing tables: built once per topology, by any user
    t_topo = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = select_pairs(topo, k=3, full_mesh_max=0)
    t_plan = time.perf_counter() - t0
    rss_plan = _peak_mb()
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
    paths = path_table(topo, flows, seeded=True)  # per-switch seeded ECMP (see fabrics.ecmp_path)
    t_paths = time.perf_counter() - t1
    m = paths.matrix(topo.n_elements)

    half = args.k // 2
    core_link = f"p{3 % args.k}-a{1 % half}->c{(1 % half) * half + 2 % half}"
    uplink = f"p{7 % args.k}-l{2 % half}->p{7 % args.k}-a0"
    agg = f"p{11 % args.k}-a{3 % half}"
    nic = f"n{1000 % n:05d}:eth0"
    core = 100 % (half * half)
    down_link = f"c{core}->p{20 % args.k}-a{core // half}"
    scenarios = {  # (faults, expected findings)
        "no-fault": ([], []),
        "core-link-loss-2pct": ([Fault(core_link, "loss", 0.02)], [("link", core_link, "loss")]),
        "leaf-uplink-down": ([Fault(uplink, "down")], [("link", uplink, "down")]),
        "agg-switch-delay-100us": ([Fault(agg, "delay", 100.0)], [("switch", agg, "delay")]),
        "nic-down+link-delay": ([Fault(nic, "down"), Fault(down_link, "delay", 80.0)],
                                [("link", down_link, "delay"), ("nic", nic, "down")]),
    }
    results, setups = [], {}
    for solver in args.solvers.split(","):
        s = time.perf_counter()
        step = WindowStep(topo, paths, solver)  # once per plan: lens keeps it, audit builds it per run
        setups[solver] = round(time.perf_counter() - s, 3)
        for name, (faults, expected) in scenarios.items():
            stats = simulate(topo, paths, faults, windows=1, probes=100, jitter_us=3.0, seed=1)
            best = float("inf")
            for _ in range(args.repeat):
                s = time.perf_counter()
                found = _one_window(step, stats)
                best = min(best, time.perf_counter() - s)
            got = sorted((f["element"]["type"], f["element"].get("direction") or
                          f["element"]["id"], f["metric"]) for f in found)
            results.append({"scenario": name, "solver": solver, "window_seconds": round(best, 3),
                            "correct": got == sorted(expected), "findings": [list(g) for g in got],
                            "_found": found})
        del step
    peak = _peak_mb()  # one window step at a time, as lens and audit hold it
    for r in results:  # audit's whole call, the step built inside: the same findings
        found = r.pop("_found")
        stats = simulate(topo, paths, scenarios[r["scenario"]][0], windows=1, probes=100, jitter_us=3.0,
                         seed=1)  # the same draws as above (seeded)
        s = time.perf_counter()
        whole = triangulate(topo, paths, stats, r["solver"])
        r["triangulate_call_seconds"] = round(time.perf_counter() - s, 3)
        r["correct"] = r["correct"] and _same(whole, found)
        del stats
    accuracy = lab_accuracy(args.trials, args.solvers.split(",")) if args.trials else None
    realistic = realistic_accuracy(args.realistic_trials) if args.realistic_trials else None
    untraced = untraced_fat_tree(args.trials // 2, args.solvers.split(",")) if args.trials else None
    sensitivity = loss_sensitivity(args.solvers.split(",")) if args.trials else None
    print(json.dumps({
        "benchmark": "triangulation",
        "topology": {"name": topo.name, "links": len(topo.links),
                     "link_directions": 2 * len(topo.links), "nics": n,
                     "elements": topo.n_elements},
        "paths": len(paths), "path_matrix_nnz": int(m.nnz), "pairs": len(pairs),
        "covering_design": plan.to_dict() | {"short": len(plan.short)},
        # fleetctl's setup per plan: the pair design and the window step (routing tables are the
        # topology's, built once). The synthetic routing stands in for tracing the flows on a
        # real fabric (the agents' traceroutes, in parallel on the nodes): the harness's cost.
        "setup_seconds": {"topology_routing": round(t_topo, 2), "pair_design": round(t_plan, 2),
                          "window_step": setups,
                          "fleetctl_total": round(t_topo + t_plan + max(setups.values()), 2),
                          "synthetic_routing_harness": round(t_paths, 2)},
        "peak_rss_mb": {"after_pair_design": rss_plan, "whole_benchmark": peak},
        "goal": {"window_seconds": 1.0, "setup_seconds": 10.0, "peak_rss_mb": 2048},
        "results": results,
        "max_window_seconds": max(r["window_seconds"] for r in results),
        "max_triangulate_call_seconds": max(r["triangulate_call_seconds"] for r in results),
        "all_correct": all(r["correct"] for r in results),
        "lab_shape_accuracy": accuracy,
        "lab_shape_realistic_nnls": realistic,
        "untraced_fat_tree_k8": untraced,
        "lab_shape_loss_sensitivity": sensitivity,
    }, indent=2))


def _one_window(step: WindowStep, stats) -> list[dict]:
    """What lens does each window with the step it keeps: merge, baseline, signals, findings."""
    merged = step.merge(stats)
    baseline = path_baseline(merged, step.hop_class, step.th.min_probes)
    sig = step.signals(merged.sent[0], merged.lost[0], merged.delay[0], baseline)
    return [f.to_dict() for f in step.findings(sig, 0)]


def _same(a: list[dict], b: list[dict]) -> bool:
    key = lambda f: (f["element"]["type"], f["element"].get("direction") or f["element"]["id"],  # noqa: E731
                     f["metric"])
    return sorted(map(key, a)) == sorted(map(key, b))


def _peak_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def loss_sensitivity(solvers: list[str], seeds: int = 5) -> dict:
    """Lab shape, traced, 3 windows of 100 probes per path: how often each solver names a lossy
    leaf uplink (and nothing else) at low loss rates, out of `seeds` runs."""
    from tests.support.fabrics import leaf_spine

    topo = leaf_spine(4, 2, 2, 2)
    flows = [(a, b, f) for a in topo.nics for b in topo.nics
             if topo.nic_host[topo.nic_index(a)] != topo.nic_host[topo.nic_index(b)]
             for f in range(8)]
    paths = path_table(topo, flows)
    out: dict[str, dict] = {}
    for rate in (0.003, 0.005, 0.01):
        for solver in solvers:
            hits = 0
            for seed in range(seeds):
                stats = simulate(topo, paths, [Fault("leaf2->spine1", "loss", rate)], windows=3,
                                 probes=100, seed=seed)
                found = triangulate(topo, paths, stats, solver)
                hits += [f["element"].get("direction") for f in found] == ["leaf2->spine1"]
            out.setdefault(f"{100 * rate:g}%", {})[solver] = f"{hits}/{seeds}"
    return out


def untraced_fat_tree(trials: int, solvers: list[str]) -> dict:
    """Switch-link loss faults on a k=8 fat-tree where flows are NOT traced: each flow's row is
    its pair's expected ECMP row. Counts findings that name the faulty link (`exact`), that list
    it among indistinguishable twins (`among_twins`), that name something else (`wrong`), and
    faults missed. Shows what path tracing is worth on a 3-tier fabric."""
    import numpy as np

    from fleetctl.model.fabric import PathTable

    topo = fat_tree(8)
    n, per_pair = len(topo.nics), 8
    pairs = [(i, (i + o) % n) for i in range(n) for o in (1, 17, 45, 77)]
    flows = [(topo.nics[a], topo.nics[b], f) for a, b in pairs for f in range(per_pair)]
    traced = path_table(topo, flows)
    rows = []
    for a, b in pairs:
        rows += [topo.expected_row(topo.nics[a], topo.nics[b])] * per_pair
    untr = PathTable.from_rows(rows, list(traced.src_nic), list(traced.dst_nic),
                               [False] * len(rows))
    rng = np.random.default_rng(7)
    sw_links = [e.direction for e in topo.elements if e.type == "link"
                and all(x in topo.switch_tier for x in e.direction.split("->"))]
    faults = [sw_links[i] for i in rng.integers(len(sw_links), size=trials)]
    out = {}
    for solver in solvers:
        c = {"exact": 0, "among_twins": 0, "wrong": 0, "missed": 0}
        for i, link in enumerate(faults):
            stats = simulate(topo, traced, [Fault(link, "loss", 0.05)], windows=2, seed=200 + i)
            found = triangulate(topo, untr, stats, solver)
            names = [f["element"].get("direction") for f in found]
            twins = [t for f in found for t in f["evidence"].get("indistinguishable_from", [])]
            c["exact"] += link in names
            c["among_twins"] += link not in names and link in twins
            c["missed"] += not found
            c["wrong"] += sum(1 for f in found if f["element"].get("direction") != link
                              and link not in f["evidence"].get("indistinguishable_from", []))
        out[solver] = c | {"faults": trials}
    return out


FAULT_KINDS = ("loss", "delay", "down-link", "down-nic", "down-host", "switch-delay")


def random_fault(topo, rng):
    """One fault as the lab injects them: loss 0.5-5 % or 20-500 us delay on one direction of a switch link,
    a link down (both directions), a NIC or host down, a degraded (delaying) switch."""
    kind = FAULT_KINDS[rng.integers(len(FAULT_KINDS))]
    sw_links = [e for e in topo.elements if e.type == "link"
                and all(x in topo.switch_tier for x in e.direction.split("->"))]
    el = sw_links[rng.integers(len(sw_links))]
    if kind == "loss":
        return [Fault(el.direction, "loss", float(rng.uniform(0.005, 0.05)))], \
            ("link", el.direction, "loss")
    if kind == "delay":
        return [Fault(el.direction, "delay", float(rng.uniform(20, 500)))], \
            ("link", el.direction, "delay")
    if kind == "down-link":
        a, b = el.direction.split("->")
        return [Fault(f"{a}->{b}", "down"), Fault(f"{b}->{a}", "down")], ("link", "both", "down")
    if kind == "down-nic":
        nic = topo.nics[rng.integers(len(topo.nics))]
        return [Fault(nic, "down")], ("nic", nic, "down")
    if kind == "down-host":
        host = topo.nic_host[rng.integers(len(topo.nics))]
        return [Fault(host, "down")], ("host", host, "down")
    sw = sorted(topo.switch_tier)[rng.integers(len(topo.switch_tier))]
    return [Fault(sw, "delay", float(rng.uniform(20, 500)))], ("switch", sw, "delay")


def realistic_accuracy(trials: int) -> dict:
    """Randomized single faults on the lab's shape (as lab_accuracy) with realistic noise, one
    change at a time and all at once: per-switch seeded ECMP (flows not correlated across hops),
    heavier jitter (15 us), unequal probe rates per path (30-150 a window), and rare drops
    (5e-4) with delay spikes. Precision, recall and findings on clean runs, for nnls."""
    from tests.support.fabrics import leaf_spine
    import numpy as np

    topo = leaf_spine(4, 2, 2, 2)
    flows = [(a, b, f) for a in topo.nics for b in topo.nics
             if topo.nic_host[topo.nic_index(a)] != topo.nic_host[topo.nic_index(b)]
             for f in range(8)]
    tables = {False: path_table(topo, flows), True: path_table(topo, flows, seeded=True)}
    rng = np.random.default_rng(2027)
    cases = [random_fault(topo, rng) for _ in range(trials)] + [([], None)] * max(1, trials // 4)
    variants = {"baseline": (False, 5.0, False), "seeded_ecmp": (True, 5.0, False),
                "jitter_15us": (False, 15.0, False), "unequal_rates": (False, 5.0, True),
                "all_at_once": (True, 15.0, True)}
    out = {}
    for name, (seeded, jitter, unequal) in variants.items():
        paths = tables[seeded]
        tp = fp = fn = clean = 0
        for i, (faults, want) in enumerate(cases):
            probes = np.random.default_rng(300 + i).integers(30, 151, len(paths)) if unequal \
                else 100
            stats = simulate(topo, paths, faults, windows=3, probes=probes, jitter_us=jitter,
                             background_loss=5e-4, spike_rate=2e-3, seed=100 + i)
            got = [(f["element"]["type"], f["element"].get("direction") or f["element"]["id"],
                    f["metric"]) for f in triangulate(topo, paths, stats, "nnls")]
            if want is None:
                clean += len(got)
                fp += len(got)
                continue
            hit = want in got
            tp, fn, fp = tp + hit, fn + (not hit), fp + len(got) - hit
        out[name] = {"precision": round(tp / max(1, tp + fp), 3),
                     "recall": round(tp / max(1, tp + fn), 3), "faults": trials,
                     "clean_runs": len(cases) - trials, "findings_on_clean_runs": clean}
    return out


def lab_accuracy(trials: int, solvers: list[str]) -> dict:
    """Randomized single faults (and a quarter as many clean runs) on the lab's shape, synthetic
    probes: 4 leaves x 2 spines, 8 hosts x 2 NICs, full mesh, 8 flows per pair, 3 windows of 100
    probes per path. Precision = correct findings / findings; recall = faults named / faults."""
    from tests.support.fabrics import leaf_spine
    import numpy as np

    topo = leaf_spine(4, 2, 2, 2)
    flows = [(a, b, f) for a in topo.nics for b in topo.nics
             if topo.nic_host[topo.nic_index(a)] != topo.nic_host[topo.nic_index(b)]
             for f in range(8)]
    paths = path_table(topo, flows, seeded=True)
    rng = np.random.default_rng(2026)
    cases = [random_fault(topo, rng) for _ in range(trials)] + [([], None)] * max(1, trials // 4)
    out = {}
    for solver in solvers:
        tp = fp = fn = clean_findings = 0
        for i, (faults, want) in enumerate(cases):
            stats = simulate(topo, paths, faults, windows=3, probes=100, jitter_us=5.0,
                             background_loss=5e-4, spike_rate=2e-3, seed=100 + i)
            got = [(f["element"]["type"], f["element"].get("direction") or f["element"]["id"],
                    f["metric"]) for f in triangulate(topo, paths, stats, solver)]
            if want is None:
                clean_findings += len(got)
                fp += len(got)
                continue
            hit = want in got
            tp += hit
            fn += not hit
            fp += len(got) - hit
        out[solver] = {"precision": round(tp / max(1, tp + fp), 3),
                       "recall": round(tp / max(1, tp + fn), 3),
                       "faults": trials, "clean_runs": len(cases) - trials,
                       "findings_on_clean_runs": clean_findings}
    return out


if __name__ == "__main__":
    main()
