#!/usr/bin/env python3
"""ETTR of a lab training job under a fault schedule, three arms in one run: no rollback (`fleetctl run`
with standbys), fleetctl's Detect -> Act loop (snapshot + swap), and plain Slurm requeue from the job's
own periodic checkpoint. Prints JSON.

    sudo python benchmarks/ettr.py [--duration 1800] [--period 300] [--hang-timeout 60] [--out FILE]
                                   [--arms norollback,fleetctl,plain] [--standbys 2] [--replenish 4]

ETTR = time making new progress / wall time. The job (tests/snapshot_train.py: torch, gloo, 2 nodes,
fleetctl.snapshot) advances one iteration every --pace seconds when nothing goes wrong; ETTR is the
net iterations reached at the end times the uninterrupted time per iteration (measured in the first
minute of the arm), over the arm's wall time; iterations redone after a rollback count as lost.

Faults, one every --period seconds, cycling through --kinds (default the issue's schedule: kill,
xid, nic, hang; `link` is the fifth kind): the rank on one of the job's nodes killed with SIGKILL; an
Xid 79 on that node; that node's NIC down; the rank hung with no node fault (SIGSTOP, as a rank stuck
in its own work); a lossy (5 %) link from that node. The lab has no GPU and gloo runs over the
management network, so the effect on the job of an Xid or a NIC down is emulated the way the real
thing behaves: it hangs the job (its rank on that node is stopped with SIGSTOP, as a rank stuck in a
collective); a lossy link does not stop it. The lab fault itself is real (kernel log line, link down,
nftables loss) and is what the detectors see.

- plain: a killed rank fails the job (`srun --kill-on-bad-exit`); a hung one is killed at the hang
  timeout (--hang-timeout, standing for the NCCL/PyTorch watchdog). A failed job is requeued
  (`scontrol requeue`, no node excluded, standing for the site's or user's resubmission) and restarts
  from its own periodic checkpoint (every --ckpt-every iterations).
- fleetctl: `fleetctl act run` with an audit of the job's nodes at every pass, a spare pool of 2, and
  policies: Xid/NIC findings -> snapshot (a hung job cannot answer: 5 s timeout), drain, swap; a lens
  loss event on a link -> snapshot of the jobs crossing it. A kill or a hang with no node fault is
  nothing act sees: the job fails or hangs as in the plain arm, and is requeued the same way. lens is not run here: the benchmark
  writes the event record lens would write, --lens-delay seconds after the loss starts.
- norollback: the same 2 training ranks under `srun fleetctl run --standbys K` (tests/resilient_train.py,
  K + 2 nodes, K = --standbys), disk snapshots every --ckpt-every iterations' worth of time as the
  fallback. The fault hits the node of rank 1 (read from the job's control store): its process stopped
  (SIGSTOP) stops its heartbeat, the job's controller gives rank 1 to a standby within --dead-after (3 s)
  and training goes on; act's policy ["migrate", "drain", "swap"] drains the node and has nothing left
  to move. Each standby used is replaced (`--replenish`, at most --replenish over the run): task 0
  submits a one-node job in the spare pool's reservation whose launcher joins the run as a standby.
  With no standby left (the pool empty) the run ends for requeue: task 0 writes a `rank_lost` event,
  act's policy ["swap"] moves the job onto a spare, and it restores its newest disk snapshot.
Between faults the failed node is repaired: fault cleared, `fleetctl audit NODE --resume` (acknowledges
the Xid), and in the fleetctl arm `fleetctl spares add NODE --report` returns it to the pool.
Takes the lab's session lock. Needs torch (scripts/install).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetctl.lab.session import LabSession  # noqa: E402
from fleetctl.lab.topology import MGMT_DEV, LabParams  # noqa: E402
from fleetctl.slurm.parse import expand_nodelist, parse_record  # noqa: E402

TRAIN = REPO / "tests" / "snapshot_train.py"
RTRAIN = REPO / "tests" / "resilient_train.py"
KINDS = ("kill", "xid", "nic", "hang", "link")
JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000 + 7 * ${SLURM_RESTART_COUNT:-0}))
echo "start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST"
srun --kill-on-bad-exit=1 "$PY" "$TRAIN" --dir "$SNAP" --steps 1000000 --pace $PACE --every $EVERY --out "$OUT"
"""
NR_JOB = """#!/bin/bash
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$("$PY" -c 'import json, os, sys; print(json.loads(os.environ["LAB_ADDRS"])[sys.argv[1]])' "$first")
echo "start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST"
srun --no-kill --output="$OUT/launcher-%t.json" --error="$OUT/launcher-%t.log" --open-mode=append \\
    "$PY" -m fleetctl run --standbys $STANDBYS --dead-after 3 --format json --events "$EVENTS" --requeue-wait 120 \\
    --replenish $REPLENISH --replenish-args "--reservation=fleetctl-spares --output=$OUT/standby-%j.log" -- \\
    "$PY" "$RTRAIN" --out "$OUT" --steps 100000000 --sleep $PACE --snap "$SNAP" --snap-interval $SNAP_S
"""


