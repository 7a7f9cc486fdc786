"""The C harness of the fleet plugin (nccl_plugin/tests/harness.c, built by `make -C nccl_plugin`)
and what its runs leave behind: result lines, the sender's trace and progress files, the plugin's
event log. Shared by `fleetctl failover drill`, the plugin's tests and benchmarks/failover_resume.py.

The harness drives libnccl-net-fleet.so as NCCL's proxy does and checks every byte; its result line:
{"role", "version", "plain", "messages", "bytes", "corrupt", "duplicated", "lost", "seconds", "gbps",
"error"}; exit 0 ok, 1 bad data, 2 usage/setup, 3 transport error.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fleetctl.errors import DataError
from fleetctl.failover import FailoverError
from fleetctl.filekit import loads_json

MAX_LINE = 4096
MAX_TRACE_LINES = 20_000_000
MAX_EVENT_LINES = 1_000_000

# The drill needs a source checkout: fleet_harness is a test program, built next to the plugin by
# `make -C nccl_plugin` (scripts/install), never installed. These variables point elsewhere.
SOURCE_BUILD_DIR = Path(__file__).resolve().parents[2] / "nccl_plugin" / "build"
HARNESS_ENV = "FLEETCTL_FAILOVER_HARNESS"
LIB_ENV = "FLEETCTL_FAILOVER_LIB"


@dataclass(frozen=True)
class HarnessFiles:
    harness: Path  # fleet_harness
    lib: Path  # libnccl-net-fleet.so, which the harness drives


def locate(build_dir: Path = SOURCE_BUILD_DIR) -> HarnessFiles:
    """The harness and the plugin library: FLEETCTL_FAILOVER_HARNESS / FLEETCTL_FAILOVER_LIB when
    set, else those in `build_dir`; a FailoverError naming each path looked at when one is missing."""
    files = HarnessFiles(Path(os.environ.get(HARNESS_ENV) or build_dir / "fleet_harness"),
                         Path(os.environ.get(LIB_ENV) or build_dir / "libnccl-net-fleet.so"))
    missing = []
    if not (files.harness.is_file() and os.access(files.harness, os.X_OK)):
        missing.append(str(files.harness))
    if not files.lib.is_file():
        missing.append(str(files.lib))
    if missing:
        raise FailoverError(f"the fleet plugin's harness is not built: no {' and no '.join(missing)}",
                            hint=f"in a source checkout run ./scripts/install (make -C {build_dir.parent}), "
                                 f"or set {HARNESS_ENV} and {LIB_ENV}")
    return files


def results(stdout: str) -> list[dict]:
    """The harness's JSON result lines (anything else on stdout is ignored)."""
    out = []
    for line in stdout.splitlines()[:1000]:
        if line.startswith("{") and len(line) <= MAX_LINE:
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(doc, dict):
                out.append(doc)
    return out


def progress_bytes(path: Path) -> int:
    """Bytes the sender has completed (its --progress file: "bytes msgs mono_ns"); 0 when unreadable."""
    try:
        return int(Path(path).read_text()[:200].split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def finish(procs: list[subprocess.Popen], timeout: float = 60) -> list[tuple[int, list[dict], str]]:
    """Wait for each harness process (killed after `timeout`): (exit code, result lines, stderr)."""
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out.append((p.returncode, results(so or ""), se or ""))
    return out


def _lines(path: Path, limit: int):
    """At most `limit` lines of a file the harness or the plugin wrote (none if it cannot be read)."""
    try:
        with open(path) as fh:
            for n, line in enumerate(fh):
                if n >= limit:
                    return
                yield line
    except OSError:
        return


def read_trace(path: Path) -> list[tuple[int, int, int, int]]:
    """The sender's --trace file: (index, size, post_ns, done_ns) per completed message."""
    rows = []
    for line in _lines(path, MAX_TRACE_LINES):
        parts = line.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            rows.append(tuple(int(x) for x in parts))
    return rows


def read_events(path: Path) -> list[dict]:
    """The plugin's FLEET_NET_LOG (JSON lines); damaged lines are skipped."""
    out = []
    for line in _lines(path, MAX_EVENT_LINES):
        try:
            doc = loads_json(line[:MAX_LINE], "plugin event", kind=dict)
        except DataError:  # not JSON, or nested too deep (a line of 4096 '[')
            continue
        if isinstance(doc.get("event"), str):
            out.append(doc)
    return out


def pct(values: list[float], q: float) -> float | None:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))] if s else None


def resume_ms(trace: list[tuple[int, int, int, int]], t_down_ns: int, t_up_ns: int) -> float:
    """The longest time without a completed send between the fault and the link's return: the stall
    the fault caused, detection plus replay (a healthy stream completes a message every fraction of
    a millisecond). The fault command takes a few ms to act, hence no earlier anchor than its start."""
    dones = sorted(done for _, _, _, done in trace if t_down_ns <= done <= t_up_ns)
    if not dones:
        return (t_up_ns - t_down_ns) / 1e6
    points = [t_down_ns, *dones]
    return max(b - a for a, b in zip(points, points[1:])) / 1e6


def gbps(trace: list[tuple[int, int, int, int]], start_ns: int, end_ns: int) -> float | None:
    """Throughput of the completed sends within [start, end) in Gbit/s; None for an empty window."""
    if end_ns <= start_ns:
        return None
    total = sum(size for _, size, _, done in trace if start_ns <= done < end_ns)
    return round(total * 8 / ((end_ns - start_ns) / 1e9) / 1e9, 3)
