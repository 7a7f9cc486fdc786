#!/usr/bin/env python3
"""`fleetctl failover drill` on the 4-host lab: first host -> last host over both NICs, the lab's faults
(a NIC down, then flapping) for --trials rounds. Prints the drill's JSON report (summary: detection,
resume, fail-back p50/max; throughput before/during/after; integrity).

    sudo python benchmarks/failover_drill_lab.py [--trials 5] [--fault both]

Takes the lab's session lock (waits for running test sessions) and tears the lab down afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fleetctl.cli import run  # noqa: E402
from fleetctl.lab.session import LabSession  # noqa: E402
from fleetctl.lab.topology import LabParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--fault", default="both", choices=["down", "flap", "both"])
    ap.add_argument("--hold", type=float, default=2.0)
    args = ap.parse_args()
    with LabSession(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2)) as lab:
        os.environ.update(lab.env)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = run(["--format", "json", "--site", str(lab.site_file), "failover", "drill", lab.nodes[0],
                      lab.nodes[-1], "--trials", str(args.trials), "--fault", args.fault, "--hold", str(args.hold)])
    report = json.loads(out.getvalue())
    print(json.dumps({"benchmark": "failover_drill_lab", "exit": rc, **report}, indent=2))


if __name__ == "__main__":
    main()
