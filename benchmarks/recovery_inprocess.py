#!/usr/bin/env python3
"""No-rollback recovery (`fleetctl run`): how fast a standby takes a SIGKILLed rank's place, how much
progress is lost, whether the result stays bit-identical, and what the peer replicas cost the loop.
Prints JSON.

    python benchmarks/recovery_inprocess.py [--trials 10] [--migrations 5] [--ranks 4] [--steps 300]
                                            [--sleep 0.02] [--widths 64,1024,4096]

Real launchers (one per task, as `srun fleetctl run` starts them), the control store, the replica
servers and gloo groups, on localhost (this machine has no second host; tests/integration/
test_run_lab.py runs the same across the lab's nodes under Slurm). The job is tests/resilient_train.py
(`--sleep` stands in for compute). Each trial kills one training process (a random slot, slot 0
included) at a random iteration, with 1 standby. Per trial:
- resumed_s: from the kill to every rank's first finished iteration after the restart;
- decided_s: from the controller's first sign of trouble to the new plan;
- lost_iterations: the furthest iteration any rank had finished minus the one all resumed from;
- bit_identical: the final parameters' SHA-256 against a run without the fault.
Each migration (`fleetctl migrate` of a random training rank's node, at a random iteration):
- paused_s: the gap in training, from the last step before the move to every rank's first after it;
- migrate_s: what `fleetctl migrate` took, from its request to the new plan;
- lost_iterations (goal 0) and bit_identical as above.
Replica cost (no fault, K = 1, one replica every iteration): the loop's blocked time (the state's
clone plus any wait for the previous push) as a share of its iteration time, per model width.
Replica cadence (`--state-mbs`, no fault): the same job carrying more state (a buffer replicated with
the parameters), at K = 1 and with `every="auto"` (K agreed from the replica's cost, within 5 % of
the loop): the K chosen, the loop's blocked share, and one SIGKILL with the auto K (bit-identical,
iterations lost <= K).
Goals (issue 25): resumed p50 <= 5 s, p99 <= 10 s; at most one iteration lost; bit-identical; the
loop blocked <= 5 % of its iteration time; a planned migration pauses training <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from runutil import launch as launch_tasks, wait_all, wait_for_progress  # noqa: E402  the tests' launchers


def launch(out: Path, tasks: int, standbys: int, args, width: int):
    return launch_tasks(out, tasks, standbys, args.steps, args.sleep, train_args=("--width", str(width)))


def ranks(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]


def reference(work: Path, args, width: int) -> dict:
    out = work / f"ref-{width}"
    codes = wait_all(launch(out, args.ranks, 0, args, width), 600)
    per_rank = ranks(out)
    busy = [r["mean_iteration_s"] * r["iterations"] for r in per_rank]
    return {"codes": codes, "sha256": json.loads((out / "final.json").read_text())["sha256"],
            "width": width, "state_bytes": _state_bytes(width),
            "mean_iteration_ms": round(statistics.mean(r["mean_iteration_s"] for r in per_rank) * 1e3, 3),
            "blocked_per_replica_ms": round(statistics.mean(r["blocked_s"] / max(1, r["iterations"])
                                                            for r in per_rank) * 1e3, 3),
            "blocked_pct": round(100 * statistics.mean(r["blocked_s"] / b for r, b in zip(per_rank, busy)), 2),
            "waited_pct": round(100 * statistics.mean(r["waited_s"] / b for r, b in zip(per_rank, busy)), 2),
            "push_failures": sum(r["push_failures"] for r in per_rank)}


def cadence(work: Path, args, state_mb: float, expected: str) -> dict:
    """K = 1 against every="auto" at one state size, then one kill with the auto K."""
    out = {"state_mb": state_mb}
    for every in ("1", "auto"):
        run = work / f"cadence-{state_mb}-{every}"
        codes = wait_all(launch_tasks(run, args.ranks, 0, args.steps, args.sleep,
                                      train_args=("--every", every, "--state-mb", str(state_mb))), 900)
        per_rank = ranks(run)
        busy = [r["mean_iteration_s"] * r["iterations"] for r in per_rank]
        out[f"every_{every}"] = {
            "codes": codes, "k": sorted({r["cadence"]["k"] for r in per_rank}),
            "replicas_per_rank": round(statistics.mean(r["replicas"] for r in per_rank), 1),
            "replica_ms": round(statistics.mean((r["cadence"]["replica_s"] or 0) for r in per_rank) * 1e3, 2),
            "mean_iteration_ms": round(statistics.mean(r["mean_iteration_s"] for r in per_rank) * 1e3, 2),
            "blocked_pct": round(100 * statistics.mean(r["blocked_s"] / b for r, b in zip(per_rank, busy)), 2),
            # once K is agreed (the whole-run share above includes each generation's first replicas at K = 1)
            "steady_blocked_pct": round(100 * statistics.mean(_steady(r["cadence"]) for r in per_rank), 2)}
    run = work / f"cadence-{state_mb}-kill"
    procs = launch_tasks(run, args.ranks + 1, 1, args.steps, args.sleep,
                         train_args=("--every", "auto", "--state-mb", str(state_mb)))
    wait_for_progress(run, args.steps // 2)
    os.kill(int((run / "pid-1").read_text()), signal.SIGKILL)
    codes = wait_all(procs, 900)
    per_rank = ranks(run)
    change = json.loads((run / "launcher-0.json").read_text())["generations"][0]
    before = [h for r in per_rank for h in r["history"] if h["gen"] == 0 and h["last_step"] is not None]
    out["kill_auto"] = {"codes": codes, "resume": change["resume"],
                        "lost_iterations": max(h["last_step"] for h in before) - change["resume"],
                        "bit_identical": json.loads((run / "final.json").read_text())["sha256"] == expected}
    return out


def _steady(cadence: dict) -> float:
    c, t, k = cadence["replica_s"] or 0.0, cadence["iteration_s"] or 1.0, cadence["k"]
    return c / (k * t + c)


def _state_bytes(width: int) -> int:
    params = 32 * width + width + width + 1
    return 4 * params * 2  # parameters and SGD momentum, float32


def migration(work: Path, n: int, args, expected: str, rng: random.Random) -> dict:
    out = work / f"migration-{n}"
    procs = launch(out, args.ranks + 1, 1, args, args.widths[0])
    mover = rng.randrange(args.ranks)
    wait_for_progress(out, rng.randrange(args.steps // 5, args.steps // 2))
    moved = subprocess.run([sys.executable, "-m", "fleetctl", "migrate", "1", f"local{mover}", "--store",
                            f"127.0.0.1:{(out / 'port').read_text()}", "--format", "json"],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    codes = wait_all(procs, 600)
    if moved.returncode != 0:
        return {"mover_slot": mover, "error": moved.stderr[-300:], "codes": codes}
    doc = json.loads(moved.stdout)
    per_rank = ranks(out)
    before = [h for r in per_rank for h in r["history"] if h["gen"] == 0 and h["last_step"] is not None]
    after = [h for r in per_rank for h in r["history"] if h["gen"] == 1]
    final = json.loads((out / "final.json").read_text())
    return {"mover_slot": mover, "codes": codes, "migrate_s": doc["seconds"],
            "paused_s": round(max(h["first_step_at"] for h in after) - max(h["last_step_at"] for h in before), 3),
            "resume": doc["resume"], "lost_iterations": max(h["last_step"] for h in before) - doc["resume"],
            "bit_identical": final["sha256"] == expected}


def trial(work: Path, n: int, args, expected: str, rng: random.Random) -> dict:
    out = work / f"trial-{n}"
    procs = launch(out, args.ranks + 1, 1, args, args.widths[0])
    victim = rng.randrange(args.ranks)
    at = rng.randrange(args.steps // 5, args.steps // 2)
    wait_for_progress(out, at)
    killed_at = time.time()
    os.kill(int((out / f"pid-{victim}").read_text()), signal.SIGKILL)
    codes = wait_all(procs, 600)
    per_rank = ranks(out)
    final = json.loads((out / "final.json").read_text())
    generations = json.loads((out / "launcher-0.json").read_text())["generations"]
    change = generations[0]
    after = [h for r in per_rank for h in r["history"] if h["gen"] == 1]
    before = [h for r in per_rank for h in r["history"] if h["gen"] == 0 and h["last_step"] is not None]
    resume = change["resume"]
    return {"victim_slot": victim, "killed_near_iteration": at, "codes": codes,
            "resumed_s": round(max(h["first_step_at"] for h in after) - killed_at, 3),
            "decided_s": round(change["at"] - change["since"], 3),
            "enter_s": round(max(h["enter_s"] for h in after), 3),
            "resume": resume, "lost_iterations": max(h["last_step"] for h in before) - resume,
            "bit_identical": final["sha256"] == expected, "generations": len(generations)}


def percentile(values, q):
    """The q-th percentile (nearest rank); None for no values (`--trials 0`)."""
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--migrations", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=4, help="training ranks (one more task stands by)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--sleep", type=float, default=0.02, help="seconds of stand-in compute per iteration")
    parser.add_argument("--widths", default="64,1024,4096", help="model widths for the replica cost")
    parser.add_argument("--state-mbs", default="0,16,64", help="state sizes for the replica cadence ('' skips)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    args.widths = [int(w) for w in args.widths.split(",")]
    args.state_mbs = [float(m) for m in args.state_mbs.split(",") if m]
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="fleetctl-bench-run-") as tmp:
        work = Path(tmp)
        costs = [reference(work, args, w) for w in args.widths]
        trials = [trial(work, n, args, costs[0]["sha256"], rng) for n in range(args.trials)]
        moves = [migration(work, n, args, costs[0]["sha256"], rng) for n in range(args.migrations)]
        cadences = [cadence(work, args, mb, costs[0]["sha256"]) for mb in args.state_mbs]
    resumed = [t["resumed_s"] for t in trials]
    paused = [m["paused_s"] for m in moves if "paused_s" in m]
    print(json.dumps({
        "benchmark": "recovery_inprocess", "when": time.strftime("%Y-%m-%d"), "machine": platform.node(),
        "cpus": os.cpu_count(), "ranks": args.ranks, "standbys": 1, "steps": args.steps, "sleep_s": args.sleep,
        "resumed_s": {"p50": percentile(resumed, 50), "p99": percentile(resumed, 99), "max": max(resumed, default=None)},
        "decided_s_p50": percentile([t["decided_s"] for t in trials], 50),
        "lost_iterations": {"max": max((t["lost_iterations"] for t in trials), default=None),
                            "counts": {str(k): sum(1 for t in trials if t["lost_iterations"] == k)
                                       for k in sorted({t["lost_iterations"] for t in trials})}},
        "bit_identical": f"{sum(t['bit_identical'] for t in trials)}/{len(trials)}",
        "all_exit_0": all(c == 0 for t in trials for c in t["codes"]),
        "migration": {"paused_s": {"p50": percentile(paused, 50), "max": max(paused)} if paused else None,
                      "lost_iterations_max": max((m["lost_iterations"] for m in moves if "paused_s" in m), default=None),
                      "bit_identical": f"{sum(m.get('bit_identical', False) for m in moves)}/{len(moves)}",
                      "failed": sum(1 for m in moves if "error" in m)},
        "replica_cost": costs, "cadence": cadences, "trials": trials, "migrations": moves}, indent=2))


if __name__ == "__main__":
    main()
