#!/usr/bin/env python3
"""Localization accuracy in the lab: randomized single faults, a probe run each; prints JSON.

An 8-host x 2-NIC lab (4 leaves, 2 spines, clock skew; no Slurm or sshd, the local transport runs
the agents in the hosts' namespaces). Each scenario injects one random fault of the lab's kinds:
loss 1-5 % on one direction of a leaf-spine link, a leaf-spine cable down, a NIC down, a
leaf-spine direction rate-limited to 10 Mbit/s under 90 % background load; plus clean runs.
Every run is analysed by every solver on the same records:

- precision: findings naming the injected element (link + direction, NIC) / all findings,
  clean runs included (any finding there is a false positive);
- recall: scenarios whose fault is named;
- time to finding: the end of the first 1 s window in which the element is named (probing time;
  dead links come from discovery, before probing: 0);
- the clock offset error against the injected skew (every run).

    python benchmarks/localization.py [--scenarios 16] [--clean 4] [--duration 10] [--rate 20]
        [--kinds loss,down,nic,rate] [--loss 1,5] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np

from fleetctl.analysis.solvers import solver_names
from fleetctl.fanout import get_transport
from fleetctl.lab import faults
from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import LabParams
from fleetctl.meshrun.analyze import analyze
from fleetctl.meshrun.probe_run import MeshOptions, probe_run


def random_fault(rng: random.Random, lab, kinds: list[str], loss: tuple[float, float]) -> dict:
    leaves = [f"leaf{i}" for i in range(1, lab.params.leaves + 1)]
    spines = [f"spine{i}" for i in range(1, lab.params.spines + 1)]
    leaf, spine = rng.choice(leaves), rng.choice(spines)
    direction = rng.choice([(leaf, spine), (spine, leaf)])
    kind = rng.choice(kinds)
    if kind == "loss":
        pct = round(rng.uniform(*loss), 1)
        return {"target": f"{direction[0]}->{direction[1]}", "kind": "loss", "value": str(pct),
                "truth": ("link", f"{leaf}--{spine}", f"{direction[0]}->{direction[1]}")}
    if kind == "down":
        return {"target": f"{leaf}--{spine}", "kind": "down", "value": None,
                "truth": ("link", f"{leaf}--{spine}", "both")}
    if kind == "nic":
        nic = f"node{rng.randint(1, lab.params.hosts)}:eth{rng.randint(0, 1)}"
        return {"target": nic, "kind": "down", "value": None, "truth": ("nic", nic, "")}
    return {"target": f"{direction[0]}->{direction[1]}", "kind": "rate", "value": "10mbit",
            "truth": ("link", f"{leaf}--{spine}", f"{direction[0]}->{direction[1]}")}


def key(f: dict) -> tuple:
    el = f["element"]
    return el["type"], el["id"], el.get("direction", "")


def network(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f.get("category") != "probe"]


def first_window(findings: list[dict], truth: tuple, window_s: float) -> float | None:
    for f in findings:
        if key(f) == truth:
            if f["evidence"].get("window") is None:
                return 0.0
            return (min(f.get("windows") or [f["evidence"]["window"]]) + 1) * window_s
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", type=int, default=16)
    ap.add_argument("--clean", type=int, default=4)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--leaves", type=int, default=4)
    ap.add_argument("--kinds", default="loss,down,nic,rate", help="fault kinds to draw from")
    ap.add_argument("--loss", default="1,5", help="loss range in %%: MIN,MAX")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    params = LabParams(hosts=a.hosts, nics_per_host=2, leaves=a.leaves, spines=2, gpus_per_host=0,
                       clock_skew=True, slurm=False, ssh=False)
    solvers = solver_names()
    tally = {s: {"tp": 0, "fp": 0, "found": 0, "ttf": [], "clean_findings": 0} for s in solvers}
    runs, clock_p99 = [], []
    started = time.time()
    with LabSession(params) as lab:
        site = lab.cluster
        plan = ["clean"] * a.clean + ["fault"] * a.scenarios
        rng.shuffle(plan)
        for kind in plan:
            fault = random_fault(rng, lab, a.kinds.split(","),
                                 tuple(float(x) for x in a.loss.split(","))) \
                if kind == "fault" else None
            if fault:
                faults.add(fault["target"], fault["kind"], fault["value"])
            try:
                with get_transport("local", cluster=site) as t:
                    res = probe_run(site, lab.nodes, t, MeshOptions(duration=a.duration,
                                                                    rate=a.rate))
            finally:
                if fault:
                    faults.clear()
            run = res.run
            truth = tuple(fault["truth"]) if fault else None
            entry = {"fault": {k: fault[k] for k in ("target", "kind", "value")} if fault else None,
                     "probes": int(run.probes.size), "elapsed_s": round(res.elapsed_s, 1),
                     "clock": res.analysis.clock_summary.get("truth"), "solvers": {}}
            if entry["clock"] and entry["clock"].get("hosts"):
                clock_p99.append(entry["clock"]["offset_error_us_p99"])
            for s in solvers:
                # network findings only: probe warnings (an overloaded agent) name no element
                full = network(analyze(run, s, a.duration + 1.0).findings)
                fine = network(analyze(run, s, 1.0).findings)
                ok = [f for f in full if truth and key(f) == truth]
                tally[s]["tp"] += len(ok)
                tally[s]["fp"] += len(full) - len(ok)
                if truth is None:
                    tally[s]["clean_findings"] += len(full)
                elif ok:
                    tally[s]["found"] += 1
                    ttf = first_window(fine, truth, 1.0)
                    if ttf is not None:
                        tally[s]["ttf"].append(ttf)
                entry["solvers"][s] = [list(key(f)) + [f["metric"]] for f in full]
            runs.append(entry)
            print(json.dumps({"run": len(runs), **{k: entry[k] for k in ("fault", "elapsed_s")},
                              "nnls": entry["solvers"].get("nnls")}), file=sys.stderr, flush=True)
    summary = {}
    for s, t in tally.items():
        n = t["tp"] + t["fp"]
        summary[s] = {"precision": round(t["tp"] / n, 3) if n else None,
                      "recall": round(t["found"] / a.scenarios, 3) if a.scenarios else None,
                      "false_findings_on_clean_runs": t["clean_findings"],
                      "time_to_finding_s_median": float(np.median(t["ttf"])) if t["ttf"] else None,
                      "time_to_finding_s_max": float(max(t["ttf"])) if t["ttf"] else None}
    print(json.dumps({
        "lab": {"hosts": a.hosts, "nics_per_host": 2, "leaves": a.leaves, "spines": 2},
        "scenarios": a.scenarios, "clean_runs": a.clean, "duration_s": a.duration,
        "rate_per_pair_hz": a.rate, "seed": a.seed, "kinds": a.kinds, "loss_pct": a.loss,
        "solvers": summary,
        "clock_offset_error_us_p99": {"median_over_runs": float(np.median(clock_p99))
                                      if clock_p99 else None,
                                      "max_over_runs": max(clock_p99) if clock_p99 else None},
        "wall_s": round(time.time() - started, 1), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
