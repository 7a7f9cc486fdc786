"""The fuzzers of the C plugins (issue 20; docs/security.md, "The C plugins"), built apart from the
hardened production build with gcc's ASan and UBSan, every report fatal:

- `make -C nccl_plugin fuzz`: nccl_plugin/tests/fuzz_net.c, a hostile peer over real sockets against
  the sanitized libnccl-net-fleet.so (random bytes and valid-looking frames with hostile fields, on
  both sides of a connection, HELLOs on the listening sockets, handles), checking what the plugin
  reports against what the peer sent; and tests/hostile.c's regression scenarios, sanitized.
- `make -C spank_plugin fuzz`: spank_plugin/tests/fuzz_spank.c, the SPANK plugin's own objects on a
  mock SPANK API: plugstack arguments, option values, the env_file reader, counters directories.

In CI each fuzzer runs for a fixed time (NCCL_SECONDS and SPANK_SECONDS below, about 30 s in all
with the builds). FLEETCTL_FUZZ=N runs each fuzzer N times as long (FLEETCTL_FUZZ=180: an hour);
FLEETCTL_FUZZ_SEED=N picks the seed (default: today's UTC date as YYYYMMDD, so a day's runs agree).
A failure prints the seed of the failing iteration and the command that replays it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NCCL, SPANK = ROOT / "nccl_plugin", ROOT / "spank_plugin"
NCCL_SECONDS, SPANK_SECONDS = 15.0, 5.0  # CI budget; FLEETCTL_FUZZ=N runs N times as long
SANITIZER_ENV = {"ASAN_OPTIONS": "abort_on_error=0:detect_leaks=1:strict_string_checks=1",
                 "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
SANITIZER_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:")


def _seconds(default: float) -> float:
    """The CI budget times FLEETCTL_FUZZ (tests/support/fuzz.py: one knob for every fuzzer)."""
    from tests.support.fuzz import scale

    return default * scale()


def _seed() -> int:
    value = os.environ.get("FLEETCTL_FUZZ_SEED")
    return int(value) if value else int(time.strftime("%Y%m%d", time.gmtime()))


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what}: scripts/install provides it, so CI must have it")
    pytest.skip(what)


def _make(directory: Path) -> None:
    if shutil.which("make") is None or shutil.which("gcc") is None:
        _missing("make and gcc are needed for the fuzz builds")
    proc = subprocess.run(["make", "-s", "-j1", "-C", str(directory), "fuzz"], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0 and "cannot find -lasan" in proc.stderr + proc.stdout:
        _missing("gcc's libasan is not installed")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def nccl_fuzz() -> Path:
    _make(NCCL)
    return NCCL / "build" / "fuzz"


@pytest.fixture(scope="module")
def spank_fuzz() -> Path:
    if not Path("/usr/include/slurm/spank.h").is_file():
        _missing("slurm/spank.h is not installed (libslurm-dev)")
    _make(SPANK)
    return SPANK / "build" / "fuzz"


def _run(cmd: list[str], status: Path, seconds: float, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120,
                          env={**os.environ, **SANITIZER_ENV, **(env or {})})
    where = status.read_text().strip() if status.exists() else "(no status)"
    report = f"{where}\n--- stderr ---\n{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-2000:]}"
    assert not SANITIZER_REPORT.search(proc.stderr), report
    assert proc.returncode == 0, report
    return proc


def test_nccl_wire_fuzzer(nccl_fuzz, tmp_path):
    seconds = _seconds(NCCL_SECONDS)
    status = tmp_path / "status"
    proc = _run([str(nccl_fuzz / "fleet_fuzz"), "--lib", str(nccl_fuzz / "libnccl-net-fleet.so"),
                 "--seconds", str(seconds), "--seed", str(_seed()), "--status", str(status)], status, seconds)
    summary = [line for line in proc.stdout.splitlines() if line.startswith("fuzz: ")]
    assert len(summary) == 2 and "no violation" in summary[0], proc.stdout
    # a fuzzer that checked nothing must not pass: every kind of iteration ran and its properties held
    modes = dict(re.findall(r"(recv|send|hello|handle) (\d+)", summary[0]))
    assert all(int(modes[m]) > 0 for m in ("recv", "send", "hello", "handle")), summary[0]
    checked = summary[1]
    for what in ("received messages", "late chunks", "sends acknowledged", "honest HELLOs accepted",
                 "handles refused", "malformed frames refused"):
        number = re.search(r"(\d+) " + what, checked)
        assert number and int(number.group(1)) > 0, (what, checked)


@pytest.mark.parametrize("scenario", ["late-chunk", "late-chunk --free", "late-chunk-256", "late-chunk-256 --free",
                                      "handle-pointer", "registry", "pending-flood", "props"])
def test_hostile_scenarios_under_sanitizers(nccl_fuzz, tmp_path, scenario):
    """tests/hostile.c's regressions (defects 3, 8, 9, 10) with ASan: --free hands a completed
    message's buffer back to the allocator, so a late write into it is a heap-use-after-free."""
    env = {"FLEET_NET_IFACES": "127.0.0.1,127.0.0.2", "FLEET_NET_COUNTERS_DIR": "off"}
    proc = _run([str(nccl_fuzz / "fleet_hostile"), "--lib", str(nccl_fuzz / "libnccl-net-fleet.so"),
                 *scenario.split()], tmp_path / "none", 60, env)
    assert proc.stdout.strip() == f"ok {scenario.split()[0]}"


def test_spank_fuzzer(spank_fuzz, tmp_path):
    seconds = _seconds(SPANK_SECONDS)
    status = tmp_path / "status"
    proc = _run([str(spank_fuzz / "fleet_fuzz_spank"), "--seconds", str(seconds), "--seed", str(_seed()),
                 "--status", str(status)], status, seconds)
    line = proc.stdout.strip().splitlines()[-1]
    assert "no violation" in line, proc.stdout
    for what in ("accepted", "refused;", "option values", "tasks' environments", "read,", "prepared"):
        number = re.search(r"(\d+) " + re.escape(what), line)
        if what == "prepared" and os.geteuid() != 0:
            continue  # counters directories are prepared as root only
        assert number and int(number.group(1)) > 0, (what, line)
