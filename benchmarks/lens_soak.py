#!/usr/bin/env python3
"""Clean soak of `fleetctl lens` on the 8-host lab: no fault for `--minutes`; prints JSON with the
events written (all false), the windows with a host-side delay note, the coordinator's memory (RSS sampled every 10 s: first, last, max and
the slope of a line fitted to the second half), its CPU and the agents' CPU per host.

    python benchmarks/lens_soak.py [--minutes 10] [--rate 100] [--transport local|ssh]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from lens_common import cpu_s, fleetctl, records, rss_kib, start_lens, status

from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import LabParams


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--transport", default="local", choices=("local", "ssh"))
    args = ap.parse_args()
    params = LabParams(hosts=8, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                       clock_skew=True, slurm=False, ssh=args.transport == "ssh")
    samples, cpu = [], []
    with LabSession(params) as lab:
        state = start_lens(lab, args.rate)
        pid = status(lab)["pid"]
        before = len(records(state))
        t0, c0 = time.time(), cpu_s(pid)
        while time.time() - t0 < args.minutes * 60:
            time.sleep(10)
            st = status(lab)
            samples.append((time.time() - t0, rss_kib(pid)))
            cpu += [a["cpu_pct"] for a in st.get("agents", []) if a.get("alive")]
        coord_cpu = (cpu_s(pid) - c0) / (time.time() - t0) * 100
        st = status(lab)
        events = records(state)[before:]
        fleetctl(lab, "lens", "stop")
    half = samples[len(samples) // 2:]
    xs, ys = [s[0] for s in half], [s[1] for s in half]
    slope = statistics.linear_regression(xs, ys).slope * 3600 if len(half) > 1 else None
    out = {"minutes": args.minutes, "rate_per_pair": args.rate, "hosts": params.hosts,
           "events": len(events), "event_elements": [e["element"]["id"] for e in events][:20],
           "windows": st.get("counters", {}).get("windows"),
           # windows in which triangulation named anything: with k_open 1 each would be an event
           "windows_with_findings": st.get("counters", {}).get("windows_with_findings", 0),
           # windows with a probe.host_delay note (a host's own side, not an event)
           "windows_with_host_side_delay":
               st.get("counters", {}).get("windows_with_host_side_delay", 0),
           "analysis_s_max": st.get("counters", {}).get("analysis_s_max"),
           "rss_kib": {"first": samples[0][1], "last": samples[-1][1],
                       "max": max(s[1] for s in samples),
                       "slope_kib_per_hour_second_half": round(slope, 1) if slope else None},
           "coordinator_cpu_pct": round(coord_cpu, 1),
           "agent_cpu_pct_per_host_p50": sorted(cpu)[len(cpu) // 2] if cpu else None,
           "agent_restarts": sum(a["restarts"] for a in st.get("agents", [])),
           "samples": samples}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
