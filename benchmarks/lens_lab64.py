#!/usr/bin/env python3
"""`fleetctl lens` on the 64-host lab (8 leaves, 4 spines, 2 NICs a host, clock skew) with its
default settings over ssh, as issue 22 found it (sshd throttled, agents restarting, false `down`
events); prints JSON.

1. lens starts (no --rate: the plan's budget); a clean minute follows, during which one agent is
   killed (SIGKILL) every 15 s: every event opened in that minute is false;
2. a 3 % loss on leaf5--spine3 (both directions): the time until an event names it (or
   `--timeout`), then cleared, and whether the event closed;
3. from lens's status: agents alive and restarted, windows, windows with hosts set aside
   (overloaded or not running), the longest window analysis, and the coordinator's own CPU.

    python benchmarks/lens_lab64.py [--clean-s 60] [--kills 4] [--timeout 30] [--transport ssh]
                                    [--agents registered]

With `--agents registered` every node runs `fleetctl lens agent` (as fleetctl-lens-agent.service
would) and registers with the coordinator over the management network; a killed agent is started
again 2 s later, as systemd's Restart= does. The agents trace their own flows through their
registration (lens.trace_via = agents): `trace` reports how many answered and how long it took.

Where this machine cannot carry the default rate for 64 hosts, lens is expected to say so (agents
overloaded, probes set aside) and still raise no network event.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lens_common import cpu_s, fleetctl, records, status

from fleetctl.lab import faults
from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import MGMT_GATEWAY, LabParams


def agent_pids() -> dict[str, int]:
    """Lens agents by node: python3 reading its script on stdin, with FLEETCTL_NODE and a run id."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) >= 2 and Path(cmd[0].decode(errors="replace")).name.startswith("python3") \
                and cmd[1] == b"-" and any(e.startswith(b"FLEETCTL_RUN=") for e in env):
            node = next((e.split(b"=", 1)[1].decode() for e in env
                         if e.startswith(b"FLEETCTL_NODE=")), None)
            if node:
                out[node] = int(proc.name)
    return out


