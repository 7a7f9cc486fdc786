"""Wall time of `fleetctl exec` (ssh transport) vs `pdsh -R ssh` running the same command on the same
lab hosts, at 4, 8 and 16 hosts, measured in one run. Goal: fleetctl no slower than pdsh (ratio <= 1).

Both are timed as a user sees them: a fresh process each time (interpreter start and imports included
for fleetctl, one `ssh` process per host for pdsh), strict host-key checking with the lab's known_hosts
and key for both. Runs alternate between the two tools so that load from other processes hits both.

    python benchmarks/exec_vs_pdsh.py [--sizes 4,8,16] [--repeats 7] [--command "uname -r"] [--running]

Without --running it brings up a lab of max(sizes) hosts for the run (and tears it down); with
--running it uses the lab that is up (which must have enough hosts). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from fleetctl.config import load_site
from fleetctl.nodeset import fold


def ssh_config(site, nodes: list[str], path: Path) -> None:
    """An ssh_config giving pdsh's ssh the lab's user, key, known_hosts and node addresses."""
    ssh = site.access["ssh"]
    lines = ["Host *", f"  User {ssh['user']}", f"  IdentityFile {ssh['identity_file']}",
             "  IdentitiesOnly yes", f"  UserKnownHostsFile {ssh['known_hosts']}",
             "  GlobalKnownHostsFile /dev/null", "  StrictHostKeyChecking yes", "  BatchMode yes",
             f"  Port {ssh['port']}", "  LogLevel ERROR"]
    for node in nodes:
        lines += [f"Host {node}", f"  HostName {ssh['addresses'].get(node, node)}"]
    path.write_text("\n".join(lines) + "\n")


def timed(argv: list[str], env: dict, expect_lines: int) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or len(lines) < expect_lines:
        raise SystemExit(f"{argv[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}")
    return took


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "runs": [round(v, 4) for v in values]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,8,16")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--command", default="uname -r")
    ap.add_argument("--running", action="store_true", help="use the lab that is up")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not shutil.which("pdsh"):
        raise SystemExit("pdsh is not installed (apt-get install pdsh)")

    if args.running:
        from fleetctl.lab.paths import active_site

        site_path = active_site()
        if site_path is None:
            raise SystemExit("no lab is up (drop --running to bring one up)")
        session = nullcontext(None)
    else:
        from fleetctl.lab.session import LabSession
        from fleetctl.lab.topology import LabParams

        session = LabSession(LabParams(hosts=max(sizes), nics_per_host=1, leaves=2, spines=1,
                                       gpus_per_host=0, slurm=False, ssh=True))
    with session as lab, tempfile.TemporaryDirectory(prefix="fleetctl-bench-") as tmp:
        site_file = str(lab.site_file) if lab is not None else str(site_path)
        site = load_site(site_file)
        nodes = list(site.nodes)
        if len(nodes) < max(sizes):
            raise SystemExit(f"the lab has {len(nodes)} hosts; {max(sizes)} needed")
        cfg = Path(tmp) / "ssh_config"
        ssh_config(site, nodes, cfg)
        env = dict(os.environ, FLEETCTL_SITE=site_file, PDSH_SSH_ARGS=f"-F {cfg} -l%u %h",
                   PDSH_RCMD_TYPE="ssh")
        fleetctl = [sys.executable, "-m", "fleetctl"]
        results = []
        for k in sizes:
            target = fold(nodes[:k])
            runs = {"fleetctl": [], "pdsh": []}
            argvs = {"fleetctl": [*fleetctl, "exec", "-t", "ssh", "--no-fold", target, "--", args.command],
                     "pdsh": ["pdsh", "-R", "ssh", "-f", "64", "-w", target, args.command]}
            timed(argvs["fleetctl"], env, k)  # warm the page cache for both before timing
            timed(argvs["pdsh"], env, k)
            for i in range(args.repeats):
                order = ("fleetctl", "pdsh") if i % 2 == 0 else ("pdsh", "fleetctl")
                for tool in order:
                    runs[tool].append(timed(argvs[tool], env, k))
            f, p = statistics.median(runs["fleetctl"]), statistics.median(runs["pdsh"])
            results.append({"hosts": k, "nodes": target, "fleetctl_s": summary(runs["fleetctl"]),
                            "pdsh_s": summary(runs["pdsh"]), "ratio": round(f / p, 3)})
    print(json.dumps({
        "benchmark": "exec_vs_pdsh", "command": args.command, "repeats": args.repeats,
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "results": results, "goal": "ratio (fleetctl median / pdsh median) <= 1.0",
        "goal_met": all(r["ratio"] <= 1.0 for r in results),
    }, indent=2))


if __name__ == "__main__":
    main()
