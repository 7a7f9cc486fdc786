#!/usr/bin/env python3
"""NCCL all_reduce between two ranks through libnccl-net-fleet.so, one NIC taken down mid-run; prints JSON.

For a machine with a GPU (one is enough): two ranks, each in its own network namespace joined by three
veth pairs (eth0 and eth1 carry NCCL through the fleet plugin, eth2 carries the bootstrap and the
torch.distributed store, never faulted). Each rank gets its own NCCL_HOSTID, so NCCL treats the two
as separate hosts: no duplicate-GPU refusal when both use GPU 0, no shared memory or P2P path, all
traffic over the network plugin (NCCL_NET=fleet: no silent fallback). After --fault-after seconds the
sender side's eth1 goes down for --hold seconds, then comes back. Every all_reduce result is compared
with the exact expected tensor (integers in float32), and the run reports mismatches, the longest
stall, algorithm bandwidth before/during/after the fault and the plugin's events (path_down,
replay, failback).

    sudo python benchmarks/device/nccl_failover_allreduce.py [--seconds 20] [--size-mb 64]

Needs root (namespaces), iproute2, torch with CUDA, and the plugin built (make -C nccl_plugin).
Without a GPU it prints {"ok": false, "error": ...} and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIB_DIR = REPO / "nccl_plugin" / "build"


def fail(message: str, code: int = 2) -> None:
    print(json.dumps({"benchmark": "nccl_failover_allreduce", "ok": False, "error": message}, indent=2))
    sys.exit(code)


def preflight() -> None:
    try:
        import torch
    except ImportError:
        fail("torch is not installed (a CUDA build is needed)")
    if not torch.cuda.is_available():
        fail(f"no CUDA GPU (torch {torch.__version__}, CUDA build {torch.version.cuda}): this script needs one")
    if not torch.distributed.is_nccl_available():
        fail("this torch has no NCCL backend")
    if os.geteuid() != 0:
        fail("needs root for the network namespaces")
    if not (LIB_DIR / "libnccl-net-fleet.so").is_file():
        subprocess.run(["make", "-s", "-C", str(REPO / "nccl_plugin")], check=True)


# ---------------------------------------------------------------- one rank
def rank_main(args) -> None:
    import torch
    import torch.distributed as dist

    rank = args.rank
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://{args.master}:29517", rank=rank, world_size=2,
                            timeout=__import__("datetime").timedelta(seconds=120))
    n = args.size_mb * (1 << 20) // 4
    base = (torch.arange(n, device="cuda", dtype=torch.int64) % 4096).to(torch.float32)
    mismatches, done, times = 0, 0, []
    progress = Path(args.progress)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        k = done % 7
        x = base * (rank + 1) + k
        dist.all_reduce(x)
        torch.cuda.synchronize()
        times.append(time.monotonic_ns())
        if not torch.equal(x, base * 3 + 2 * k):  # (1 + 2) * base + k + k: exact in float32
            mismatches += 1
        done += 1
        if done % 4 == 0:
            progress.write_text(f"{done} {time.monotonic_ns()}\n")
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "iterations": done, "mismatches": mismatches, "done_ns": times,
                      "bytes_per_iter": n * 4, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}))


# ---------------------------------------------------------------- the parent
def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def gbps(times: list[int], size: int, start: int, stop: int) -> float | None:
    n = sum(1 for t in times if start <= t < stop)
    return round(n * size / ((stop - start) / 1e9) / 1e9, 3) if stop > start else None


def parent(args) -> None:
    preflight()
    sys.path.insert(0, str(REPO / "nccl_plugin" / "tests"))
    sys.path.insert(0, str(REPO))
    import fleetnet
    from fleetctl.failover.harness import read_events

    with fleetnet.Testbed(f"nd{os.getpid() % 10000}", links=3) as tb:
        procs = []
        for r, side in ((0, "b"), (1, "a")):
            env = {**os.environ, "NCCL_NET_PLUGIN": "fleet", "NCCL_NET": "fleet",
                   "LD_LIBRARY_PATH": f"{LIB_DIR}:{os.environ.get('LD_LIBRARY_PATH', '')}",
                   "FLEET_NET_IFACES": ",".join(tb.addr[side][:2]), "FLEET_NET_HOLDDOWN_MS": "1000",
                   "FLEET_NET_LOG": str(tb.tmp / f"events-{side}.jsonl"),
                   "FLEET_NET_COUNTERS_DIR": str(tb.tmp / f"counters-{side}"),
                   "NCCL_HOSTID": f"fleet-device-rank{r}", "NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1",
                   "NCCL_SOCKET_IFNAME": "eth2", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                   "NCCL_DEBUG_FILE": str(tb.tmp / f"nccl-rank{r}.log")}
            argv = [sys.executable, __file__, "--rank", str(r), "--master", tb.addr["b"][2],
                    "--seconds", str(args.seconds), "--size-mb", str(args.size_mb),
                    "--progress", str(tb.tmp / f"progress-{r}")]
            procs.append(tb.popen(side, argv, env))
        progress = tb.tmp / "progress-1"
        deadline = time.monotonic() + 120
        while not progress.exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                outs = [p.communicate(timeout=30) for p in procs]
                fail("the ranks did not start: " + " | ".join(e[-1500:] for _, e in outs), 1)
            time.sleep(0.1)
        time.sleep(args.fault_after)
        t_down = time.monotonic_ns()
        tb.set_link("a", 1, False)
        time.sleep(args.hold)
        t_up = time.monotonic_ns()
        tb.set_link("a", 1, True)
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=args.seconds + 180))
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate())
        results = []
        for (so, se), p in zip(outs, procs):
            lines = [json.loads(line) for line in so.splitlines() if line.startswith("{")]
            results.append({"exit": p.returncode, **(lines[0] if lines else {"stderr": se[-2000:]})})
        events = {side: read_events(tb.tmp / f"events-{side}.jsonl") for side in ("a", "b")}
        logs = "".join((tb.tmp / f"nccl-rank{r}.log").read_text(errors="replace")
                       for r in (0, 1) if (tb.tmp / f"nccl-rank{r}.log").exists())
    r1 = results[1]
    times = r1.get("done_ns", [])
    size = r1.get("bytes_per_iter", 0)
    window = int(args.fault_after * 1e9)
    stall = max((b - a for a, b in zip(times, times[1:]) if b >= t_down and a <= t_up), default=None)
    summary = {
        "benchmark": "nccl_failover_allreduce", "nccl": r1.get("nccl"),
        "plugin_used": "fleet" in logs and "Using network fleet" in logs,
        "iterations": [r.get("iterations") for r in results],
        "mismatches": [r.get("mismatches") for r in results],
        "exit_codes": [r["exit"] for r in results],
        "max_stall_ms_around_fault": round(stall / 1e6, 1) if stall else None,
        "algbw_GBps": {"before": gbps(times, size, t_down - window, t_down), "during": gbps(times, size, t_down, t_up),
                       "after": gbps(times, size, t_up + int(1.5e9), t_up + int(1.5e9) + window)},
        "plugin_events": {side: {k: sum(1 for e in ev if e["event"] == k)
                                 for k in ("path_down", "replay", "failback", "conn_failed")}
                          for side, ev in events.items()},
        "fault": {"link": "eth1 of rank 1's namespace", "after_s": args.fault_after, "hold_s": args.hold},
    }
    summary["ok"] = (all(r["exit"] == 0 for r in results) and summary["mismatches"] == [0, 0]
                     and summary["plugin_used"] and summary["plugin_events"]["a"]["path_down"] > 0
                     and summary["plugin_events"]["a"]["failback"] > 0 and (summary["algbw_GBps"]["during"] or 0) > 0)
    if not summary["plugin_used"]:
        summary["nccl_log_tail"] = logs[-3000:]
    print(json.dumps(summary, indent=2))
    sys.exit(0 if summary["ok"] else 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the all_reduce loop per rank")
    ap.add_argument("--size-mb", type=int, default=64, help="all_reduce size in MiB")
    ap.add_argument("--fault-after", type=float, default=6.0, help="seconds of running before eth1 goes down")
    ap.add_argument("--hold", type=float, default=3.0, help="seconds eth1 stays down")
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--master", default="", help=argparse.SUPPRESS)
    ap.add_argument("--progress", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is None:
        parent(args)
    else:
        rank_main(args)


if __name__ == "__main__":
    main()
