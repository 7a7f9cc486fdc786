#!/usr/bin/env python3
"""The remediation ladder on the lab, timed: an Xid on a GPU -> drain -> GPU reset -> re-audit ->
resume, or -> reboot through Slurm -> back in service. Prints JSON.

    sudo python benchmarks/act_ladder.py [--trials 10] [--rung reset|reboot] [--out FILE]

Each trial injects an Xid 48 (the check catalogue: reset the GPU) on a GPU of a lab node (a different node and GPU each time, so that no
node becomes suspect), then runs one `fleetctl act run --once --audit NODE` with the policy
drain + reset-gpu + resume + service-request, the lab's simulated GPUs behind the two node-side
commands (docs/act.md). Phases, from the action log: detect (injection -> the drain's pending record:
the quick audit that finds the Xid), drain, reset (GPU process check, reset, re-audit), resume; total:
injection -> the node back in service in Slurm. Goal (issue 24): total <= 60 s in each of 10 trials.
`--rung reboot` injects an Xid 79 instead (the catalogue: reboot; no reset is tried) and the node is
rebooted through Slurm (the lab's RebootProgram, docs/act.md): total is then injection -> the node
IDLE again.
Takes the lab's session lock (brings up a 4-host lab with 4 GPUs each when none is up).
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
from fleetctl.lab.topology import LabParams  # noqa: E402
from fleetctl.slurm.parse import parse_record  # noqa: E402


def site_text(lab, work: Path, rung: str) -> str:
    py = sys.executable
    return "\n".join([
        lab.site_file.read_text(), "[act]", "enabled = true", f'state_dir = "{work / "act"}"',
        "max_drain_pct = 100", "max_drains_per_hour = 1000", "suspect_after = 1000",
        f'gpu_busy_command = ["{py}", "-m", "fleetctl.lab.gpureset", "--busy", "{{node}}", "{{gpu}}"]',
        f'gpu_reset_command = ["{py}", "-m", "fleetctl.lab.gpureset", "{{node}}", "{{gpu}}"]',
        "[[act.policies]]", 'name = "xid-ladder"', 'codes = ["xid.79", "xid.48"]', "cooldown_s = 0",
        'actions = ["drain", "reset-gpu", "reboot", "resume", "service-request"]' if rung == "reboot" else
        'actions = ["drain", "reset-gpu", "resume", "service-request"]', ""])


def fleetctl(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def in_service(lab, node: str) -> bool:
    out = subprocess.run(["scontrol", "show", "node", node, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30).stdout
    return parse_record(out).get("State", "DRAIN") in ("IDLE", "MIXED", "ALLOCATED")


def trial(lab, work: Path, env: dict, node: str, gpu: int, rung: str) -> dict:
    out: dict = {"node": node, "gpu": gpu}
    injected = time.time()
    rc = fleetctl(env, "lab", "fault", "add", f"{node}:gpu{gpu}", "--xid", "79" if rung == "reboot" else "48")
    if rc.returncode:
        return {**out, "error": rc.stderr[-500:]}
    run = fleetctl(env, "--format", "json", "act", "run", "--once", "--audit", node)
    back = time.time()
    while not in_service(lab, node) and time.time() - back < 90:
        time.sleep(0.2)
    out["total_s"] = round(time.time() - injected, 2)
    try:
        decisions = json.loads(run.stdout)["decisions"]
    except (ValueError, KeyError):
        return {**out, "error": run.stderr[-500:]}
    out["steps"] = [f"{d['action']}:{d['phase']}" for d in decisions if d["detection"]["code"].startswith("xid.")]
    records = [json.loads(line) for line in (work / "act" / "actions.jsonl").read_text().splitlines()]
    first = {}
    for r in records:
        first.setdefault((r["action"], r["phase"]), r["time"])
    if ("drain", "pending") in first:
        out["detect_s"] = round(first[("drain", "pending")] - injected, 2)
    for action, key in (("drain", "drain_s"), ("reset-gpu", "reset_s"), ("reboot", "reboot_request_s"),
                        ("resume", "resume_s")):
        if (action, "pending") in first and (action, "done") in first:
            out[key] = round(first[(action, "done")] - first[(action, "pending")], 2)
    if ("reboot", "done") in first:
        out["reboot_to_idle_s"] = round(out["total_s"] - (first[("reboot", "done")] - injected), 2)
    healed = (["drain:done", "reset-gpu:done", "resume:done"],
              ["drain:done", "reset-gpu:refused", "reboot:done", "resume:refused"])
    out["healed"] = out["steps"] in healed and in_service(lab, node)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--rung", choices=("reset", "reboot"), default="reset")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    params = LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=4)
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "goal_total_s": 60.0, "rung": args.rung,
                 "trials": []}
    with LabSession(params) as lab, tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            work = Path(tmp) / f"t{i}"
            work.mkdir()
            (work / "site.toml").write_text(site_text(lab, work, args.rung))
            env = {**lab.command_env(), "FLEETCTL_SITE": str(work / "site.toml"), "PYTHONPATH": str(REPO)}
            node = lab.nodes[i % len(lab.nodes)]
            out["trials"].append(trial(lab, work, env, node, i % params.gpus_per_host, args.rung))
            print(json.dumps(out["trials"][-1]), file=sys.stderr)
            fleetctl(env, "lab", "fault", "clear")
    ok = [t for t in out["trials"] if t.get("healed")]
    out["healed_trials"] = len(ok)
    for key in ("detect_s", "drain_s", "reset_s", "reboot_request_s", "reboot_to_idle_s", "resume_s", "total_s"):
        values = sorted(t[key] for t in ok if isinstance(t.get(key), (int, float)))
        if values:
            out[f"p50_{key}"] = round(statistics.median(values), 2)
            out[f"max_{key}"] = values[-1]
    text = json.dumps(out, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
