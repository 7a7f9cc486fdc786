#!/usr/bin/env python3
"""Lab up/down times at 4 and 16 hosts, srun start-up, and the RTT floor between lab hosts. Prints JSON.

    sudo python benchmarks/lab_updown.py [--repeat 3] [--pings 2000]

Takes the lab's session lock (waits for running test sessions) and tears down any lab that is up.
RTT: UDP echo between first and last host (leaf -> spine -> leaf, 3 routers) and between two hosts of
one leaf (1 router), busy-polling (the floor) and blocking (what a normal socket sees).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from fleetctl.lab import lifecycle, state
from fleetctl.lab.topology import LabParams

SIZES = {"4_hosts": LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2),
         "16_hosts": LabParams(hosts=16, nics_per_host=2, leaves=4, spines=2)}


def _nsenter(netns: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}"]


def rtt(st: dict, src: str, dst: str, pings: int, blocking: bool) -> dict:
    nics, netns = st["addresses"]["nics"], st["addresses"]["netns"]
    echo = subprocess.Popen(_nsenter(netns[dst.split(":")[0]]) + [
        sys.executable, "-m", "fleetctl.lab.traffic", "echo", "--bind", nics[dst], "--port", "45100",
        "--timeout", "5"], stdout=subprocess.PIPE, text=True)
    try:
        echo.stdout.readline()
        cmd = _nsenter(netns[src.split(":")[0]]) + [
            sys.executable, "-m", "fleetctl.lab.traffic", "ping", "--src", nics[src], "--dst", nics[dst],
            "--dport", "45100", "--count", str(pings)] + (["--blocking"] if blocking else [])
        out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    finally:
        echo.kill()
        echo.wait()
    return {"pair": f"{src} -> {dst}", "mode": "blocking" if blocking else "busy-poll", **out["rtt_us"],
            "lost": out["lost"]}


def srun_seconds(st: dict, nodes: int) -> float:
    env = {**os.environ, "SLURM_CONF": st["slurm"]["conf"]}
    t0 = time.monotonic()
    subprocess.run(["srun", f"-N{nodes}", "hostname"], env=env, check=True, capture_output=True, timeout=120)
    return round(time.monotonic() - t0, 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pings", type=int, default=2000)
    a = ap.parse_args()
    os.environ["FLEETCTL_LAB_SESSION"] = "1"
    machine = {"cpus": os.cpu_count(), "kernel": platform.release()}
    result: dict = {"benchmark": "lab_updown", "machine": machine, "repeat": a.repeat, "sizes": {}}
    with state.locked(state.SESSION_LOCK, timeout=3600, what="a test session"):
        lifecycle.down()
        for name, params in SIZES.items():
            ups, downs, sruns = [], [], []
            for i in range(a.repeat):
                t0 = time.monotonic()
                st = lifecycle.up(params)
                ups.append(time.monotonic() - t0)
                sruns.append(srun_seconds(st, params.hosts))
                if i == 0 and name == "4_hosts":
                    pairs = [("node1:eth0", f"node{params.hosts}:eth0"), ("node1:eth0", "node2:eth0")]
                    result["rtt_us"] = [rtt(st, src, dst, a.pings, blocking)
                                        for src, dst in pairs for blocking in (False, True)]
                t0 = time.monotonic()
                lifecycle.down()
                downs.append(time.monotonic() - t0)
            result["sizes"][name] = {
                "params": params.to_dict(),
                "up_s": {"median": round(statistics.median(ups), 3), "max": round(max(ups), 3)},
                "down_s": {"median": round(statistics.median(downs), 3), "max": round(max(downs), 3)},
                f"srun_N{params.hosts}_hostname_s": {"median": round(statistics.median(sruns), 3)},
            }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
