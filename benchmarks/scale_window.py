#!/usr/bin/env python3
"""The probe engine at fleet sizes: lens's per-window step and `audit analyze`, on a generated
rail-optimized fabric (site_configs/gen_rail.py: 8 NICs a host, 8 rail leaves per scalable unit of
256 hosts, 16 spines), a budgeted plan (mesh.plan, 2,000 probes/s per host) and synthetic probes
with realistic noise; prints JSON.

For each size, in its own process (so its peak RSS is its own):
- plan: the pair design and rate (plan_probes), traced paths for `--sports` flows per pair, routed
  by per-switch seeded ECMP hashes (as switches do: each has its own seed, so flows are not
  correlated across hops the way one global CRC32 correlates them);
- probes for `--duration` seconds at the plan's rate: per-element delays (0.5-2 us) plus
  exponential jitter, clock offsets (up to 2 ms) and drifts (up to 30 ppm) per host, rare drops
  (2e-5 per element crossed) everywhere, and one injected 2 % loss on a leaf-spine cable (both
  directions);
- lens: WindowAnalyzer built once per plan (its time: `plan_step_s`), then `analyze` on each 1 s
  window (time per window, p50 and max), whether the cable was named, what else was; the same
  on a fault-free run of the same plan (findings there are false);
- audit analyze: meshrun.analyze.analyze on the whole run (clock fit, windows, triangulation,
  significance, coverage check), its time and whether the cable was a finding; and its network
  findings on the fault-free run;
- peak RSS of the process (ru_maxrss), and what the probes take alone.

    python benchmarks/scale_window.py [--sus 0.5,1,2,4] [--duration 5] [--sports 4]

Sizes are scalable units of 256 hosts x 8 NICs (0.5 = 128 hosts). 1,250 hosts is about --sus 5.
"""

from __future__ import annotations

import argparse
import base64
import json
import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetctl.config.site import parse_site  # noqa: E402
from fleetctl.mesh.collect import summary_wire_dtypes  # noqa: E402
from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE, PathTable, Topology  # noqa: E402
from tests.support.fabrics import mix64  # noqa: E402  (the per-switch ECMP hash)

EPOCH_NS = 1_800_000_000_000_000_000
# the agents' packed rows (mesh/summary.py ROW, RECEIVED_ROW), as the coordinator decodes them
ROW_DTYPE, RECEIVED_ROW_DTYPE = summary_wire_dtypes()
SUMMARY_FIELDS = list(ROW_DTYPE.names)  # what an agent sends
BACKGROUND_LOSS = 2e-5  # per element crossed: ~1e-4 per path, rare drops on a healthy fabric
def fabric(sus: float, nodes_per_su: int = 256) -> Topology:
    n_su = max(1, int(np.ceil(sus)))
    per = int(nodes_per_su * sus / n_su)
    text = subprocess.run([sys.executable, str(ROOT / "site_configs" / "gen_rail.py"), "--sus",
                           str(n_su), "--nodes-per-su", str(per), "--rails", "8", "--spines", "16"],
                          capture_output=True, text=True, check=True).stdout
    return Topology.from_site(parse_site(text))


def route(topo: Topology, src: str, dst: str, flow_hash: int, seeds: list[int]) -> list[int]:
    (ssw, up, _), (dsw, _, down) = topo.route_ends(src, dst)
    path = [topo.index("nic", src), up]
    u = ssw
    while True:
        path.append(topo.index("switch", topo.switch_id(u)))
        if u == dsw:
            break
        hops = topo.next_hops(u, dsw)
        u, e = hops[mix64(flow_hash ^ seeds[u]) % len(hops)]
        path.append(e)
    path += [down, topo.index("nic", dst)]
    return path


