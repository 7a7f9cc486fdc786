#!/usr/bin/env python3
"""What one `fleetctl job watch` poll costs as a job grows: reading every rank's progress file and
judging them, at 3+ job sizes. Prints JSON.

    python benchmarks/recovery_watch_scale.py [--ranks 1000,10000,50000]

The files are written by the real writer's format into a temporary directory on this machine's disk
(a shared filesystem adds its own latency per file); the judge runs on them as `job watch` does.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetctl.recovery.signals import judge, read_ranks  # noqa: E402


def one(size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "7"
        d.mkdir()
        now = time.time()
        for r in range(size):
            doc = {"v": 1, "job": "7", "rank": r, "node": f"gpu{r // 8:05d}", "pid": 1000 + r, "iteration": 500,
                   "time": now, "started": now - 600, "progress_time": now, "phase": "compute",
                   "phase_since": now, "iteration_s": 0.5, "compute_s": 0.3 + (r % 7) * 0.001, "samples": 32}
            (d / f"rank-{r}.json").write_text(json.dumps(doc))
        t0 = time.perf_counter()
        ranks, skipped = read_ranks(tmp, "7")
        t1 = time.perf_counter()
        signals = judge(ranks, now + 1)
        t2 = time.perf_counter()
        return {"ranks": size, "read_s": round(t1 - t0, 3), "judge_s": round(t2 - t1, 4),
                "poll_s": round(t2 - t0, 3), "signals": len(signals), "skipped": skipped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1000,10000,50000")
    args = ap.parse_args()
    print(json.dumps({"sizes": [one(int(s)) for s in args.ranks.split(",")]}, indent=2))


if __name__ == "__main__":
    main()
