"""CLI start-up time: wall time of `fleetctl --help` (p50/p90 over N runs), and which heavy modules
it imports (none should be: rich, paramiko, numpy, scipy, h5py, pynvml are imported lazily).

    python benchmarks/cli_startup.py [--runs 30] [--command "fleetctl inventory --help"]

Prints one JSON object. Goal (issue 2): p50 under 150 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HEAVY = ("rich", "paramiko", "numpy", "scipy", "h5py", "pynvml", "cryptography")
GOAL_MS = 150.0

_PROBE = """
import sys
from fleetctl.cli import run
try:
    run({argv!r})
finally:
    heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))
    sys.stderr.write("HEAVY=" + ",".join(heavy) + "\\n")
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--command", default="", help="command to time (default: fleetctl --help)")
    args = ap.parse_args()
    exe = shutil.which("fleetctl")
    argv = shlex.split(args.command) if args.command else ([exe] if exe else
                                                           [sys.executable, "-m", "fleetctl"]) + ["--help"]
    env = {**os.environ, "NO_COLOR": "1"}
    subprocess.run(argv, capture_output=True, env=env, check=True)  # warm the page cache and .pyc files
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=True)
        times.append((time.perf_counter() - start) * 1000)
    # The same command in-process, to list the heavy modules it imported.
    cli_args = argv[2:] if argv[:3] == [sys.executable, "-m", "fleetctl"] else argv[1:]
    probe = subprocess.run([sys.executable, "-c", _PROBE.format(argv=cli_args, heavy=HEAVY)],
                           capture_output=True, text=True, env=env)
    heavy_line = [l for l in probe.stderr.splitlines() if l.startswith("HEAVY=")]
    heavy = [m for m in heavy_line[-1].removeprefix("HEAVY=").split(",") if m] if heavy_line else None
    # Bare interpreter start, for scale: what no Python CLI can go below.
    bare = []
    for _ in range(min(args.runs, 10)):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=True)
        bare.append((time.perf_counter() - start) * 1000)
    p50 = statistics.median(times)
    print(json.dumps({
        "benchmark": "cli_startup",
        "command": " ".join(shlex.quote(a) for a in argv),
        "runs": args.runs,
        "p50_ms": round(p50, 1), "p90_ms": round(percentile(times, 0.9), 1),
        "min_ms": round(min(times), 1), "max_ms": round(max(times), 1),
        "python_bare_p50_ms": round(statistics.median(bare), 1),
        "heavy_modules_imported": heavy,
        "goal_ms": GOAL_MS, "meets_goal": p50 < GOAL_MS and heavy == [],
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "note": "machine shared with other jobs; load at measurement: " + " ".join(
            f"{x:.2f}" for x in os.getloadavg()),
    }, indent=2))


if __name__ == "__main__":
    main()
