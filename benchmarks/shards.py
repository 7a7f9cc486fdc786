#!/usr/bin/env python3
"""lens in shards at fleet sizes: the site cut into shards of whole scalable units
(analysis/shards.py), every shard's window through the real window step, its document, and the
merge (lens/shard.py) over all of them; prints JSON.

Fabric: site_configs/gen_rail.py (8 NICs a host, 8 rail leaves per scalable unit of 256 hosts,
16 spines shared by every unit). Each shard is planned as its coordinator plans it (mesh.plan
over the shard's own NICs: 2,000 probes/s a host, k = 3) and traced with per-switch seeded ECMP
(benchmarks/scale_window.py). Probes per path and window ~ Poisson at the plan's rate, losses
binomial over the path's elements (2e-5 per element crossed everywhere). Scenarios, each for
`--windows` 1 s windows:
- clean;
- gray spine: every link of one spine loses 0.6 % (each direction);
- lossy spine: 3 %;
- cable: one leaf-spine cable, both directions, 2 %;
- two at once: a gray spine (0.8 %) and a cable on another spine (2 %);
- delay spine: every path through one spine 200 us slower (the switch itself: once per path),
  each path's delay 10 us plus |N(0, 3 us)| of noise (baseline 10 us).
A window is right when the merged findings name exactly the truth (the spine as a switch, the
cable as a link), and nothing else.

Timed per window: every shard's step (signals, findings, its document: what its coordinator
adds per window; the ingest before it is in docs/scale.md), the merge (reading every document
from JSON, checking it, merging). `--big SUS`: the partition of a fabric of SUS units into shards
of `--big-shard-sus`, and one shard's plan, setup and window step inside that whole fabric: does a
shard cost the same in a fleet of 12,800 hosts as alone?

    python benchmarks/shards.py [--sus 4,10,20] [--shard-sus 1] [--windows 8] [--big 50]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale_window import fabric, flows_and_paths  # noqa: E402

from fleetctl.analysis.shards import merge_windows, partition  # noqa: E402
from fleetctl.analysis.step import WindowStep  # noqa: E402
from fleetctl.lens.shard import ShardPublisher, parse_document  # noqa: E402
from fleetctl.mesh.plan import plan_probes  # noqa: E402
from fleetctl.model.fabric import WindowStats  # noqa: E402

BACKGROUND = 2e-5
SPORTS = 4
BUDGET = 2000.0


def rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


class ShardSim:
    """One shard as its coordinator would run it: its plan, traced paths, window step."""

    def __init__(self, topo, layout, shard, seed: int):
        t0 = time.perf_counter()
        mine = set(shard.hosts)
        nics = {i for i, h in enumerate(topo.nic_host) if h in mine}
        self.plan = plan_probes(topo, nics, budget_pps=BUDGET, k=3, duration=1.0)
        self.plan_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.flows, self.paths = flows_and_paths(topo, self.plan.pairs, SPORTS, seed)
        self.trace_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.step = WindowStep(topo, self.paths)
        self.pub = ShardPublisher(layout, topo, list(shard.hosts), "/nonexistent")
        self.inc = self.paths.matrix(topo.n_elements)
        self.setup_s = time.perf_counter() - t0
        self.rate = self.plan.rate / SPORTS  # per flow (each direction a path)

    def window(self, rng, log_keep: np.ndarray, t_end: float,
               extra_us: np.ndarray | None = None) -> tuple[str, float]:
        survive = np.exp(self.inc @ log_keep)
        sent = rng.poisson(self.rate, len(self.paths))
        lost = rng.binomial(sent, 1 - survive)
        base = np.full(len(self.paths), 10.0)
        delay = base if extra_us is None else \
            base + np.abs(rng.normal(0.0, 3.0, len(self.paths))) + self.inc @ extra_us
        t0 = time.perf_counter()
        m = self.step.merge(WindowStats(sent[None], lost[None], delay[None], base))
        sig = self.step.signals(m.sent[0], m.lost[0], m.delay[0], m.baseline)
        findings = [f.to_dict() for f in self.step.findings(sig, 0)]
        doc = self.pub.document(t_end, 1.0, self.pub.counts(self.step, sig, findings), findings)
        text = json.dumps(doc, separators=(",", ":"))
        return text, time.perf_counter() - t0


def scenarios(topo, seed: int) -> dict[str, tuple[dict[int, float], set[str], dict[int, float] | None]]:
    """name -> (element index -> loss, the truth: element ids the merge should name, element
    index -> extra delay in us, or None: no delay noise either)."""
    rng = np.random.default_rng(seed)
    spines = sorted(s for s, t in topo.switch_tier.items() if t == 2)
    leaves = sorted(s for s, t in topo.switch_tier.items() if t == 1)
    a, b = (spines[i] for i in rng.choice(len(spines), 2, replace=False))

    def spine(sw, p):
        out = {}
        for lid, (x, y) in topo.links.items():
            if sw in (x, y):
                out[topo.link_dir(lid, x, y)] = p
                out[topo.link_dir(lid, y, x)] = p
        return out

    def cable(sw):
        leaf = leaves[int(rng.integers(len(leaves)))]
        lid = topo.links_between(leaf, sw)[0]
        x, y = topo.links[lid]
        return lid, {topo.link_dir(lid, x, y): 0.02, topo.link_dir(lid, y, x): 0.02}

    lid, cab = cable(a)
    lid2, cab2 = cable(b)
    return {"clean": ({}, set(), None),
            "gray_spine_0.6pct": (spine(a, 0.006), {a}, None),
            "lossy_spine_3pct": (spine(b, 0.03), {b}, None),
            "cable_2pct": (cab, {lid}, None),
            "gray_spine_and_cable": ({**spine(a, 0.008), **cab2}, {a, lid2}, None),
            "clean_with_delay_noise": ({}, set(), {}),
            "delay_spine_200us": ({}, {b}, {topo.index("switch", b): 200.0})}


def fabric_and_layout(sus: int, shard_sus: int) -> tuple[dict, object, object]:
    """(figures, topology, layout): the generated fabric cut into shards of `shard_sus` units."""
    out: dict = {"sus": sus}
    t0 = time.perf_counter()
    topo = fabric(sus)
    out.update(hosts=len(topo.hosts), nics=len(topo.nics), elements=topo.n_elements,
               fabric_s=round(time.perf_counter() - t0, 2))
    t0 = time.perf_counter()
    layout = partition(topo, 256 * shard_sus)
    out.update(partition_s=round(time.perf_counter() - t0, 3), shards=len(layout.shards),
               shared_switches=len(layout.shared))
    return out, topo, layout


def one(sus: int, shard_sus: int, windows: int, seed: int) -> dict:
    out, topo, layout = fabric_and_layout(sus, shard_sus)
    out["shard_hosts"] = [len(s.hosts) for s in layout.shards][:3]
    sims = [ShardSim(topo, layout, s, seed + i) for i, s in enumerate(layout.shards)]
    out["per_shard"] = {"paths": int(np.median([len(s.paths) for s in sims])),
                        "pairs": int(np.median([len(s.plan.pairs) for s in sims])),
                        "plan_s": round(float(np.median([s.plan_s for s in sims])), 2),
                        "trace_s": round(float(np.median([s.trace_s for s in sims])), 2),
                        "setup_s": round(float(np.median([s.setup_s for s in sims])), 2)}
    links = {sw: [lid for lid, ends in topo.links.items() if sw in ends] for sw in layout.shared}
    expected = [s.name for s in layout.shards]
    step_s, merge_s, doc_bytes = [], [], []
    rng = np.random.default_rng(seed)
    results = {}
    for name, (faults, truth, delays) in scenarios(topo, seed).items():
        log_keep = np.full(topo.n_elements, np.log1p(-BACKGROUND))
        for e, p in faults.items():
            log_keep[e] = np.log1p(-p)
        extra = None
        if delays is not None:
            extra = np.zeros(topo.n_elements)
            for e, us in delays.items():
                extra[e] = us
        right, other, shard_named = 0, set(), 0
        for w in range(windows):
            docs = []
            for sim in sims:
                text, dt = sim.window(rng, log_keep, 1000.0 + w, extra)
                docs.append(text)
                step_s.append(dt)
                doc_bytes.append(len(text))
            t0 = time.perf_counter()
            parsed = [parse_document(json.loads(d), topo, layout, f"doc {i}") for i, d in enumerate(docs)]
            res = merge_windows(parsed, expected, layout.shared, links_of=lambda sw: links[sw])
            merge_s.append(time.perf_counter() - t0)
            named = {f["element"]["id"] for f in res.findings}
            right += named == truth
            other |= named - truth
            shard_named += sum(bool(p.findings) for p in parsed)
        results[name] = {"windows_right": f"{right}/{windows}", "other_named": sorted(other)[:8],
                         "shard_windows_with_findings": shard_named}
    out["scenarios"] = results
    out["shard_step_s"] = {"p50": round(float(np.median(step_s)), 4),
                           "p99": round(float(np.quantile(step_s, 0.99)), 4)}
    out["merge_s"] = {"p50": round(float(np.median(merge_s)), 4),
                      "max": round(float(max(merge_s)), 4)}
    out["shard_doc_bytes"] = {"p50": int(np.median(doc_bytes)), "max": int(max(doc_bytes))}
    out["peak_rss_mb"] = rss_mb()
    return out


def big(sus: int, shard_sus: int, windows: int, seed: int) -> dict:
    """The partition of a large fabric, and one shard inside it against the same shard alone."""
    out, topo, layout = fabric_and_layout(sus, shard_sus)
    out["shard_hosts"] = len(layout.shards[0].hosts)
    sim = ShardSim(topo, layout, layout.shards[0], seed)
    out["shard"] = {"pairs": len(sim.plan.pairs), "paths": len(sim.paths),
                    "plan_s": round(sim.plan_s, 2), "trace_s": round(sim.trace_s, 2),
                    "setup_s": round(sim.setup_s, 2)}
    rng = np.random.default_rng(seed)
    log_keep = np.full(topo.n_elements, np.log1p(-BACKGROUND))
    times, sizes = [], []
    for w in range(windows):
        text, dt = sim.window(rng, log_keep, 1000.0 + w)
        times.append(dt)
        sizes.append(len(text))
    out["shard_step_s"] = {"p50": round(float(np.median(times)), 3), "max": round(max(times), 3)}
    out["shard_doc_bytes"] = int(np.median(sizes))
    out["peak_rss_mb"] = rss_mb()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", default="4,10,20", help="fabric sizes in units of 256 hosts")
    ap.add_argument("--shard-sus", type=int, default=1, help="units per shard")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--big", type=int, default=0, help="also: a fabric of this many units ...")
    ap.add_argument("--big-shard-sus", type=int, default=5, help="... cut into shards this big")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        kind, sus = args.one.split(":")
        fn = big if kind == "big" else one
        shard_sus = args.big_shard_sus if kind == "big" else args.shard_sus
        print(json.dumps(fn(int(sus), shard_sus, args.windows, args.seed)))
        return
    runs = [("one", s) for s in args.sus.split(",") if s] + ([("big", args.big)] if args.big else [])
    results = []
    for kind, sus in runs:
        r = subprocess.run([sys.executable, __file__, "--one", f"{kind}:{sus}", "--shard-sus",
                            str(args.shard_sus), "--big-shard-sus", str(args.big_shard_sus),
                            "--windows", str(args.windows), "--seed", str(args.seed)],
                           capture_output=True, text=True)
        if r.returncode:
            results.append({"kind": kind, "sus": sus, "error": r.stderr[-2000:]})
        else:
            results.append({"kind": kind, **json.loads(r.stdout)})
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"benchmark": "shards", "shard_sus": args.shard_sus, "sports": SPORTS,
                      "budget_pps": BUDGET, "results": results}, indent=1))


if __name__ == "__main__":
    main()