class Arm:
    def __init__(self, name, lab, work: Path, args):
        self.name, self.lab, self.work, self.args = name, lab, work, args
        work.mkdir(parents=True)
        self.site = work / "site.toml"
        self.site.write_text(self._site_text())
        self.env = {**lab.command_env(), "FLEETCTL_SITE": str(self.site), "PYTHONPATH": str(REPO),
                    "FLEETCTL_SNAPSHOT_REGISTRY": str(work / "registry")}
        (work / "registry").mkdir()
        self.snap, self.log = work / "snap", work / "job.log"
        self.job = ""
        self.stopped: list[tuple[int, float, str]] = []  # (pid, when, fault kind) of ranks hung by a fault
        self.events: list[dict] = []
        self.act = None

    def _site_text(self) -> str:
        norollback = self.name == "norollback"
        node_fatal = '["migrate", "drain", "swap"]' if norollback else '["snapshot", "drain", "swap"]'
        rank_lost = ["[[act.policies]]", 'name = "rank-lost"', 'source = "lens"', 'element_types = ["host"]',
                     'metrics = ["rank_lost"]', 'actions = ["swap"]', "cooldown_s = 0"] if norollback else []
        return "\n".join([
            self.lab.site_file.read_text(), "[spares]", f'state_dir = "{self.work / "spares"}"',
            "max_audit_age_s = 3600", "[act]", "enabled = true", f'state_dir = "{self.work / "act"}"',
            f'lens_events = "{self.work / "events.jsonl"}"', "max_drain_pct = 50", "max_drains_per_hour = 100",
            "snapshot_timeout_s = 5", "poll_s = 0.5", *(["migrate_timeout_s = 20"] if norollback else []),
            "[[act.policies]]", 'name = "node-fatal"', 'codes = ["xid.*", "nic.*"]',
            f"actions = {node_fatal}", "cooldown_s = 0", *rank_lost,
            "[[act.policies]]", 'name = "lossy-link"', 'source = "lens"', 'element_types = ["link"]',
            'metrics = ["loss"]', 'actions = ["snapshot"]', "cooldown_s = 0", ""])

    def fleetctl(self, *args, check=False):
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], env=self.env, capture_output=True,
                              text=True, timeout=300, check=check)

    def slurm(self, *args):
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=60)

    def job_record(self) -> dict:
        out = self.slurm("scontrol", "show", "job", self.job, "--oneliner").stdout
        return parse_record(out.splitlines()[0]) if out.strip() else {}

    def progress(self) -> int:
        try:
            if self.name == "norollback":
                return int((self.work / "out" / "progress").read_text())
            return int((self.snap / "progress").read_text())
        except (OSError, ValueError):
            return -1

    def start(self):
        if self.name == "norollback":
            return self._start_norollback()
        if self.name == "fleetctl":
            self.fleetctl("--format", "json", "spares", "add", "node[3-4]")
        script = self.work / "job.sh"
        script.write_text(JOB)
        jenv = {**self.env, "PY": sys.executable, "TRAIN": str(TRAIN), "SNAP": str(self.snap),
                "OUT": str(self.work / "out.pt"), "PACE": str(self.args.pace), "EVERY": str(self.args.ckpt_every),
                "LAB_ADDRS": json.dumps(self.lab.state["addresses"]["mgmt"]), "GLOO_SOCKET_IFNAME": MGMT_DEV,
                "OMP_NUM_THREADS": "1"}
        self.job = subprocess.run(["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--requeue",
                                   "--open-mode=append", f"--output={self.log}", "--export=ALL", str(script)],
                                  env=jenv, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        if self.name == "fleetctl":
            self.act = subprocess.Popen([sys.executable, "-m", "fleetctl", "--format", "json", "act", "run",
                                         "--audit", ",".join(self.lab.nodes), "--duration",
                                         str(self.args.duration + 120)], env=self.env,
                                        stdout=open(self.work / "act.out", "w"), stderr=subprocess.STDOUT)

    def _start_norollback(self):
        nodes = 2 + self.args.standbys
        spares = self.lab.nodes[nodes:nodes + 2]
        self.fleetctl("--format", "json", "spares", "add", ",".join(spares))
        script = self.work / "job.sh"
        script.write_text(NR_JOB)
        (self.work / "out").mkdir()
        jenv = {**self.env, "PY": sys.executable, "RTRAIN": str(RTRAIN), "SNAP": str(self.snap),
                "OUT": str(self.work / "out"), "PACE": str(self.args.pace), "STANDBYS": str(self.args.standbys),
                "SNAP_S": str(self.args.ckpt_every * self.args.pace), "EVENTS": str(self.work / "events.jsonl"),
                "REPLENISH": str(self.args.replenish),
                "LAB_ADDRS": json.dumps(self.lab.state["addresses"]["mgmt"]), "GLOO_SOCKET_IFNAME": MGMT_DEV,
                "OMP_NUM_THREADS": "1"}
        self.job = subprocess.run(["sbatch", "--parsable", f"-N{nodes}", "--ntasks-per-node=1", "--requeue",
                                   "--no-kill", "--open-mode=append", f"--output={self.log}", "--export=ALL", str(script)],
                                  env=jenv, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        self.act = subprocess.Popen([sys.executable, "-m", "fleetctl", "--format", "json", "act", "run",
                                     "--audit", ",".join(self.lab.nodes), "--duration",
                                     str(self.args.duration + 120)], env=self.env,
                                    stdout=open(self.work / "act.out", "w"), stderr=subprocess.STDOUT)

    def rank1_target(self) -> tuple[str, int] | None:
        """(node, pid) of the process training rank 1 now, from the job's control store."""
        from fleetctl.recovery.launch import BASE_PORT
        from fleetctl.recovery.migrate import connect, current_plan
        from fleetctl.recovery import control

        nodes = expand_nodelist(self.job_record().get("NodeList", "(null)"))
        if not nodes:
            return None
        try:
            store = connect(self.lab.state["addresses"]["mgmt"][nodes[0]], BASE_PORT + int(self.job) % 20000, 5)
            slot = current_plan(store).slot_of(1)
            node = control.Hello.parse(store.get(control.hello_key(slot)), slot).node
            return node, int((self.work / "out" / f"pid-{slot}").read_text())
        except Exception as exc:  # between runs (requeued, restarting): no target now
            print(f"norollback: no rank 1 to hit: {exc}", file=sys.stderr)
            return None

    def rank_pid(self, node: str) -> int | None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                if str(TRAIN).encode() not in cmd:
                    continue
                env = dict(i.split(b"=", 1) for i in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                           if b"=" in i)
            except OSError:
                continue
            if env.get(b"SLURM_JOB_ID") == self.job.encode() and env.get(b"SLURMD_NODENAME") == node.encode():
                return int(entry)
        return None

    def inject(self, kind: str, t: float) -> dict:
        nodes = expand_nodelist(self.job_record().get("NodeList", "(null)"))
        target = self.rank1_target() if self.name == "norollback" else None
        if not nodes or (self.name == "norollback" and target is None):
            return {"kind": kind, "t": round(t, 1), "skipped": "job not running"}
        node = target[0] if target else nodes[-1]
        if kind == "xid":
            self.fleetctl("lab", "fault", "add", f"{node}:gpu0", "--xid", "79")
        elif kind == "nic":
            self.fleetctl("lab", "fault", "add", f"{node}:eth0", "--down")
        else:
            link = f"{node}:eth0--leaf{1 if int(node.removeprefix('node')) <= 2 else 2}"
            self.fleetctl("lab", "fault", "add", link, "--loss", "5")
            self.events.append({"due": time.monotonic() + self.args.lens_delay, "link": link, "nodes": nodes})
        if kind in ("kill", "xid", "nic", "hang"):
            pid = target[1] if target else self.rank_pid(node)
            if pid and kind == "kill":
                os.kill(pid, signal.SIGKILL)
            elif pid:
                os.kill(pid, signal.SIGSTOP)
                self.stopped.append((pid, time.monotonic(), kind))
        return {"kind": kind, "t": round(t, 1), "node": node, "progress": self.progress()}

    def tick(self, now: float):
        """The watchdog and requeue of a job that fails (plain, and fleetctl for what act does not
        see: a kill, a hang with no node fault); the lens events due in the fleetctl arm."""
        if self.name in ("plain", "fleetctl"):
            for entry in list(self.stopped):
                pid, when, kind = entry
                if now - when >= self.args.hang_timeout and (self.name == "plain" or kind == "hang"):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self.stopped.remove(entry)
            state = self.job_record().get("JobState", "")
            if state in ("FAILED", "COMPLETED", "CANCELLED", "NODE_FAIL", "TIMEOUT"):
                self.slurm("scontrol", "requeue", self.job)
        for ev in [e for e in self.events if e["due"] <= now]:
            self.events.remove(ev)
            if self.name in ("fleetctl", "norollback"):
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                rec = {"v": 1, "id": f"ev-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{int(now) % 10000:04d}",
                       "kind": "open", "time": stamp, "state": "open",
                       "element": {"type": "link", "id": ev["link"]}, "metric": "loss", "severity": "critical",
                       "confidence": 0.97, "evidence": {"loss_pct": 5.0}, "first_seen": stamp, "last_seen": stamp,
                       "flap": None, "jobs": [{"job_id": self.job, "user": "root", "nodes": ",".join(ev["nodes"])}]}
                with open(self.work / "events.jsonl", "a") as fh:
                    fh.write(json.dumps(rec) + "\n")

    def repair(self):
        """Clear the lab's faults and bring fleetctl-drained nodes back (acknowledging their Xid)."""
        self.fleetctl("lab", "fault", "clear")
        for pid, _, _ in self.stopped:  # a rank still hung in the fleetctl arm was killed by the requeue
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.stopped.clear()
        out = self.slurm("sinfo", "-h", "-R", "-o", "%N|%E").stdout
        drained = [n for line in out.splitlines() if "|fleetctl:" in line for n in expand_nodelist(line.split("|")[0])]
        if drained:
            rep = self.work / "repair.json"
            proc = self.fleetctl("audit", ",".join(drained), "--resume", "--level", "quick", "--since", "2s",
                                 "--format", "json")
            rep.write_text(proc.stdout)
            if self.name == "norollback":  # a node whose rank a standby took is still the job's: it
                # goes back to the job at its next requeue, not to the pool (whose reservation would
                # keep the requeued job from starting)
                held = set(expand_nodelist(self.job_record().get("NodeList", "(null)")))
                drained = [n for n in drained if n not in held]
            if self.name in ("fleetctl", "norollback") and drained and proc.stdout.strip():
                self.fleetctl("spares", "add", ",".join(drained), "--report", str(rep), "--no-audit")

    def stop(self):
        if self.act is not None:
            self.act.terminate()
            self.act.wait(timeout=30)
        for pid, _, _ in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.slurm("scancel", self.job)
        self.fleetctl("lab", "fault", "clear")
        time.sleep(2)
        self.slurm("scontrol", "delete", "ReservationName=fleetctl-spares")
        self.slurm("scontrol", "update", f"NodeName={','.join(self.lab.nodes)}", "State=RESUME")


def run_arm(arm: Arm, args) -> dict:
    arm.start()
    deadline = time.monotonic() + 300
    while arm.progress() < 1:
        if time.monotonic() > deadline:
            raise SystemExit(f"{arm.name}: the job did not start")
        time.sleep(0.5)
    t0 = time.monotonic()
    p0 = arm.progress()
    # Uninterrupted time per iteration: the first 60 s (before any fault).
    time.sleep(min(60.0, args.period / 2))
    per_iter = (time.monotonic() - t0) / max(1, arm.progress() - p0)
    faults, k, kinds = [], 0, args.kinds.split(",")
    try:
        while time.monotonic() - t0 < args.duration:
            now = time.monotonic()
            due = t0 + args.period * (k + 1) - args.period / 2
            if now >= due and due - t0 < args.duration:
                if k:
                    arm.repair()
                faults.append(arm.inject(kinds[k % len(kinds)], now - t0))
                k += 1
            arm.tick(now)
            time.sleep(0.5)
        wall = time.monotonic() - t0
        reached = arm.progress() - p0
    finally:
        arm.stop()
    text = arm.log.read_text() if arm.log.exists() else ""
    launcher = arm.work / "out" / "launcher-0.log"
    generations = [line.split("fleetctl run: ", 1)[1] for line in
                   (launcher.read_text(errors="replace").splitlines() if launcher.exists() else [])
                   if "fleetctl run: generation" in line]
    return {"arm": arm.name, "in_process_restarts": generations, "wall_s": round(wall, 1), "iterations": reached, "s_per_iteration": round(per_iter, 4),
            "ettr": round(min(1.0, reached * per_iter / wall), 4), "faults": faults,
            "restarts": text.count("start restart=") - 1,
            "restores": [line for line in text.splitlines() if line.startswith("restored=")] + _restored(arm)}


def _restored(arm: Arm) -> list[str]:
    """The norollback arm's disk restore (tests/resilient_train.py keeps the last one)."""
    path = arm.work / "out" / "restored"
    return [f"restored={path.read_text().strip()}"] if path.exists() else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=1800.0)
    ap.add_argument("--period", type=float, default=300.0)
    ap.add_argument("--hang-timeout", type=float, default=60.0)
    ap.add_argument("--lens-delay", type=float, default=8.0)
    ap.add_argument("--pace", type=float, default=0.1)
    ap.add_argument("--ckpt-every", type=int, default=600, help="the job's own periodic checkpoint, iterations")
    ap.add_argument("--arms", default="norollback,fleetctl,plain")
    ap.add_argument("--kinds", default="kill,xid,nic,hang", help=f"fault kinds, in turn: {','.join(KINDS)}")
    ap.add_argument("--standbys", type=int, default=2, help="the norollback arm's standby nodes")
    ap.add_argument("--replenish", type=int, default=4, help="the norollback arm's replacement standbys: "
                    "one-node jobs on the spare pool's nodes (`fleetctl run --replenish`; 0: none)")
    ap.add_argument("--out", default="")
    ap.add_argument("--workdir", default="", help="keep each arm's files (job log, act output, action log) here")
    args = ap.parse_args()
    if not args.kinds or set(args.kinds.split(",")) - set(KINDS):
        ap.error(f"--kinds: a comma-separated list of {', '.join(KINDS)}")
    params = LabParams(hosts=max(4, 4 + args.standbys), nics_per_host=2, leaves=2, spines=2, gpus_per_host=4)
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "args": vars(args), "arms": []}
    with LabSession(params) as lab, tempfile.TemporaryDirectory() as scratch:
        tmp = args.workdir or scratch
        for name in args.arms.split(","):
            out["arms"].append(run_arm(Arm(name, lab, Path(tmp) / name, args), args))
            print(json.dumps(out["arms"][-1]), file=sys.stderr)
    text = json.dumps(out, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
