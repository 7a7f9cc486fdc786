#!/usr/bin/env python3
"""Hang and straggler signals of a real 2-node torch/gloo job on the lab's Slurm: time to name a
slowed rank, time to name a frozen one, and events in a clean stretch. Prints JSON.

    sudo python benchmarks/recovery_signals.py [--trials 5] [--clean-s 300] [--slow-pct 30]
                                               [--inject compute|sigstop]

Each trial: one rank slowed by `slow-pct` % until the watcher names it a straggler; `--inject compute`
(default): the job's rank 1 makes its own compute that much longer (tests/progress_train.py
--slow-file); `--inject sigstop`: the process is stopped from outside for 1 - 1/(1 + pct/100) of
every 20 ms (part of which lands in the collective, adding no compute); then the same
rank frozen (SIGSTOP) until the watcher names the hang; then it runs again and the events close.
Before the trials, `clean-s` seconds of the job running untouched, every event counted (goal 0).
Goals (issue 25): a 30 % slowdown named within 60 s; a hang within its threshold (3x the median
iteration + 10 s) plus the 5 s liveness timeout; 0 events when clean. Takes the lab's session lock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetctl.lab.session import LabSession  # noqa: E402
from fleetctl.lab.topology import MGMT_DEV, LabParams  # noqa: E402
from fleetctl.lens.eventlog import EventLog  # noqa: E402
from fleetctl.recovery.signals import read_ranks  # noqa: E402
from fleetctl.recovery.watch import JobWatcher  # noqa: E402

JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
export MASTER_PORT=$((21000 + SLURM_JOB_ID % 10000))
srun --kill-on-bad-exit=1 "$PY" "$TRAIN" --steps 100000000 --slow-file "$SLOW_FILE" --slow-pct "$SLOW_PCT"
"""


def wait(pred, timeout, step=0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--clean-s", type=float, default=300.0)
    ap.add_argument("--slow-pct", type=float, default=30.0)
    ap.add_argument("--inject", choices=["compute", "sigstop"], default="compute")
    args = ap.parse_args()
    stopped_fraction = 1 - 1 / (1 + args.slow_pct / 100)
    out = {"python": platform.python_version(), "cpus": os.cpu_count(), "slow_pct": args.slow_pct,
           "inject": args.inject, "clean_s": args.clean_s, "trials": []}
    params = LabParams(hosts=2, nics_per_host=1, leaves=1, spines=1, gpus_per_host=0)
    with LabSession(params) as lab, tempfile.TemporaryDirectory() as tmp:
        progress = Path(tmp) / "progress"
        (Path(tmp) / "job.sh").write_text(JOB)
        env = {**lab.command_env(), "PY": sys.executable, "TRAIN": str(REPO / "tests" / "progress_train.py"),
               "LAB_ADDRS": json.dumps(lab.state["addresses"]["mgmt"]), "GLOO_SOCKET_IFNAME": MGMT_DEV,
               "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "FLEETCTL_PROGRESS_DIR": str(progress),
               "SLOW_FILE": str(Path(tmp) / "slow"), "SLOW_PCT": str(args.slow_pct)}
        job = subprocess.run(["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--output=/dev/null",
                              "--export=ALL", str(Path(tmp) / "job.sh")], env=env, capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()
        try:
            ranks = wait(lambda: (lambda r: r if len(r) == 2 and all(x.samples >= 32 for x in r) else None)(
                read_ranks(str(progress), job)[0]), 180)
            if not ranks:
                raise SystemExit("the job did not start")
            watcher = JobWatcher(str(progress), job, EventLog(Path(tmp) / "events.jsonl"))
            clean_end, clean_events = time.monotonic() + args.clean_s, []
            while time.monotonic() < clean_end:
                clean_events += watcher.poll()
                time.sleep(1)
            out["clean_events"] = len(clean_events)  # records: an event's open and close
            out["clean_events_by_metric"] = {
                m: sum(1 for r in clean_events if r["metric"] == m and r["kind"] == "open")
                for m in sorted({r["metric"] for r in clean_events})}
            out["iteration_s"] = statistics.median(r.iteration_s for r in read_ranks(str(progress), job)[0])
            victim = next(r for r in ranks if r.rank == 1)
            for _ in range(args.trials):
                slow_file = Path(tmp) / "slow" if args.inject == "compute" else None
                out["trials"].append(trial(watcher, victim.pid, stopped_fraction, slow_file))
                print(json.dumps(out["trials"][-1]), file=sys.stderr)
        finally:
            subprocess.run(["scancel", job], env=lab.command_env(), capture_output=True, timeout=30)
    for key in ("straggler_s", "hang_s"):
        values = [t[key] for t in out["trials"] if t.get(key) is not None]
        if values:
            out[f"p50_{key}"], out[f"max_{key}"] = round(statistics.median(values), 2), round(max(values), 2)
    print(json.dumps(out, indent=2))


def trial(watcher, pid, stopped_fraction, slow_file=None) -> dict:
    stop = threading.Event()

    def duty():
        if slow_file is not None:  # the job slows its own compute while the file exists
            slow_file.touch()
            stop.wait()
            slow_file.unlink()
            return
        while not stop.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.02 * stopped_fraction)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.02 * (1 - stopped_fraction))
    t0 = time.monotonic()
    thread = threading.Thread(target=duty, daemon=True)
    thread.start()
    got = wait(lambda: [r for r in watcher.poll() if r["metric"] == "straggler" and r["kind"] == "open"], 120, 1)
    straggler_s = time.monotonic() - t0 if got else None
    slower = got[0]["evidence"]["slower_pct"] if got else None
    stop.set()
    thread.join()
    os.kill(pid, signal.SIGCONT)
    wait(lambda: (watcher.poll(), not any(k[0] == "straggler" for k in watcher.open))[1], 120, 1)
    os.kill(pid, signal.SIGSTOP)
    t1 = time.monotonic()
    hang = wait(lambda: [r for r in watcher.poll() if r["metric"] == "hang" and r["kind"] == "open"], 120, 0.5)
    hang_s = time.monotonic() - t1 if hang else None
    os.kill(pid, signal.SIGCONT)
    wait(lambda: (watcher.poll(), not watcher.open)[1], 120, 1)
    return {"straggler_s": round(straggler_s, 2) if straggler_s else None, "slower_pct": slower,
            "hang_s": round(hang_s, 2) if hang_s else None,
            "hang_threshold_s": hang[0]["evidence"]["threshold_s"] if hang else None,
            "hang_named_rank": hang[0]["evidence"].get("rank") if hang else None}


if __name__ == "__main__":
    main()
