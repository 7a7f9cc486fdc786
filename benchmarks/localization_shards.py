#!/usr/bin/env python3
"""Localization accuracy of lens in shards at 12,500 x 8 NICs (issue 22): precision and recall of
the merged findings over random injected faults, and findings on clean windows; prints JSON.

The site (site_configs/gen_rail.py via scale_window.fabric: 8 NICs a host, 8 rail leaves per
scalable unit of 256 hosts, 16 spines shared by every unit) is cut into shards of whole units
(analysis/shards.py `partition`), each planned and traced as its coordinator does it
(benchmarks/shards.py ShardSim: mesh.plan over the shard's own NICs at 2,000 probes/s a host,
k = 3, per-switch seeded ECMP hashes, `--sports` source ports a pair). Every trial is one 1 s
window: each shard's window step on its own paths -> its shard document (JSON, as published)
-> `lens merge`'s merge_windows over all of them -> the merged findings, scored.

Noise, per path and window (the shards' documents are built from per-path figures, so this
simulates at that level; the per-probe noise of clocks and jitter is benchmarks/
localization_scale.py's, at one 1,280-host shard): probes ~ Poisson of the path's rate, each
path's rate the plan's times a factor drawn once in 0.5-1.5 (unequal rates); losses binomial
over the path's elements (2e-5 per element crossed everywhere: rare drops); delays 10 us plus
|N(0, 3 us)| per path and window against a learnt 10 us baseline.

Faults, drawn as localization_scale.py draws them (its `Faults`, `names`): `link-loss` 1-5 % on
one leaf-spine direction, `cable-loss` 2 % both ways, `cable-down` (a black hole), `nic-down`,
`spine-delay` / `leaf-delay` (a switch delaying every crossing by 20-500 us), `link-delay`, and
here also `spine-loss` (every link of a spine losing 0.5-3 % each way); two at once in
`--double-share` of the trials; `--clean` clean trials. Spines are the faults between pods:
every shard crosses them, and only the merge can name them whole.

Each shard's window is judged as its coordinator judges it (lens/window.py's WindowJudge: the
step's findings, one verdict per element, a finding that a stronger one of the window explains
marked `explained_by_window_finding`); before 2026-12-05 the simulation took the step's findings
unmarked, and a lossy spine's share of loss on a few host cables (3 of a NIC's 10 paths crossing
the spine) read as cable findings lens would have held.

Scoring as localization_scale.py: a fault is found when a merged finding names it (element and
metric family); recall = faults found / faults. `precision` = correct / all findings lens acts
on (clean trials included): every merged finding but those a stronger one of their shard's
window explains (they open nothing while it stands); `precision_every_finding` counts those
too. Merged findings lens holds a window or more before opening (`suspect_switch`,
`lone_link_of`: a link of a spine the merge is still naming) count in both, and apart (`held`),
as do faults found only by them.

    python benchmarks/localization_shards.py [--sus 50] [--shard-sus 5] [--trials 200]
        [--clean 50] [--sports 8] [--seed 1]

At 12,800 x 8 (10 shards of 1,280) a trial took ~9 s on one core (every shard's window step,
then the merge) and the setup ~5 minutes, 4.2 GB: give 250 trials about 45 minutes.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import shards as sh  # noqa: E402  (ShardSim, fabric_and_layout; puts the repository on the path)
from localization_scale import KINDS, LIST_MAX, Fault, Faults, brief, names  # noqa: E402

from fleetctl.analysis.shards import merge_windows  # noqa: E402
from fleetctl.lens.shard import parse_document  # noqa: E402
from fleetctl.lens.window import WindowJudge  # noqa: E402
from fleetctl.model.fabric import WindowStats  # noqa: E402

HOLD_MARKS = ("suspect_switch", "lone_link_of")
SHOW_WRONG = False  # --show-wrong
ALL_KINDS = KINDS + ("spine-loss",)  # a spine losing on every link: between pods, merge only


def draw(maker: Faults, kind: str, rng) -> Fault:
    if kind != "spine-loss":
        return maker.draw(kind, rng)
    topo = maker.topo
    s = maker.spines[rng.integers(len(maker.spines))]
    cols = [topo.link_dir(lid, x, y) for lid, (a, b) in topo.links.items() if s in (a, b)
            for x, y in ((a, b), (b, a))]
    return Fault(kind, cols, drop=float(rng.uniform(0.005, 0.03)), target={"switch": s})


def names_fault(f: dict, fault: Fault) -> bool:
    if fault.kind == "spine-loss":  # the spine as a switch, a loss (or down) finding
        return f["element"]["type"] == "switch" and f["element"]["id"] == fault.target["switch"] \
            and f["metric"] in ("loss", "down")
    return names(f, fault)


class NoisyShard(sh.ShardSim):
    """A shard with unequal per-path rates and delay noise in every window."""

    def __init__(self, topo, layout, shard, seed: int, sports: int):
        sh.SPORTS = sports  # ShardSim traces and rates with the module's ports a pair
        super().__init__(topo, layout, shard, seed)
        self.rate_path = self.rate * np.random.default_rng(seed + 5).uniform(0.5, 1.5,
                                                                             len(self.paths))
        self.judge = WindowJudge(topo, self.step)

    def window(self, rng, log_keep: np.ndarray, t_end: float, extra_us: np.ndarray) -> dict:
        survive = np.exp(self.inc @ log_keep)
        sent = rng.poisson(self.rate_path)
        lost = rng.binomial(sent, 1 - survive)
        base = np.full(len(self.paths), 10.0)
        delay = base + np.abs(rng.normal(0.0, 3.0, len(self.paths))) + self.inc @ extra_us
        m = self.step.merge(WindowStats(sent[None], lost[None], delay[None], base))
        sig = self.step.signals(m.sent[0], m.lost[0], m.delay[0], m.baseline)
        # judged as the shard's coordinator judges its window (lens/window.py's WindowJudge: one
        # verdict per element, the explained rules among the window's findings; no open events)
        findings, _host_side = self.judge.judge(sig)
        self.judge.mark_explained_if_named(findings, sig, self.pub.shared)
        doc = self.pub.document(t_end, 1.0, self.pub.counts(self.step, sig, findings), findings)
        return json.loads(json.dumps(doc, separators=(",", ":")))  # as `lens merge` reads it


def run(sus: int, shard_sus: int, trials: int, clean: int, sports: int, seed: int,
        double_share: float) -> dict:
    t0 = time.perf_counter()
    out, topo, layout = sh.fabric_and_layout(sus, shard_sus)
    sims = [NoisyShard(topo, layout, s, seed + i, sports) for i, s in enumerate(layout.shards)]
    out.update(sports=sports, shard_hosts=[len(s.hosts) for s in layout.shards][:3],
               paths_per_shard=int(np.median([len(s.paths) for s in sims])),
               setup_s=round(time.perf_counter() - t0, 1))
    links = {sw: [lid for lid, ends in topo.links.items() if sw in ends] for sw in layout.shared}
    expected = [s.name for s in layout.shards]
    rng = np.random.default_rng(seed + 101)  # faults and order
    rng_w = np.random.default_rng(seed + 202)  # the windows' draws
    maker = Faults(topo)
    cases = []
    for _ in range(trials):
        n_f = 2 if rng.random() < double_share else 1
        fs = []
        while len(fs) < n_f:
            f = draw(maker, ALL_KINDS[rng.integers(len(ALL_KINDS))], rng)
            if all(set(f.cols).isdisjoint(g.cols) and f.target != g.target for g in fs):
                fs.append(f)
        cases.append(fs)
    cases += [[] for _ in range(clean)]
    per_kind = {k: {"faults": 0, "found": 0} for k in ALL_KINDS}
    tp = fn = n_findings = n_correct = 0
    held = {"findings": 0, "correct": 0, "faults_found_only_held": 0}
    # findings a stronger one of their shard's window explains (window.py's rule, as each
    # shard's coordinator marks them): they open nothing while it stands
    explained = {"findings": 0, "correct": 0}
    clean_findings, wrong, missed = 0, [], []
    step_s, merge_s = [], []
    t_trials = time.perf_counter()
    for n, ci in enumerate(rng.permutation(len(cases))):
        if n and n % 25 == 0:  # progress on stderr: a run at 12,800 hosts takes most of an hour
            print(json.dumps({"trials_done": n, "faults_found": tp, "missed": fn,
                              "findings": n_findings, "correct": n_correct,
                              "clean_findings": clean_findings,
                              "s": round(time.perf_counter() - t_trials)}), file=sys.stderr,
                  flush=True)
        fs = cases[ci]
        log_keep = np.full(topo.n_elements, np.log1p(-sh.BACKGROUND))
        extra = np.zeros(topo.n_elements)
        for f in fs:
            for c in f.cols:
                if f.drop:
                    log_keep[c] = -np.inf if f.drop >= 1.0 else np.log1p(-f.drop)
                extra[c] += f.delay_us
        t = time.perf_counter()
        docs = [sim.window(rng_w, log_keep, 1000.0 + n, extra) for sim in sims]
        step_s.append((time.perf_counter() - t) / len(sims))
        t = time.perf_counter()
        parsed = [parse_document(d, topo, layout, f"shard {i}") for i, d in enumerate(docs)]
        res = merge_windows(parsed, expected, layout.shared, links_of=lambda s: links[s])
        merge_s.append(time.perf_counter() - t)
        found = res.findings
        n_findings += len(found)
        is_expl = [bool(f.get("evidence", {}).get("explained_by_window_finding")) for f in found]
        explained["findings"] += sum(is_expl)
        is_held = [any(found_f.get("evidence", {}).get(m) for m in HOLD_MARKS) for found_f in found]
        held["findings"] += sum(is_held)
        if not fs:
            clean_findings += len(found)
            explained["clean"] = explained.get("clean", 0) + sum(is_expl)
            wrong += [brief(f) | {"trial": int(n), "clean": True} for f in found][:2]
            continue
        right = [any(names_fault(f, x) for x in fs) for f in found]
        if SHOW_WRONG and not all(right):  # every wrong finding as it comes, whole
            print(json.dumps({"trial": int(n), "truth": [x.describe() for x in fs],
                              "wrong": [f for f, r in zip(found, right) if not r],
                              "right": [brief(f) for f, r in zip(found, right) if r]},
                             default=str), file=sys.stderr, flush=True)
        n_correct += sum(right)
        held["correct"] += sum(r and h for r, h in zip(right, is_held))
        explained["correct"] += sum(r and e for r, e in zip(right, is_expl))
        wrong += [brief(f) | {"trial": int(n), "truth": [x.describe() for x in fs]}
                  for f, r in zip(found, right) if not r][:2]
        for x in fs:
            per_kind[x.kind]["faults"] += 1
            by = [h for f, h in zip(found, is_held) if names_fault(f, x)]
            if by:
                tp += 1
                per_kind[x.kind]["found"] += 1
                held["faults_found_only_held"] += all(by)
            else:
                fn += 1
                missed.append({"trial": int(n), **x.describe(),
                               "named": [brief(f) for f in found][:4]})
    return {**out,
            "trials": trials, "clean_trials": clean, "faults": tp + fn,
            # over the findings lens acts on: all but those a stronger one of their window explains
            "precision": round((n_correct - explained["correct"]) /
                               (n_findings - explained["findings"]), 4)
            if n_findings > explained["findings"] else None,
            "precision_every_finding": round(n_correct / n_findings, 4) if n_findings else None,
            "explained_by_a_stronger_finding": explained,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "clean_findings": clean_findings, "held": held,
            "per_kind": {k: {**v, "recall": round(v["found"] / v["faults"], 3) if v["faults"] else None}
                         for k, v in per_kind.items()},
            "wrong": wrong[:LIST_MAX], "missed": missed[:LIST_MAX],
            "shard_step_s": {"p50": round(float(np.median(step_s)), 3),
                             "p99": round(float(np.quantile(step_s, 0.99)), 3)},
            "merge_s": {"p50": round(float(np.median(merge_s)), 4),
                        "max": round(float(max(merge_s)), 4)},
            "trials_s": round(time.perf_counter() - t_trials, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", type=int, default=50, help="fabric size in units of 256 hosts")
    ap.add_argument("--shard-sus", type=int, default=5, help="units per shard")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--clean", type=int, default=50)
    ap.add_argument("--sports", type=int, default=8, help="source ports a pair (lens's default)")
    ap.add_argument("--double-share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show-wrong", action="store_true",
                    help="print each trial's wrong findings whole on stderr as they come")
    a = ap.parse_args()
    global SHOW_WRONG
    SHOW_WRONG = a.show_wrong
    print(json.dumps({"benchmark": "localization_shards",
                      **run(a.sus, a.shard_sus, a.trials, a.clean, a.sports, a.seed,
                            a.double_share)}, indent=1))


if __name__ == "__main__":
    main()
