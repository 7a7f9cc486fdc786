#!/usr/bin/env python3
"""False findings per clean run, with and without CPU load on every host; prints JSON.

For each host count, one lab of N hosts x 2 NICs (N/4 leaves, 2 spines, clock skew; no Slurm or
sshd: the local transport runs the agents in the hosts' namespaces), taken with the lab lock. No
fault is injected: every network finding is false. Each run is analysed twice on the same records:
as `audit --mesh` does (agents' health counters set overloaded windows aside, significance with
FDR control), and with the health tables removed (what the analysis would say without measurement
integrity). "loaded" runs start busy loops (`python3 -c 'while 1: pass'`) in every host's network
namespace for the whole run; the machine has 2 cores, so the agents really starve.

    python benchmarks/false_findings.py [--hosts 8,16,24] [--runs 2] [--duration 5]
        [--rate RATE] [--busy 2]

--rate: probes/s per pair (default: the plan's, from the probe budget); --busy: loops per host.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import replace

from fleetctl.fanout import get_transport
from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import LabParams
from fleetctl.meshrun.analyze import analyze
from fleetctl.meshrun.probe_run import MeshOptions, probe_run


def busy(lab, per_host: int) -> list[subprocess.Popen]:
    procs = []
    for node in lab.nodes:
        for _ in range(per_host):
            procs.append(subprocess.Popen(["nsenter", f"--net=/run/netns/{lab.netns(node)}",
                                           "python3", "-c", "while 1: pass"],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
    time.sleep(0.5)
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=10)


def one_run(lab, opts: MeshOptions) -> dict:
    with get_transport("local", cluster=lab.cluster) as t:
        res = probe_run(lab.cluster, lab.nodes, t, opts)
    run, a = res.run, res.analysis
    window = opts.window_s if opts.window_s < opts.duration else opts.duration + opts.linger
    bare = analyze(replace(run, health={}), opts.solver, window, opts.statistic)
    net = [f for f in a.findings if f.get("category") != "probe"]
    lost = int((run.probes["lost"] != 0).sum())
    return {
        "network_findings": len(net),
        "probe_warnings": sum(f.get("category") == "probe" for f in a.findings),
        "network_findings_without_integrity": sum(f.get("category") != "probe"
                                                  for f in bare.findings),
        "hosts_overloaded": len(a.integrity.get("hosts_overloaded", [])),
        "probes": int(run.probes.size), "loss_pct": round(100 * lost / max(1, run.probes.size), 3),
        "set_aside_pct": round(100 * a.integrity.get("probes_set_aside", 0)
                               / max(1, run.probes.size), 1),
        "plan": {k: run.parameters["plan"][k] for k in ("design", "pairs", "rate_per_pair_pps",
                                                         "host_pps_max")},
        "elapsed_s": round(res.elapsed_s, 1),
        "named": sorted(f"{f['element']['id']}:{f['metric']}" for f in net)[:10],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", default="8,16,24")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--busy", type=int, default=2)
    a = ap.parse_args()
    out = {"duration_s": a.duration, "rate": a.rate or "plan", "busy_loops_per_host": a.busy,
           "sizes": {}}
    started = time.time()
    for hosts in (int(x) for x in a.hosts.split(",")):
        params = LabParams(hosts=hosts, nics_per_host=2, leaves=max(2, hosts // 4), spines=2,
                           gpus_per_host=0, clock_skew=True, slurm=False, ssh=False)
        size = {}
        with LabSession(params) as lab:
            for load in ("idle", "loaded"):
                runs = []
                for _ in range(a.runs):
                    procs = busy(lab, a.busy) if load == "loaded" else []
                    try:
                        runs.append(one_run(lab, MeshOptions(duration=a.duration, rate=a.rate)))
                    finally:
                        stop(procs)
                    print(json.dumps({"hosts": hosts, "load": load, **runs[-1]}), file=sys.stderr,
                          flush=True)
                size[load] = {
                    "runs": len(runs),
                    "false_network_findings_per_run": sum(r["network_findings"] for r in runs)
                    / len(runs),
                    "without_integrity_per_run": sum(r["network_findings_without_integrity"]
                                                     for r in runs) / len(runs),
                    "probe_warnings_per_run": sum(r["probe_warnings"] for r in runs) / len(runs),
                    "detail": runs}
        out["sizes"][str(hosts)] = size
    out["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
