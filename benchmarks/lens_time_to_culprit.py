#!/usr/bin/env python3
"""Time to culprit of `fleetctl lens` on the 8-host lab: fault injected -> event open; prints JSON.

One lab of 8 hosts x 2 NICs (2 leaves, 2 spines, clock skew), taken with the lab lock; lens runs in
the background at --rate probes/s per NIC pair (100: every 10 ms) with the site's defaults
(1 s windows, k_open 1, k_open_down 1). After a warm-up, `--injections` faults of mixed kinds, one
at a time, on random elements: loss 2 % on a leaf-spine cable, loss 5 % on a NIC cable, a NIC
cable down, a NIC cable flapping (2 s). Each is held until its event opens (or `--timeout`), then
cleared; the next starts after its event closed. Time to culprit = the open record's time minus
the moment `lab fault add` returned (the fault fully in force; `from_call` counts from the call).
An event naming another element is a false event. Agent CPU per host: the agents' own CPU time
per window (status), median over the run.

    python benchmarks/lens_time_to_culprit.py [--injections 20] [--rate 100] [--seed 1]
        [--transport ssh|local]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from lens_common import fleetctl, lens_site, records, start_lens, status

from fleetctl.lab import faults
from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import LabParams
from fleetctl.lens.options import LensOptions

KINDS = ("loss2_uplink", "loss5_nic", "down_nic", "flap_nic")


def pick(kind: str, rng: random.Random, hosts: int) -> tuple[str, str, str | None, str]:
    """(target, fault kind, value, element id the event must name)."""
    if kind == "loss2_uplink":
        link = f"leaf{rng.randint(1, 2)}--spine{rng.randint(1, 2)}"
        return link, "loss", "2", link
    nic = f"node{rng.randint(1, hosts)}:eth{rng.randint(0, 1)}"
    if kind == "loss5_nic":
        return nic, "loss", "5", nic
    if kind == "down_nic":
        return nic, "down", None, nic
    return nic, "flap", "2s", nic


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))], 3) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--injections", type=int, default=20)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--transport", default="local", choices=("local", "ssh"))
    ap.add_argument("--k-open", type=int, default=None, help="lens.k_open (default: the site's, 1)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    params = LabParams(hosts=8, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                       clock_skew=True, slurm=False, ssh=args.transport == "ssh")
    rows, cpu, pps = [], [], []
    with LabSession(params) as lab:
        if args.k_open:
            lens_site(lab, k_open=args.k_open)
        state = start_lens(lab, args.rate)
        time.sleep(15)  # baselines and clock fits
        warm = len(records(state))
        for i in range(args.injections):
            kind = KINDS[i % len(KINDS)]
            target, fkind, value, expect = pick(kind, rng, params.hosts)
            seen = {r["id"] for r in records(state)}
            t_call = time.time()
            faults.add(target, fkind, value)
            t_in = time.time()
            opened, wrong = None, []
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline and opened is None:
                for r in records(state):
                    if r["kind"] == "open" and r["id"] not in seen:
                        if expect in r["element"]["id"]:
                            opened = r
                        elif r["id"] not in {w["id"] for w in wrong}:
                            wrong.append(r)
                time.sleep(0.05)
            held = time.time() - t_in
            faults.clear()
            closed = None
            if opened:
                deadline = time.monotonic() + args.timeout + 20
                while time.monotonic() < deadline and closed is None:
                    closed = next((r for r in records(state) if r["id"] == opened["id"]
                                   and r["kind"] == "close"), None)
                    time.sleep(0.2)
            from fleetctl.lens.eventlog import parse_time

            row = {"kind": kind, "target": target, "metric": opened and opened["metric"],
                   "time_to_culprit_s": round(parse_time(opened["time"]) - t_in, 3)
                   if opened else None,
                   "from_call_s": round(parse_time(opened["time"]) - t_call, 3) if opened else None,
                   "held_s": round(held, 2), "closed": closed is not None,
                   "false_events": [f"{w['element']['id']} {w['metric']}" for w in wrong]}
            rows.append(row)
            st = status(lab)
            for a in st.get("agents", []):
                if a.get("alive"):
                    cpu.append(a["cpu_pct"])
                    pps.append(a["pps"])
            print(json.dumps(row), flush=True)
            time.sleep(3)
        events_total = len(records(state)) - warm
        fleetctl(lab, "lens", "stop")
    ttc = [r["time_to_culprit_s"] for r in rows if r["time_to_culprit_s"] is not None]
    by_kind = {k: pct([r["time_to_culprit_s"] for r in rows if r["kind"] == k
                       and r["time_to_culprit_s"] is not None], 0.5) for k in KINDS}
    out = {"hosts": params.hosts, "nics_per_host": 2, "rate_per_pair": args.rate,
           "k_open": args.k_open or LensOptions().k_open,
           "transport": args.transport, "injections": len(rows), "detected": len(ttc),
           "time_to_culprit_s": {"p50": pct(ttc, 0.5), "p95": pct(ttc, 0.95),
                                 "max": max(ttc) if ttc else None, "p50_by_kind": by_kind},
           "false_events": sum(len(r["false_events"]) for r in rows),
           "closed_after_clearing": sum(r["closed"] for r in rows),
           "event_records": events_total,
           "agent_cpu_pct_per_host": {"p50": pct(cpu, 0.5), "p95": pct(cpu, 0.95)},
           "agent_pps_per_host_p50": pct(pps, 0.5), "rows": rows}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
