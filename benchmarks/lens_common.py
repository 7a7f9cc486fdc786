"""Shared by the lens benchmarks: a lab with lens running in the background, event polling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


SITE = {}  # "path": a site file to use instead of the lab's (lens settings changed)


def lens_site(lab, **lens_keys) -> None:
    """Use a copy of the lab's site file with these [lens] keys added."""
    text = Path(lab.site_file).read_text()
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in lens_keys.items())
    path = Path(lab.site_file).with_name("site-lens-bench.toml")
    path.write_text(text.replace("[lens]\n", "[lens]\n" + extra, 1))
    SITE["path"] = str(path)


def fleetctl(lab, *args, timeout=120) -> subprocess.CompletedProcess:
    env = lab.command_env()
    env["FLEETCTL_SITE"] = SITE.get("path") or str(lab.site_file)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def start_lens(lab, rate: float, extra=()) -> Path:
    state = Path(lab.cluster.data["lens"]["state_dir"])
    r = fleetctl(lab, "--format", "json", "lens", "run", "--rate", str(rate), *extra)
    if r.returncode != 0:
        raise SystemExit(f"lens run failed: {r.stderr}")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if status(lab).get("counters", {}).get("windows", 0) >= 3:
            return state
        time.sleep(0.5)
    raise SystemExit("lens did not start analysing within 90 s")


def status(lab) -> dict:
    return json.loads(fleetctl(lab, "--format", "json", "lens", "status").stdout or "{}")


def records(state: Path) -> list[dict]:
    path = state / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
