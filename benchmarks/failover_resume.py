#!/usr/bin/env python3
"""libnccl-net-fleet.so: resume time after a link goes down, and throughput against plain TCP; prints JSON.

Runs on a private testbed (two network namespaces joined by two veth pairs, eth0/eth1 on each side;
needs root), so it does not hold the lab lock. One sender -> receiver connection of the plugin carries
a stream of randomly sized messages (16 B .. --max-size, log-uniform), posted NCCL-style (8 in flight,
strict order, polling test), every byte checked by the receiver. Each trial waits a random 50-300 ms,
takes one randomly chosen link down (for at least 0.5 s) on a randomly chosen side (the sender's own NIC: seen through
netlink; the receiver's NIC: reported by the receiver on the surviving path), waits for the transfer
to resume, brings the link back and waits for the fail-back before the next trial.

1,000 trials (`--trials 1000`) take about 35 minutes on a loaded 2-core machine; progress goes to stderr.

Resume time of a trial: the longest time without any completed (acknowledged) send between the start of
the fault command and the link's return, i.e. the stall the fault caused: detection plus replay. (A
healthy stream completes a message every fraction of a millisecond.) Goal: p99 <= 500 ms, 0 corrupt, 0 duplicated, 0 lost (the issue asks for 1,000 trials).

Black-hole trials (--blackhole-trials): the NIC keeps its link but nftables drops everything through it,
so no netlink event: detection rests on TCP_USER_TIMEOUT (FLEET_NET_TIMEOUT_MS) of unacknowledged bytes.

Throughput: 512 KiB messages for --tput-seconds each, over eth0 only: the plugin (one path) and a plain
TCP stream carrying the same messages; also the plugin striped over both paths. Goal: >= 90 % of plain.

    python benchmarks/failover_resume.py [--trials 200] [--holddown-ms 300] [--tput-seconds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nccl_plugin" / "tests"))
import fleetnet  # noqa: E402
from fleetctl.failover.harness import pct, read_trace, resume_ms  # noqa: E402


def count_events(tb: fleetnet.Testbed, side: str, event: str) -> int:
    return sum(1 for e in tb.events(side) if e["event"] == event)


def wait_for(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def failover_trials(tb: fleetnet.Testbed, trials: int, holddown_ms: int, max_size: int, seed: int,
                    blackhole: bool = False, detail: bool = False, hold_s: float = 0.5) -> dict:
    rng = random.Random(seed)
    stop = tb.tmp / "stop"
    recv, send, files = tb.pair(12, max_size=max_size, seed=seed, trace=True, stop_file=stop,
                                extra_env={"FLEET_NET_HOLDDOWN_MS": str(holddown_ms)})
    faults, skipped = [], 0
    previous_back = True
    try:
        if not wait_for(lambda: fleetnet.progress_bytes(files["progress"]) > 0, 30):
            raise RuntimeError("the transfer did not start")
        for i in range(trials):
            time.sleep(rng.uniform(0.05, 0.3))
            side, link = rng.choice("ab"), rng.randrange(tb.links)
            failbacks = count_events(tb, "a", "failback")
            before = fleetnet.progress_bytes(files["progress"])
            t_down = tb.set_blackhole(side, link, True) if blackhole else tb.set_link(side, link, False)
            # resumed = the sender's completions moved on past what was in flight
            wait_for(lambda: fleetnet.progress_bytes(files["progress"]) > before + 8 * max_size, 5)
            # hold the fault past the ack timeout: a shorter black hole is a blip TCP absorbs
            time.sleep(max(0.05, hold_s - (time.monotonic() - t_down)))
            t_up = tb.set_blackhole(side, link, False) if blackhole else tb.set_link(side, link, True)
            back = wait_for(lambda: count_events(tb, "a", "failback") > failbacks, 20)
            skipped += not back
            # a trial that started while the previous path was still out measures nothing
            faults.append({"trial": i, "side": side, "link": link, "t_down_ns": int(t_down * 1e9),
                           "t_up_ns": int(t_up * 1e9), "valid": previous_back, "failback_seen": back})
            previous_back = back
            if (i + 1) % 100 == 0:  # a 1,000-trial run takes about half an hour on a loaded machine
                print(f"failover_resume: {i + 1}/{trials} trials{' (black hole)' if blackhole else ''}",
                      file=sys.stderr, flush=True)
    finally:
        stop.touch()
        (rc_r, res_r, err_r), (rc_s, res_s, err_s) = fleetnet.finish([recv, send], timeout=60)
    trace = read_trace(files["trace"])
    resumes = []
    for f in faults:
        f["resume_ms"] = resume_ms(trace, f["t_down_ns"], f["t_up_ns"])
        if f["valid"]:
            resumes.append(f["resume_ms"])
    recv_res = res_r[0] if res_r else {}
    send_res = res_s[0] if res_s else {}
    events_a = tb.events("a")
    return {
        "trials": len(faults), "measured": len(resumes), "failback_not_seen_in_20s": skipped,
        "excluded_trials": sum(1 for f in faults if not f["valid"]),
        "resume_ms": {"p50": pct(resumes, 50), "p90": pct(resumes, 90), "p99": pct(resumes, 99),
                      "max": max(resumes) if resumes else None,
                      "mean": statistics.fmean(resumes) if resumes else None},
        "goal_p99_ms": 500,
        "integrity": {"messages_sent": send_res.get("messages"), "messages_received": recv_res.get("messages"),
                      "bytes_checked": recv_res.get("bytes"), "corrupt": recv_res.get("corrupt"),
                      "duplicated": recv_res.get("duplicated"),
                      "lost": (send_res.get("messages", 0) - recv_res.get("messages", 0)) + recv_res.get("lost", 0),
                      "sender_error": send_res.get("error"), "receiver_error": recv_res.get("error"),
                      "exit_codes": [rc_s, rc_r]},
        "sender_events": {k: sum(1 for e in events_a if e["event"] == k)
                          for k in ("path_down", "replay", "failback", "conn_failed")},
        "replayed_bytes": sum(e["value"] for e in events_a if e["event"] == "replay"),
        "trials_detail": [{k: v for k, v in f.items() if not k.startswith("t_")} for f in faults] if detail else None,
        "stderr_tail": (err_s[-400:] + err_r[-400:]) if rc_s or rc_r else "",
    }


def throughput(tb: fleetnet.Testbed, seconds: float) -> dict:
    size = 512 * 1024
    out = {}
    for name, kwargs in (("plain_tcp_eth0", {"plain": True}), ("fleet_eth0", {"paths": 1}),
                         ("fleet_eth0_eth1", {})):
        recv, send, _ = tb.pair(12, seconds=seconds, max_size=size, min_size=size, **kwargs)
        (rc_r, res_r, _), (rc_s, res_s, _) = fleetnet.finish([recv, send], timeout=seconds + 60)
        ok = rc_r == 0 and rc_s == 0 and res_r and not res_r[0]["corrupt"]
        out[name] = {"gbps": res_r[0]["gbps"] if res_r else None, "ok": bool(ok)}
    plain, one = out["plain_tcp_eth0"]["gbps"], out["fleet_eth0"]["gbps"]
    out["fleet_vs_plain_same_path"] = round(one / plain, 3) if plain and one else None
    out["goal_ratio"] = 0.9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--holddown-ms", type=int, default=300,
                    help="fail-back hold-down for the run (plugin default 1000; shorter = more trials per minute)")
    ap.add_argument("--max-size", type=int, default=1 << 20)
    ap.add_argument("--tput-seconds", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--details", action="store_true", help="include every trial")
    ap.add_argument("--blackhole-trials", type=int, default=20,
                    help="trials where a NIC silently drops everything (nftables) instead of losing its link")
    args = ap.parse_args()
    fleetnet.build()
    started = time.monotonic()
    with fleetnet.Testbed(f"fb{random.randrange(10000)}") as tb:
        tput = throughput(tb, args.tput_seconds)
        fo = failover_trials(tb, args.trials, args.holddown_ms, args.max_size, args.seed, detail=args.details)
    with fleetnet.Testbed(f"fh{random.randrange(10000)}") as tb:
        bh = (failover_trials(tb, args.blackhole_trials, args.holddown_ms, args.max_size, args.seed + 1,
                              blackhole=True, detail=args.details) if args.blackhole_trials else None)
    report = {"benchmark": "failover_resume", "testbed": "2 netns, 2 veth pairs", "failover": fo,
              "blackhole": bh,
              "throughput": tput, "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
