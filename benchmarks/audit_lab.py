#!/usr/bin/env python3
"""Audit figures on the emulated lab. Prints JSON.

    sudo python benchmarks/audit_lab.py [--hosts 16] [--repeat 3] [--prolog-runs 50]

- `fleetctl audit --level standard` across all lab hosts over ssh (wall time, goal <= 5 s at 16 hosts);
- the Slurm Prolog as slurmd runs it: the installed wrapper (`fleetctl-prolog`) executed in a node's
  namespaces with SLURMD_NODENAME set, interpreter start included (goal p50 <= 300 ms, p99 <= 1 s);
- `fleetctl audit --local --level quick` for comparison.
Takes the lab's session lock (waits for running test sessions).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import LabParams


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def stats(values: list[float]) -> dict:
    return {"n": len(values), "p50_s": round(statistics.median(values), 4), "p99_s": round(pct(values, 99), 4),
            "min_s": round(min(values), 4), "max_s": round(max(values), 4)}


def timed(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prolog-runs", type=int, default=50)
    args = parser.parse_args()
    leaves = 4 if args.hosts > 8 else 2
    params = LabParams(hosts=args.hosts, nics_per_host=2, leaves=leaves, spines=2, gpus_per_host=8)
    fleetctl = [sys.executable, "-m", "fleetctl"]
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "lab": params.to_dict()}
    with LabSession(params) as lab, tempfile.TemporaryDirectory() as tmp:
        env = lab.command_env()
        walls, summary = [], None
        for _ in range(args.repeat):
            wall, proc = timed(fleetctl + ["audit", "--level", "standard", "--since", "1s", "--format", "json"], env)
            walls.append(wall)
            summary = json.loads(proc.stdout)["summary"]
        out["audit_standard"] = {"hosts": args.hosts, "transport": "ssh", **stats(walls),
                                 "last_summary": summary, "goal_s": 5.0}

        hooks = Path(tmp) / "hooks"
        subprocess.run(fleetctl + ["hook", "install", str(hooks), "--log", str(Path(tmp) / "hooks.log")],
                       env=env, check=True, capture_output=True)
        node = lab.nodes[0]
        prefix = ["nsenter", f"--net=/run/netns/{lab.netns(node)}"]
        if lab.state.get("uts", {}).get(node):
            prefix.append(f"--uts={lab.state['uts'][node]}")
        hook_env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "1"}  # slurmd gives hooks no PATH
        prolog, local = [], []
        for _ in range(args.prolog_runs):
            wall, proc = timed(prefix + [str(hooks / "fleetctl-prolog")], hook_env)
            if proc.returncode != 0:
                raise SystemExit(f"prolog failed: {proc.stderr}")
            prolog.append(wall)
        for _ in range(max(10, args.prolog_runs // 2)):
            wall, _proc = timed(prefix + fleetctl + ["audit", "--local", "--node", node, "--level", "quick",
                                                     "--since", "1s", "--format", "json"], env)
            local.append(wall)
        out["prolog_hook"] = {"what": "installed wrapper -> fleetctl hook prolog, in node namespaces",
                              **stats(prolog), "goal_p50_s": 0.3, "goal_p99_s": 1.0}
        out["audit_local_quick"] = stats(local)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