def start_service(lab, node: str, address: str, key: Path) -> subprocess.Popen:
    """`fleetctl lens agent` in the node's namespace, as its systemd unit would run it."""
    env = lab.command_env()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen(["nsenter", f"--net=/run/netns/{lab.netns(node)}", sys.executable, "-m",
                             "fleetctl", "lens", "agent", "--coordinator", address, "--key-file",
                             str(key), "--node", node], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clean-s", type=float, default=60.0)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--transport", default="ssh", choices=("local", "ssh"))
    ap.add_argument("--agents", default="started", choices=("started", "registered"))
    args = ap.parse_args()
    params = LabParams(hosts=64, nics_per_host=2, leaves=8, spines=4, gpus_per_host=0,
                       clock_skew=True, slurm=False, ssh=args.transport == "ssh")
    out: dict = {"hosts": 64, "leaves": 8, "spines": 4, "nics_per_host": 2,
                 "transport": args.transport, "agents": args.agents}
    services: dict[str, subprocess.Popen] = {}
    t_up = time.monotonic()
    with LabSession(params) as lab:
        out["lab_up_s"] = round(time.monotonic() - t_up, 1)
        state = Path(lab.cluster.data["lens"]["state_dir"])
        extra = []
        if args.agents == "registered":
            key = state.parent / "lens-bench.key"
            key.unlink(missing_ok=True)
            fleetctl(lab, "lens", "keygen", str(key))
            address = f"{MGMT_GATEWAY}:61250"
            extra = ["--agents", "registered", "--listen", address, "--key-file", str(key)]
        r = fleetctl(lab, "--format", "json", "lens", "run", *extra)
        if args.agents == "registered":
            for node in lab.nodes:
                services[node] = start_service(lab, node, address, key)
        if r.returncode != 0:
            raise SystemExit(f"lens run failed: {r.stderr}")
        t_start = time.monotonic()
        while status(lab).get("counters", {}).get("windows", 0) < 3:
            if time.monotonic() - t_start > 180:
                raise SystemExit("lens did not analyse 3 windows within 180 s")
            time.sleep(1)
        out["first_windows_after_s"] = round(time.monotonic() - t_start, 1)
        out["trace"] = trace_figures(state / "lens.log")
        st = status(lab)
        pid = st["pid"]
        c0, w0 = cpu_s(pid), time.time()
        seen = {rec["id"] for rec in records(state)}
        killed = []
        t0 = time.monotonic()
        for i in range(args.kills):
            time.sleep(max(0.0, t0 + (i + 1) * args.clean_s / (args.kills + 1) - time.monotonic()))
            pids = {n: p.pid for n, p in services.items()} if services else agent_pids()
            if pids:
                node = sorted(pids)[(7 * i + 3) % len(pids)]
                os.kill(pids[node], signal.SIGKILL)
                killed.append(node)
                if services:  # systemd's Restart=, RestartSec=2
                    services[node].wait()
                    time.sleep(2)
                    services[node] = start_service(lab, node, address, key)
        time.sleep(max(0.0, t0 + args.clean_s - time.monotonic()))
        false = [rec for rec in records(state) if rec["kind"] == "open" and rec["id"] not in seen]
        out["clean"] = {"seconds": args.clean_s, "agents_killed": killed,
                        "events_opened": len(false),
                        "false_events": [f"{e['element']['id']} {e['metric']}" for e in false][:10]}
        seen = {rec["id"] for rec in records(state)}
        target = "leaf5--spine3"
        faults.add(target, "loss", "3")
        t_in = time.time()
        opened, wrong = None, []
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and opened is None:
            for rec in records(state):
                if rec["kind"] in ("open", "update") and rec["id"] not in seen:
                    if rec["element"]["id"] == target:
                        opened = rec
                    elif rec["kind"] == "open" and rec["id"] not in {w["id"] for w in wrong}:
                        wrong.append(rec)
            time.sleep(0.1)
        faults.clear()
        closed = False
        if opened:
            deadline = time.monotonic() + args.timeout + 20
            while time.monotonic() < deadline and not closed:
                closed = any(rec["id"] == opened["id"] and rec["kind"] == "close"
                             for rec in records(state))
                time.sleep(0.5)
        from fleetctl.lens.eventlog import parse_time

        out["fault"] = {"target": target, "loss_pct": 3,
                        "time_to_event_s": round(parse_time(opened["time"]) - t_in, 2)
                        if opened else None,
                        "metric": opened and opened["metric"], "closed": closed,
                        "other_events": [f"{w['element']['id']} {w['metric']}" for w in wrong]}
        st = status(lab)
        agents = st.get("agents", [])
        counters = st.get("counters", {})
        out["status"] = {
            "agents_alive": sum(1 for a in agents if a.get("alive")),
            "agents_restarted": sum(1 for a in agents if a.get("restarts")),
            "restarts_total": sum(a.get("restarts", 0) for a in agents),
            "agents_overloaded_now": sum(1 for a in agents if a.get("overloaded")),
            "windows": counters.get("windows"),
            "windows_with_findings": counters.get("windows_with_findings", 0),
            "analysis_s_max": counters.get("analysis_s_max"),
            "last_window": st.get("last_window"),
        }
        out["coordinator_cpu_pct"] = round(100 * (cpu_s(pid) - c0) / (time.time() - w0), 1)
        out["load_average"] = os.getloadavg()
        fleetctl(lab, "lens", "stop")
        for p in services.values():
            p.terminate()
        for p in services.values():
            p.wait(timeout=20)
    print(json.dumps(out, indent=1))
    return 0


def trace_figures(log_path: Path) -> dict:
    """The plan's tracing from lens's log: through the agents (how many answered, how long) or
    the transport, and how many paths were traced."""
    import re

    try:
        text = log_path.read_text()
    except OSError:
        return {}
    out: dict = {}
    m = re.search(r"traced through (\d+) of (\d+) agents in ([\d.]+) s", text)
    if m:
        out.update(via="agents", answered=int(m.group(1)), of=int(m.group(2)),
                   seconds=float(m.group(3)))
    plan = re.search(r"plan: (\{.*\})", text)
    if plan:
        summary = json.loads(plan.group(1))
        out.update(paths=summary.get("paths"), paths_traced=summary.get("paths_traced"))
    out["failed"] = len(re.findall(r"path tracing failed", text))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
