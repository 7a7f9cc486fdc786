"""Record what a real GPU node reports, as test fixtures: `python -m fleetctl.checks.record OUTDIR`.

Writes nvml.json (the GPU record read through NVML), nvidia-smi-query.csv and
nvidia-smi-remapped-rows.csv (the raw output of the exact queries the payload runs), nvidia-smi-q.txt
(`nvidia-smi -q`, for reference) and payload.json (the quick-level document). Run it once on a GPU node
and copy the directory to tests/fixtures/checks/recorded/<model>/: the tests then judge real values.
Files are written with fleetctl.atomic (root on a GPU node must not follow a link planted in OUTDIR).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.checks.payload.common import Deadline
from fleetctl.checks.payload.gpu_collect import REMAP_FIELDS, SMI_FIELDS, collect_nvml
from fleetctl.checks.payload.runner import run_checks
from fleetctl.errors import DataError


def _smi(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(["nvidia-smi", *argv], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def record(outdir: Path) -> list[str]:
    """Write what this node's NVML and nvidia-smi report; returns the files written."""
    outdir.mkdir(parents=True, exist_ok=True)
    written, problems = [], []
    try:
        import pynvml

        write_atomic(outdir / "nvml.json", json.dumps(collect_nvml(pynvml), indent=2) + "\n")
        written.append("nvml.json")
    except Exception as exc:  # ImportError, NVMLError: say which, keep going with nvidia-smi
        problems.append(f"NVML: {exc}")
    for name, argv in (("nvidia-smi-query.csv", ["--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"]),
                       ("nvidia-smi-remapped-rows.csv", ["--query-remapped-rows=" + ",".join(REMAP_FIELDS),
                                                         "--format=csv,noheader,nounits"]),
                       ("nvidia-smi-q.txt", ["-q"])):
        if shutil.which("nvidia-smi") is None:
            problems.append("nvidia-smi not found")
            break
        out = _smi(argv)
        if out is None:
            problems.append(f"nvidia-smi failed for {name}")
            continue
        write_atomic(outdir / name, out)
        written.append(name)
    if not written:
        raise DataError("nothing to record: " + "; ".join(problems), hint="run this on a GPU node")
    doc = run_checks({"level": "quick", "budget_s": 30}, Deadline(30, count_process_age=False))
    write_atomic(outdir / "payload.json", json.dumps(doc, indent=2, default=str) + "\n")
    return written + ["payload.json"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m fleetctl.checks.record OUTDIR", file=sys.stderr)
        return 3
    try:
        files = record(Path(argv[0]))
    except DataError as exc:
        print(f"fleetctl.checks.record: {exc.message}", file=sys.stderr)
        return 3
    print(f"recorded {', '.join(files)} in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
