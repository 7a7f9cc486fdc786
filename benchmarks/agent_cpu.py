#!/usr/bin/env python3
"""Probe agent CPU per 1,000 probes/s, old (wire v1, benchmarks/legacy/agent_v1.py) beside new
(fleetctl.mesh.agent), in one run, on loopback; prints JSON.

For each agent and offered rate, two real agent processes: A at 127.0.0.1 sends one NIC pair's
probes (8 source ports) to B at 127.0.0.2, which only answers. CPU of each process is user +
system time from wait4, less that agent's near-idle run (start-up, idle loop), divided by the run
length and the probes/s actually sent, in % of one core per 1,000 probes/s. Loopback charges the
kernel's delivery of a datagram to the process that sent it, so both sides include their share of
the network stack, as on a real host. Also: loss (sent but not echoed), skipped sends, and for the
new agent its own health summary (late p99, socket overflows).

    python benchmarks/agent_cpu.py [--rates 1000,2000,5000] [--duration 5] [--repeat 1]

The machine's CPUs may be shared with other work: the figures are upper bounds; the old/new
ratio within one run is the robust number.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENTS = {"old": [sys.executable, str(ROOT / "benchmarks" / "legacy" / "agent_v1.py")],
          "new": [sys.executable, "-m", "fleetctl.mesh.agent"]}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1] % 20000 + 40000


TICK = {"tick_s": None}  # --tick: the new agent's shortest loop turn (None: its default)


def one(which: str, rate: float, duration: float) -> dict:
    port = free_port()
    cfg = {"run_id": "bench", "key": os.urandom(32).hex(), "port": port,
           "sports": [port + 1 + j for j in range(8)], "rate": rate, "duration": duration,
           "linger": 0.5, "start_at": time.time() + 0.6, "max_records": 5_000_000,
           "nodes": {"a": {"nics": [[0, "127.0.0.1", ""]]}, "b": {"nics": [[1, "127.0.0.2", ""]]}},
           "pairs": [[0, 0, 1, "127.0.0.2"]]}
    if TICK["tick_s"] is not None:
        cfg["tick_s"] = TICK["tick_s"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = {}
    for node in "ab":
        p = subprocess.Popen(AGENTS[which], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=dict(env, FLEETCTL_NODE=node), text=True, cwd=ROOT)
        p.stdin.write(json.dumps(cfg))
        p.stdin.close()
        procs[node] = p
    out = {}
    for node, p in procs.items():
        doc = json.loads(p.stdout.read())
        _pid, _status, ru = os.wait4(p.pid, 0)
        out[node] = (doc, ru.ru_utime + ru.ru_stime)
    (da, cpu_a), (db, cpu_b) = out["a"], out["b"]
    ca, cb = da["counters"], db["counters"]
    row = {"agent": which, "offered_per_s": rate, "sent_per_s": round(ca["sent"] / duration),
           "echoed_per_s": round(ca["echoes"] / duration), "skipped": ca["skipped"],
           "loss_pct": round(100 * (1 - ca["echoes"] / ca["sent"]), 3) if ca["sent"] else None,
           "cpu_s_sender": round(cpu_a, 3), "cpu_s_responder": round(cpu_b, 3)}
    if "health" in da:
        ha, hb = da["health"]["run"], db["health"]["run"]
        row["health"] = {"sender_late_p99_us_worst_window": ha["late_p99_us_worst_window"],
                         "sender_rxq_ovfl": ha["rxq_ovfl"], "responder_rxq_ovfl": hb["rxq_ovfl"],
                         "udp_rcvbuf_errors": hb["udp_rcvbuf_errors"]}
    return row


def per_k(row: dict, idle: dict, duration: float, side: str) -> float:
    used = row[f"cpu_s_{side}"] - idle[f"cpu_s_{side}"]
    return round(100 * used / duration * 1000.0 / max(1.0, row["sent_per_s"]), 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="1000,2000,5000")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the lowest CPU is kept")
    ap.add_argument("--tick", type=float, default=None, help="new agent's tick_s")
    a = ap.parse_args()
    TICK["tick_s"] = a.tick
    rates = [float(r) for r in a.rates.split(",")]
    result = {"duration_s": a.duration, "tick_s": a.tick,
              "unit": "% of one core per 1,000 probes/s", "goal": 1.0, "idle": {}, "rows": []}
    for which in AGENTS:
        result["idle"][which] = min((one(which, 1.0, a.duration) for _ in range(a.repeat)),
                                    key=lambda r: r["cpu_s_sender"] + r["cpu_s_responder"])
    for rate in rates:
        for which in AGENTS:  # interleaved: old and new see the same background load
            best = min((one(which, rate, a.duration) for _ in range(a.repeat)),
                       key=lambda r: r["cpu_s_sender"] + r["cpu_s_responder"])
            idle = result["idle"][which]
            best["cpu_pct_per_1000_per_s_sender"] = per_k(best, idle, a.duration, "sender")
            best["cpu_pct_per_1000_per_s_responder"] = per_k(best, idle, a.duration, "responder")
            result["rows"].append(best)
    summary = {}
    for which in AGENTS:
        rows = [r for r in result["rows"] if r["agent"] == which]
        summary[which] = {side: round(sum(r[f"cpu_pct_per_1000_per_s_{side}"] for r in rows)
                                      / len(rows), 3) for side in ("sender", "responder")}
    result["mean_over_rates"] = summary
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
