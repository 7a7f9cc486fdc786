#!/usr/bin/env python3
"""Fault to job running again, restored, on the lab: the Detect -> Act loop timed step by step. Prints JSON.

    sudo python benchmarks/act_fault_to_running.py [--trials 10] [--slurm sid --requeue expedite] [--out FILE]

Each trial: a spare pool of 2 (node3, node4, audited as they join), a 2-node training job on node1+node2
(tests/snapshot_train.py: torch, gloo, fleetctl.snapshot), an Xid 79 injected on node2, then one
`fleetctl act run --once --audit node[1-2]` with the policy snapshot + drain + swap. Phases, from the
action log and the job's own log:
  detect    injection -> the first action's pending record (the quick audit that finds the Xid)
  snapshot  the snapshot action (request written -> snapshot published)
  drain     the drain action
  requeue   the swap action (spare released, job requeued excluding node2) -> the job RUNNING again
  restore   RUNNING again -> the job printed `restored=N` (its Snapshotter loaded snapshot N)
--requeue expedite submits the job with `--requeue=expedite` (Slurm 25.11+, `--slurm sid`; the lab
enables SlurmctldParameters=enable_expedited_requeue there): no credential-lifetime wait after the swap.
Goal: p50 of the total <= 60 s. Needs torch (scripts/install). Takes the lab's session lock.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetctl.lab.session import LabSession  # noqa: E402
from fleetctl.lab.topology import MGMT_DEV, LabParams  # noqa: E402
from fleetctl.slurm.parse import parse_record  # noqa: E402

TRAIN = REPO / "tests" / "snapshot_train.py"
JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000 + 7 * ${SLURM_RESTART_COUNT:-0}))
echo "start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST"
srun --kill-on-bad-exit=1 "$PY" "$TRAIN" --dir "$SNAP" --steps $STEPS --pace 0.1 --out "$OUT"
"""


def site_text(lab, work: Path) -> str:
    return "\n".join([
        lab.site_file.read_text(), "[spares]", f'state_dir = "{work / "spares"}"', "max_audit_age_s = 3600",
        "[act]", "enabled = true", f'state_dir = "{work / "act"}"', "max_drain_pct = 50",
        "max_drains_per_hour = 1000", "snapshot_timeout_s = 40",
        "[[act.policies]]", 'name = "xid"', 'codes = ["xid.79"]', 'actions = ["snapshot", "drain", "swap"]',
        "cooldown_s = 0", ""])


def sh(lab, *cmd, check=True, env=None):
    return subprocess.run(list(cmd), env=env or lab.command_env(), capture_output=True, text=True, timeout=120,
                          check=check)


def job_state(lab, job):
    out = sh(lab, "scontrol", "show", "job", job, "--oneliner", check=False).stdout
    return parse_record(out.splitlines()[0]) if out.strip() else {}


