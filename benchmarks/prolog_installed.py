"""The Prolog as the packages install it: wall time of the installed hook wrapper, run as slurmd runs
it, on a clean Debian 13 system (an overlay of the lab's cached root, fleetctl.lab.debroot).

Builds both .debs and the node bundle (scripts/package), installs the .debs with apt, writes a
one-node site file, `fleetctl hook install`s the wrappers, then runs /etc/slurm/fleetctl/fleetctl-prolog
N times with slurmd's environment (no PATH, SLURM_JOB_ID, SLURMD_NODENAME), and the same with the
node bundle as FLEETCTL. Also times the floors: `python3 -I -c pass` and `fleetctl --version`.

    python benchmarks/prolog_installed.py [-n 40]

Prints one JSON object (seconds). Needs root (overlay, chroot) and the Debian archive (apt).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetctl.lab import slurmroot
from fleetctl.lab.debroot import add_one_node_cluster, build_packages, install_debs, overlay_root

GOAL_P50_S, GOAL_P99_S = 0.100, 0.300
SLURMD_ENV = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_JOB_USER": "root"}


def timed(system, argv: list[str], n: int, env: dict | None = None, clear_path: bool = False) -> dict:
    """Wall seconds of n runs of argv in the system (chroot + env -i included, as slurmd's fork+exec)."""
    walls = []
    for _ in range(n):
        start = time.perf_counter()
        if clear_path:  # slurmd gives hooks no PATH: run with an empty environment but for `env`
            pairs = [f"{k}={v}" for k, v in (env or {}).items()]
            result = subprocess.run(["chroot", str(system.merged), "env", "-i", *pairs, *argv],
                                    capture_output=True, text=True, timeout=60)
        else:
            result = system.run(*argv, env=env, timeout=60)
        walls.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{argv}: exit {result.returncode}: {result.stderr[-500:]}")
    walls.sort()
    return {"p50": round(statistics.median(walls), 4), "p99": round(walls[min(n - 1, int(0.99 * n))], 4),
            "max": round(walls[-1], 4), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=40)
    n = ap.parse_args().n
    root, _ = slurmroot.ensure_root("trixie")
    with tempfile.TemporaryDirectory() as tmp:
        debs, bundle = build_packages(Path(tmp) / "dist", root, sys.executable)
        with overlay_root(root, Path(tmp) / "root") as system:
            install_debs(system, debs)
            add_one_node_cluster(system)
            system.path("/usr/local/lib/fleetctl.pyz").write_bytes(bundle.read_bytes())
            system.path("/usr/local/lib/fleetctl.pyz").chmod(0o755)
            python = system.run("python3", "--version").stdout.strip()
            out = {"system": f"Debian 13 overlay, {python}", "goal": {"p50": GOAL_P50_S, "p99": GOAL_P99_S}}
            out["python3 -I -c pass"] = timed(system, ["/usr/bin/python3", "-I", "-c", "pass"], n)
            out["fleetctl --version"] = timed(system, ["/usr/bin/fleetctl", "--version"], n)
            for name, directory, fleetctl in (("deb", "/etc/slurm/fleetctl", "/usr/bin/fleetctl"),
                                              ("bundle", "/etc/slurm/bundle", "/usr/local/lib/fleetctl.pyz")):
                done = system.run(fleetctl, "--site", "/etc/fleetctl/site.toml", "hook", "install", directory)
                if done.returncode != 0:
                    raise SystemExit(f"hook install ({name}): {done.stderr}")
                out[f"prolog ({name})"] = timed(system, [f"{directory}/fleetctl-prolog"], n, SLURMD_ENV,
                                                clear_path=True)
            log = system.path("/var/log/fleetctl-hooks.log").read_text().splitlines()
            out["verdicts"] = sorted({line.split("verdict=")[1].split()[0] for line in log if "verdict=" in line})
            prolog = out["prolog (deb)"]
            out["goal_met"] = prolog["p50"] <= GOAL_P50_S and prolog["p99"] <= GOAL_P99_S
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
