#!/usr/bin/env python3
"""What `fleetctl run`'s controller costs as a job grows: one `Controller.poll()` (it runs every 0.1 s in
task 0's launcher) against a real TCPStore, with every slot said hello and beating, no trouble. Prints
JSON.

    python benchmarks/recovery_controller.py [--sizes 64,512,2048] [--polls 20]

The poll reads three counters (exits, dones, this generation's reports: the keys behind them are read
only when one moved) and every slot's heartbeat counter in one batched read (`multi_get`): a few round
trips whatever the size; what still grows with the slots is the batch's bytes and the loop over them.
Every 10 s (and when rank 0 stalls) a poll also reads and judges every rank's progress, one batched
read too: `poll_with_full_look_s_p50`.
(Before 2026-12-04 it read each slot's keys one round trip each: ~170 us a slot.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch.distributed as dist  # noqa: E402

from fleetctl.recovery import control  # noqa: E402


def one_size(slots: int, polls: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    active = slots - max(1, slots // 64)
    ctl = control.Controller(store, active, slots)
    for slot in range(slots):
        store.set(control.hello_key(slot), control.encode({"node": f"n{slot}", "address": "127.0.0.1", "port": 1}))
    ctl.poll()  # plan 0
    times = []
    for _ in range(polls):
        for slot in range(slots):
            store.add(control.beat_key(slot), 1)
        t0 = time.perf_counter()
        assert ctl.poll() is None
        times.append(time.perf_counter() - t0)
    now = time.time()  # every training rank's progress sent: the look every 10 s (stragglers)
    for slot in range(active):
        store.set(control.progress_key(slot), control.encode(
            {"v": 1, "gen": 0, "rank": slot, "node": f"n{slot}", "pid": 1, "iteration": 100, "time": now,
             "progress_time": now, "phase": "compute", "iteration_s": 0.1, "compute_s": 0.05, "samples": 32}))
    looks = []
    for _ in range(max(3, polls // 4)):
        ctl._next_look = ctl._next_full_look = 0.0
        t0 = time.perf_counter()
        assert ctl.poll() is None and not ctl.signals
        looks.append(time.perf_counter() - t0)
    return {"slots": slots, "poll_s_p50": round(statistics.median(times), 4), "poll_s_max": round(max(times), 4),
            "us_per_slot": round(statistics.median(times) / slots * 1e6, 1),
            "poll_with_full_look_s_p50": round(statistics.median(looks), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,512,2048,8192")
    parser.add_argument("--polls", type=int, default=20)
    args = parser.parse_args()
    rows = [one_size(int(n), args.polls) for n in args.sizes.split(",")]
    print(json.dumps({"benchmark": "recovery_controller", "when": time.strftime("%Y-%m-%d"), "sizes": rows},
                     indent=2))


if __name__ == "__main__":
    main()
