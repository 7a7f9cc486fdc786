#!/usr/bin/env python3
"""Probe agent throughput and CPU cost on loopback; prints JSON.

Two real agent processes (python -m fleetctl.mesh.agent): A at 127.0.0.1 probes B at 127.0.0.2
(one NIC pair, 8 source ports); B only answers. For each offered rate: probes sent and echoed
per second, probes skipped (the agent fell behind and skipped ahead), and CPU time of each process
from wait4 (user + system), less a near-idle run's, per 1,000 probes/s. "Sustained" = the highest
offered rate at which >= 98 % were sent and >= 98 % of those echoed.

    python benchmarks/probe_agent.py [--rates 1000,2000,5000,10000,20000] [--duration 3]

CPU on this machine is shared (2 cores, other work running): take the figures as upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1] % 20000 + 40000


def one(rate: float, duration: float) -> dict:
    port = free_port()
    cfg = {"run_id": "bench", "key": os.urandom(32).hex(), "port": port,
           "sports": [port + 1 + j for j in range(8)], "rate": rate, "duration": duration,
           "linger": 0.5, "start_at": time.time() + 0.5, "max_records": 5_000_000,
           "nodes": {"a": {"nics": [[0, "127.0.0.1", ""]]}, "b": {"nics": [[1, "127.0.0.2", ""]]}},
           "pairs": [[0, 0, 1, "127.0.0.2"]]}
    procs = {}
    for node in "ab":
        p = subprocess.Popen([sys.executable, "-m", "fleetctl.mesh.agent"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=dict(os.environ, FLEETCTL_NODE=node),
                             text=True)
        p.stdin.write(json.dumps(cfg))
        p.stdin.close()
        procs[node] = p
    out = {}
    for node, p in procs.items():
        doc = json.loads(p.stdout.read())
        _pid, _status, ru = os.wait4(p.pid, 0)
        out[node] = (doc["counters"], ru.ru_utime + ru.ru_stime)
    (ca, cpu_a), (cb, cpu_b) = out["a"], out["b"]
    return {"offered_per_s": rate, "sent_per_s": round(ca["sent"] / duration),
            "echoed_per_s": round(ca["echoes"] / duration), "skipped": ca["skipped"],
            "cpu_s_sender": round(cpu_a, 3), "cpu_s_responder": round(cpu_b, 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="1000,2000,5000,10000,20000,40000")
    ap.add_argument("--duration", type=float, default=3.0)
    a = ap.parse_args()
    idle = one(1.0, a.duration)  # start-up and the idle loop: subtracted below
    rows = []
    for rate in (float(r) for r in a.rates.split(",")):
        r = one(rate, a.duration)
        per_k = 1000.0 / max(1.0, r["sent_per_s"])
        r["cpu_pct_per_1000_per_s_sender"] = round(
            100 * (r["cpu_s_sender"] - idle["cpu_s_sender"]) / a.duration * per_k, 2)
        r["cpu_pct_per_1000_per_s_responder"] = round(
            100 * (r["cpu_s_responder"] - idle["cpu_s_responder"]) / a.duration * per_k, 2)
        rows.append(r)
    ok = [r["offered_per_s"] for r in rows
          if r["sent_per_s"] >= 0.98 * r["offered_per_s"] and r["echoed_per_s"] >= 0.98 *
          r["sent_per_s"]]
    print(json.dumps({"duration_s": a.duration, "sockets": "1 per source port (8) + 1 responder",
                      "idle": idle, "rates": rows,
                      "sustained_probes_per_s": max(ok) if ok else None}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