def wait(pred, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise TimeoutError("condition not reached")


def trial(lab, work: Path, env: dict, requeue: str = "--requeue") -> dict:
    fleetctl = [sys.executable, "-m", "fleetctl", "--format", "json"]
    sh(lab, *fleetctl, "spares", "add", "node[3-4]", env=env, check=False)
    snap, log = work / "snap", work / "job.log"
    reg = work / "registry"
    reg.mkdir(exist_ok=True)
    script = work / "job.sh"
    script.write_text(JOB)
    jenv = {**env, "PY": sys.executable, "TRAIN": str(TRAIN), "SNAP": str(snap), "OUT": str(work / "out.pt"),
            "STEPS": "3000", "LAB_ADDRS": json.dumps(lab.state["addresses"]["mgmt"]),
            "GLOO_SOCKET_IFNAME": MGMT_DEV, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    job = sh(lab, "sbatch", "--parsable", "-N2", "-w", "node[1-2]", "--ntasks-per-node=1", requeue,
             "--open-mode=append", f"--output={log}", "--export=ALL", str(script), env=jenv).stdout.strip()
    try:
        wait(lambda: (snap / "progress").exists() and int((snap / "progress").read_text() or -1) >= 10, 180, 0.2)
        sh(lab, sys.executable, "-m", "fleetctl", "lab", "fault", "add", "node2:gpu3", "--xid", "79", env=env)
        t0 = time.time()
        run = json.loads(sh(lab, *fleetctl, "act", "run", "--once", "--audit", "node[1-2]", env=env,
                            check=False).stdout)
        acts = {d["action"]: d for d in run["decisions"] if d["phase"] == "done"}
        if not {"drain", "swap"} <= set(acts):
            return {"error": "loop did not act", "decisions": run["decisions"]}
        records = [json.loads(l) for l in (work / "act" / "actions.jsonl").read_text().splitlines()]
        first_pending = min(r["time"] for r in records if r["phase"] == "pending")
        rec = wait(lambda: (lambda r: r if r.get("JobState") == "RUNNING" and int(r.get("Restarts", 0)) >= 1
                            else None)(job_state(lab, job)), 120)
        t_running = time.time()
        wait(lambda: "restored=" in log.read_text().split("start restart=1", 1)[-1]
             and "start restart=1" in log.read_text(), 120)
        t_restored = time.time()
        swap_done = next(r["time"] for r in records if r["id"] == acts["swap"]["id"] and r["phase"] == "done")
        return {"detect_s": round(first_pending - t0, 2),
                "snapshot_s": acts.get("snapshot", {}).get("seconds"),
                "drain_s": acts["drain"]["seconds"],
                "requeue_s": round(t_running - swap_done + acts["swap"]["seconds"], 2),
                "restore_s": round(t_restored - t_running, 2),
                "total_s": round(t_restored - t0, 2), "nodes_after": rec.get("NodeList")}
    finally:
        sh(lab, "scancel", job, check=False)
        sh(lab, sys.executable, "-m", "fleetctl", "lab", "fault", "clear", env=env, check=False)
        wait(lambda: not job_state(lab, job) or job_state(lab, job).get("JobState") not in
             ("RUNNING", "COMPLETING", "PENDING"), 60, 0.2)
        sh(lab, "scontrol", "delete", "ReservationName=fleetctl-spares", check=False)
        sh(lab, "scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME", check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--out", default="")
    ap.add_argument("--slurm", default="system", help="the lab's Slurm: system, trixie (24.11), sid (26.05)")
    ap.add_argument("--requeue", choices=["plain", "expedite"], default="plain",
                    help="expedite: submit with --requeue=expedite (Slurm 25.11+)")
    args = ap.parse_args()
    params = LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=4, slurm_from=args.slurm)
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "goal_p50_s": 60.0,
                 "slurm": args.slurm, "requeue": args.requeue, "trials": []}
    with LabSession(params) as lab, tempfile.TemporaryDirectory() as tmp:
        out["slurm_version"] = lab.state["slurm"]["version"]
        for i in range(args.trials):
            work = Path(tmp) / f"t{i}"
            work.mkdir()
            (work / "site.toml").write_text(site_text(lab, work))
            env = {**lab.command_env(), "FLEETCTL_SITE": str(work / "site.toml"), "PYTHONPATH": str(REPO),
                   "FLEETCTL_SNAPSHOT_REGISTRY": str(work / "registry")}
            out["trials"].append(trial(lab, work, env, "--requeue=expedite" if args.requeue == "expedite"
                                       else "--requeue"))
            print(json.dumps(out["trials"][-1]), file=sys.stderr)
    ok = [t for t in out["trials"] if "total_s" in t]
    out["ok_trials"] = len(ok)
    for key in ("detect_s", "snapshot_s", "drain_s", "requeue_s", "restore_s", "total_s"):
        values = [t[key] for t in ok if isinstance(t.get(key), (int, float))]
        if values:
            out[f"p50_{key}"] = round(statistics.median(values), 2)
    text = json.dumps(out, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