def flows_and_paths(topo: Topology, pairs, sports: int, seed: int):
    rng = np.random.default_rng(seed)
    seeds = [int(x) for x in rng.integers(0, 2**63, len(topo.switch_tier))]
    rows, src, dst, flow_rows = [], [], [], []
    for a, b in pairs:
        na, nb = topo.nics[a], topo.nics[b]
        for s in range(sports):
            fid = len(flow_rows)
            h = mix64((a << 40) ^ (b << 16) ^ (40000 + s))
            for x, y, hh in ((na, nb, h), (nb, na, mix64(h))):
                p = np.array(route(topo, x, y, hh, seeds), dtype=np.int64)
                rows.append((p, np.ones(len(p))))
            src += [a, b]
            dst += [b, a]
            flow_rows.append((fid, a, b, 40000 + s, 2 * fid, 2 * fid + 1))
    paths = PathTable.from_rows(rows, src, dst, [True] * len(rows))
    return np.array(flow_rows, dtype=FLOW_DTYPE), paths


def probes_for(topo: Topology, flows: np.ndarray, paths: PathTable, rate_per_flow: float,
               duration: float, fault_cols: list[int], loss: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    hosts = topo.hosts
    nic_host = topo.nic_host_index
    offset = rng.uniform(-2e-3, 2e-3, len(hosts))
    drift = rng.uniform(-30e-6, 30e-6, len(hosts))
    per_elem = rng.uniform(0.5e-6, 2e-6, topo.n_elements)
    log_keep = np.full(topo.n_elements, np.log(1.0 - BACKGROUND_LOSS))  # rare drops everywhere
    log_keep[fault_cols] = np.log(1.0 - loss)
    m = paths.matrix(topo.n_elements)
    path_delay = m @ per_elem
    path_keep = np.exp(m @ log_keep)
    n = rng.poisson(rate_per_flow * duration, len(flows))
    fi = np.repeat(np.arange(len(flows)), n)
    out = np.zeros(len(fi), dtype=PROBE_DTYPE)
    f = flows[fi]
    fwd, rev = f["fwd_path"], f["rev_path"]
    send = rng.uniform(0.0, duration, len(fi))
    d_f = 5e-6 + path_delay[fwd] + rng.exponential(5e-6, len(fi))
    d_r = 5e-6 + path_delay[rev] + rng.exponential(5e-6, len(fi))
    turn = rng.uniform(5e-6, 30e-6, len(fi))
    lost_f = rng.random(len(fi)) > path_keep[fwd]
    lost_r = ~lost_f & (rng.random(len(fi)) > path_keep[rev])
    ha, hb = nic_host[f["src_nic"]], nic_host[f["dst_nic"]]

    def stamp(h, t):
        return EPOCH_NS + np.rint((t + offset[h] + drift[h] * t) * 1e9).astype(np.int64)

    out["flow"], out["src_nic"], out["dst_nic"] = f["flow"], f["src_nic"], f["dst_nic"]
    out["sport"], out["seq"] = f["sport"], np.arange(len(fi)) % 65536
    out["t_send"] = stamp(ha, send)
    out["t_remote_rx"] = np.where(lost_f, 0, stamp(hb, send + d_f))
    out["t_remote_tx"] = np.where(lost_f, 0, stamp(hb, send + d_f + turn))
    out["t_recv"] = np.where(lost_f | lost_r, 0, stamp(ha, send + d_f + turn + d_r))
    out["lost"] = np.where(lost_f, 1, np.where(lost_r, 2, 0))
    return out[np.argsort(out["t_send"], kind="stable")], offset, drift


def clock_error(model, offset: np.ndarray, drift: np.ndarray, t: float) -> dict:
    """|estimated - true| theta of every host against host 0 at time t, in us."""
    h = np.arange(len(offset))
    est = model.theta(np.zeros_like(h), h, t)
    true = (offset[h] - offset[0]) + (drift[h] - drift[0]) * t
    err = np.abs(est - true)[1:] * 1e6
    err = err[np.isfinite(err)]
    return {"hosts": int(err.size), "p50": round(float(np.percentile(err, 50)), 3),
            "p99": round(float(np.percentile(err, 99)), 3), "max": round(float(err.max()), 3)}


def agent_batches(topo: Topology, flows: np.ndarray, win: np.ndarray, window_ns: int) -> list:
    """What each host's agent sends for one window in summary mode (mesh/summary.py's format):
    its flows' summaries, and the counts of what it answered (not timed: the agents' work)."""
    from fleetctl.analysis.summaries import from_probes

    def enc(a, dtype):
        return base64.b64encode(zlib.compress(np.ascontiguousarray(a, dtype=dtype).tobytes(),
                                              1)).decode()

    s = from_probes(win, window_ns)
    host_of_row = topo.nic_host_index[flows["src_nic"][s.rows["flow"]]]
    got = win[(win["lost"] == 0) | (win["lost"] == 2)]
    got_host = topo.nic_host_index[np.maximum(got["dst_nic"], 0)]
    out = []
    for h, host in enumerate(topo.hosts):
        mine = s.select(host_of_row == h)
        r = got[got_host == h]
        key, count = np.unique(r["t_send"] // window_ns * (1 << 32) + r["flow"],
                               return_counts=True)
        bins = np.c_[mine.bin_rows, mine.bin_sent, mine.bin_lost].ravel()
        wire = np.zeros(mine.rows.size, ROW_DTYPE)
        for k in SUMMARY_FIELDS:
            wire[k] = mine.rows[k]
        got_rows = np.zeros(key.size, RECEIVED_ROW_DTYPE)
        got_rows["window"], got_rows["flow"], got_rows["count"] = key >> 32, key & 0xFFFFFFFF, count
        doc = {"window_ns": window_ns, "bins": s.n_bins,
               "rows": {"n": int(mine.rows.size), "data": enc(wire, ROW_DTYPE)},
               "row_bins": {"n": int(bins.size), "data": enc(bins, "<u4")},
               "received": {"n": int(key.size), "data": enc(got_rows, RECEIVED_ROW_DTYPE)}}
        out.append((host, {"kind": "batch", "summary": doc, "health": []}))
    return out


def summary_windows(topo: Topology, flows: np.ndarray, paths: PathTable, probes: np.ndarray,
                    clean: np.ndarray, lid: str, truth: tuple) -> dict:
    """lens with agents in summary mode (its default): per whole 1 s window, the coordinator's
    ingest (decoding every agent's batch, merging, joining the responders' counts) and the
    window step on the summaries."""
    from fleetctl.analysis.summaries import clock_records
    from fleetctl.lens.clocktrack import ClockTracker
    from fleetctl.lens.ingest import Ingest
    from fleetctl.lens.window import WindowAnalyzer

    w_ns = 10**9
    an = WindowAnalyzer(topo, paths, flows)
    # a window with one host's agent blind: the step, plus which places it cannot call good
    # (window.unjudged) when every place of the fabric is tracked, the worst case
    places = {topo.location({"type": e.type, "id": e.id}) for e in topo.elements}
    blind_host = topo.hosts[-1]
    blind_s: list[float] = []
    held = 0
    clock = ClockTracker(topo.hosts, topo.nic_host_index, refit_s=1.0, horizon_s=20.0)
    clock_s: list[float] = []
    feed_s: list[float] = []  # the tracker's intake of a window's bounds (in lens's window loop)
    ingest_s, analyze_s, named, other, clean_findings, rows = [], [], [], [], 0, 0
    for run_probes, faulty in ((probes, True), (clean, False)):
        t = run_probes["t_send"]
        for k in range(int(t.min()) // w_ns + 1, int(t.max()) // w_ns):
            win = run_probes[(t >= k * w_ns) & (t < (k + 1) * w_ns)]
            batches = agent_batches(topo, flows, win, w_ns)
            ing = Ingest(flows)
            t0 = time.perf_counter()
            for node, b in batches:
                ing.add(node, b, k + 1.0)
            s = ing.close_summary(k * w_ns, (k + 1) * w_ns)
            t1 = time.perf_counter()
            res = an.analyze(s, k * 1.0, k + 1.0, {}, set())
            t2 = time.perf_counter()
            if faulty:  # the clock tracker on the summaries' bounds, as lens feeds it
                clock.add(clock_records(s, flows))
                feed_s.append(time.perf_counter() - t2)
                t3 = time.perf_counter()
                if clock.maybe_refit(k + 1.0):
                    clock_s.append(time.perf_counter() - t3)
            ingest_s.append(t1 - t0)
            analyze_s.append(t2 - t1)  # the window step alone: the clock fit is lens's worker's
            if faulty:
                t3 = time.perf_counter()
                held = len(an.unjudged(an.analyze(s, k * 1.0, k + 1.0, {}, {blind_host}), places))
                blind_s.append(time.perf_counter() - t3)
            rows = s.rows.size
            if faulty:
                named.append(any(f["element"]["id"] == lid for f in res.findings))
                other += [f["element"]["id"] for f in res.findings if f["element"]["id"] != lid]
            else:
                clean_findings += len(res.findings)
    total = np.array(ingest_s) + np.array(analyze_s)
    return {"summary_rows_per_window": rows,
            "summary_ingest_s": {"p50": round(float(np.median(ingest_s)), 3),
                                 "max": round(float(max(ingest_s)), 3)},
            "summary_window_s": {"p50": round(float(np.median(analyze_s)), 3),
                                 "max": round(float(max(analyze_s)), 3),
                                 "each": [round(x, 3) for x in analyze_s]},
            "summary_total_s": {"p50": round(float(np.median(total)), 3),
                                "max": round(float(total.max()), 3)},
            "summary_window_one_blind_s": {"p50": round(float(np.median(blind_s)), 3),
                                           "max": round(float(max(blind_s)), 3)},
            "summary_places_unjudged_one_blind": f"{held}/{len(places)}",
            "summary_windows_naming_the_fault": f"{sum(named)}/{len(named)}",
            "summary_other_findings_with_the_fault": sorted(set(other))[:10],
            "summary_findings_clean": clean_findings,
            "summary_clock": _tracker_error(clock, truth, clock_s),
            "summary_clock_intake_s": {"p50": round(float(np.median(feed_s)), 3),
                                       "max": round(float(max(feed_s)), 3)}}


def _tracker_error(clock, truth, fit_s: list[float]) -> dict:
    """The clock tracker's last fit from the summaries' bounds against the true clocks."""
    model, epoch_ns = clock.fit
    if model is None:
        return {"fits": 0}
    t_rel = 2.0  # seconds after the fit's epoch
    offset, drift = truth
    shift = (epoch_ns - EPOCH_NS) * 1e-9  # the fit's epoch in the simulation's time
    err = clock_error(model, offset + drift * shift, drift, t_rel)
    return {"fits": len(fit_s), "fit_s": round(max(fit_s), 2), "error_us": err}


def one(sus: float, duration: float, sports: int, seed: int) -> dict:
    from fleetctl.lens.window import WindowAnalyzer
    from fleetctl.mesh.plan import plan_probes
    from fleetctl.meshrun.analyze import RunData, analyze

    out: dict = {"sus": sus}
    t0 = time.perf_counter()
    topo = fabric(sus)
    plan = plan_probes(topo, budget_pps=2000.0, k=3, duration=duration)
    out.update(hosts=len(topo.hosts), nics=len(topo.nics), pairs=len(plan.pairs),
               rate_per_pair=round(plan.rate, 3), plan_s=round(time.perf_counter() - t0, 2))
    t0 = time.perf_counter()
    flows, paths = flows_and_paths(topo, plan.pairs, sports, seed)
    out.update(flows=len(flows), paths=len(paths), trace_s=round(time.perf_counter() - t0, 2))
    # the injected fault: the first leaf's cable to the first spine, both directions
    leaf = next(s for s, t in topo.switch_tier.items() if t == 1)
    lid = next(l for l, ends in topo.links.items() if leaf in ends and
               any(topo.switch_tier.get(e) == 2 for e in ends))
    a, b = topo.links[lid]
    cols = [topo.link_dir(lid, a, b), topo.link_dir(lid, b, a)]
    probes, true_offset, true_drift = probes_for(topo, flows, paths, plan.rate / sports, duration,
                                                 cols, 0.02, seed)
    out.update(probes=len(probes), probes_mb=round(probes.nbytes / 1e6, 1), fault=lid)

    clean = probes_for(topo, flows, paths, plan.rate / sports, duration, [], 0.0, seed + 7)[0]
    t0 = time.perf_counter()
    an = WindowAnalyzer(topo, paths, flows)
    out["lens_plan_step_s"] = round(time.perf_counter() - t0, 2)
    times, named, other, clean_findings = [], [], [], 0
    for run_probes, faulty in ((probes, True), (clean, False)):
        t = run_probes["t_send"]
        start = int(t.min())
        for i in range(int(duration)):
            lo, hi = start + i * 10**9, start + (i + 1) * 10**9
            win = run_probes[(t >= lo) & (t < hi)]
            t0 = time.perf_counter()
            res = an.analyze(win, lo * 1e-9, hi * 1e-9, {}, set())
            times.append(time.perf_counter() - t0)
            if faulty:
                named.append(any(f["element"]["id"] == lid for f in res.findings))
                other += [f["element"]["id"] for f in res.findings if f["element"]["id"] != lid]
            else:
                clean_findings += len(res.findings)
    out["lens_window_s"] = {"p50": round(float(np.median(times)), 3),
                            "max": round(float(max(times)), 3)}
    out["lens_windows_naming_the_fault"] = f"{sum(named)}/{len(named)}"
    out["lens_other_findings_with_the_fault"] = sorted(set(other))[:10]
    out["lens_findings_clean"] = clean_findings
    rss_lens = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["rss_after_lens_mb"] = round(rss_lens)
    out.update(summary_windows(topo, flows, paths, probes, clean, lid, (true_offset, true_drift)))
    out["rss_after_lens_summaries_mb"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    run = RunData("bench", "bench", topo, paths, flows, probes, EPOCH_NS,
                  {"window_s": duration, "duration": duration, "rate": plan.rate})
    t0 = time.perf_counter()
    res = analyze(run, "nnls", duration)
    out["audit_analyze_s"] = round(time.perf_counter() - t0, 2)
    net = [f for f in res.findings if f.get("category", "network") == "network"]
    out["audit_findings"] = [f"{f['element']['type']} {f['element'].get('direction') or f['element']['id']}"
                             f" {f['metric']}" for f in net][:10]
    out["audit_found_fault"] = any(f["element"]["id"] == lid for f in net)
    out["clock_error_us"] = clock_error(res.clock, true_offset, true_drift, duration / 2)
    out["clock_pairs_fitted"] = len(res.clock.pairs)
    res = analyze(RunData("bench", "bench", topo, paths, flows, clean, EPOCH_NS,
                          {"window_s": duration, "duration": duration, "rate": plan.rate}),
                  "nnls", duration)
    out["audit_findings_clean"] = len([f for f in res.findings
                                       if f.get("category", "network") == "network"])
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", default="0.5,1,2,4", help="sizes, in scalable units of 256 hosts")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--sports", type=int, default=4, help="traced flows per NIC pair")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.duration, args.sports, args.seed)))
        return
    rows = []
    for sus in (float(x) for x in args.sus.split(",")):
        proc = subprocess.run([sys.executable, __file__, "--one", str(sus), "--duration",
                               str(args.duration), "--sports", str(args.sports), "--seed",
                               str(args.seed)], capture_output=True, text=True)
        if proc.returncode != 0:
            rows.append({"sus": sus, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(json.dumps({"benchmark": "scale_window", "duration_s": args.duration,
                      "sports": args.sports, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
