#!/usr/bin/env python3
"""What a storm of detections costs act in reads of Slurm's node states, at 3 cluster sizes. Prints JSON.

    python benchmarks/act_storm_reads.py [--sizes 1000,4000,10000] [--storm-pct 30]

A storm: an Xid on `storm-pct` % of one partition's nodes, handled by act's engine with a drain +
notify policy, the breaker at 10 % (act.breaker_pct) and drains limited to 4 an hour
(act.max_drains_per_hour). The engine runs against an in-memory Slurm (tests/unit/actfixtures.py:
the same engine code the lab runs against real Slurm, at sizes the lab cannot have) that counts
`nodes()` calls, each of which is one `scontrol show node --oneliner` of the whole cluster on a real
one; `parse_s_per_read` is fleetctl's parsing of such an output of that size (generated in Slurm's
format), the part of a read that grows with the cluster on this side.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "unit"))

from actfixtures import MemSlurm, audit_report  # noqa: E402
from fleetctl.act import detections  # noqa: E402
from fleetctl.act.config import ActConfig  # noqa: E402
from fleetctl.act.engine import Engine  # noqa: E402
from fleetctl.act.policies import parse_policies  # noqa: E402
from fleetctl.slurm.parse import parse_nodes  # noqa: E402

POLICY = {"name": "xid", "source": "audit", "codes": ["xid.79"], "actions": ["drain", "notify"],
          "webhook": "http://127.0.0.1:9/x", "cooldown_s": 0}
LINE = ("NodeName={n} Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUEfctv=224 CPUTot=224 CPULoad=0.50 "
        "AvailableFeatures=h100,rack{r} ActiveFeatures=h100,rack{r} Gres=gpu:h100:8 NodeAddr={n} NodeHostName={n} "
        "Version=24.11.5 OS=Linux RealMemory=2000000 AllocMem=0 FreeMem=1900000 Sockets=2 Boards=1 State=IDLE "
        "ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu BootTime=2026-11-01T00:00:00 "
        "SlurmdStartTime=2026-11-01T00:01:00 LastBusyTime=2026-12-03T09:00:00 CfgTRES=cpu=224,mem=2000000M,gres/gpu=8 "
        "AllocTRES= CurrentWatts=0 AveWatts=0")


class CountingSlurm(MemSlurm):
    def __init__(self, names):
        super().__init__(names, partition="gpu")
        self.reads = 0

    def nodes(self, nodes=None):
        if nodes is None:
            self.reads += 1
        return super().nodes(nodes)


def storm(size: int, pct: float, tmp: str) -> dict:
    names = [f"gpu{i:05d}" for i in range(1, size + 1)]
    slurm = CountingSlurm(names)
    config = ActConfig(enabled=True, state_dir=os.path.join(tmp, f"act{size}"), breaker_pct=10.0,
                       max_drain_pct=100.0, max_drains_per_hour=4, webhook_timeout_s=0.2)
    engine = Engine(slurm, parse_policies([POLICY]), config, dry_run=False)
    hit = names[: int(size * pct / 100)]
    dets = list(detections.from_audit_report(audit_report({n: "xid.79" for n in hit}, action="reboot")))
    t0 = time.perf_counter()
    decisions = []
    with engine.one_pass():  # as `act run` handles one pass's detections
        for det in dets:
            decisions += engine.handle(det)
    elapsed = time.perf_counter() - t0
    text = "\n".join(LINE.format(n=n, r=i // 18) for i, n in enumerate(names))
    t1 = time.perf_counter()
    parsed = parse_nodes(text)
    parse_s = time.perf_counter() - t1
    assert len(parsed) == size
    drains = sum(1 for d in decisions if d["action"] == "drain" and d["phase"] == "done")
    return {"nodes": size, "detections": len(dets), "drains_done": drains,
            "node_state_reads": slurm.reads, "reads_per_detection": round(slurm.reads / max(1, len(dets)), 4),
            "engine_s": round(elapsed, 3), "engine_ms_per_detection": round(1000 * elapsed / max(1, len(dets)), 3),
            "parse_s_per_read": round(parse_s, 4),
            "read_parse_s_total": round(parse_s * slurm.reads, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,4000,10000")
    ap.add_argument("--storm-pct", type=float, default=30.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [storm(int(s), args.storm_pct, tmp) for s in args.sizes.split(",")]
    print(json.dumps({"storm_pct": args.storm_pct, "breaker_pct": 10.0, "max_drains_per_hour": 4,
                      "sizes": rows}, indent=2))


if __name__ == "__main__":
    main()
