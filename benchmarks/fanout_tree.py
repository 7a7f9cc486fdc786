#!/usr/bin/env python3
"""Fan-out at fleet sizes: the ssh transport (one paramiko session per node from this process)
against the clush transport in tree mode (ClusterShell gateways, one per lab leaf), and `audit` against a bare
fan-out. Prints JSON.

    sudo python benchmarks/fanout_tree.py [--hosts 64] [--leaves 8] [--nodes 64,256,1024] [--repeats 3]
                                          [--running]

The lab has a few dozen sshds, not a thousand: the larger sizes are node *names* (v0001...) that an
ssh_config and the site's address map point round-robin at the lab's hosts, so every name is a real
ssh session to a real sshd that runs `true`. All sshds and gateways share this machine's cores with
the client, so wall times are bound by the node side; the figure that carries to a real fleet is
the CPU this machine's fleetctl process (with its own ssh children) spends per node, measured by
RUSAGE_CHILDREN.

- `exec`: `fleetctl exec NODES -- true` with `-t ssh` and `-t clush` (the lab site names a gateway
  per leaf, so clush runs as a tree), fresh processes, alternating.
- `audit`: `fleetctl audit --level standard` of the lab's real hosts against `exec -- true` of the
  same hosts in the same transport (issue 22's goal: audit <= 1.3x the bare fan-out at 64 hosts).
Without --running it brings up a lab of --hosts hosts (no Slurm) and tears it down after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from contextlib import nullcontext
from pathlib import Path

from fleetctl.lab.sitefile import to_toml
from fleetctl.nodeset import fold


def run_timed(argv: list[str], env: dict) -> dict:
    """Wall time and CPU of one run: user + sys of the process and of the children it waited for
    (its ssh clients), from this process's RUSAGE_CHILDREN before and after (one child at a time)."""
    before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env)
    wall = time.perf_counter() - start
    data = json.loads(proc.stdout) if proc.stdout.strip().startswith(b"{") else {}
    return {"wall_s": wall, "cpu_s": _children_cpu() - before, "rc": proc.returncode,
            "summary": data.get("summary", {}), "stderr": proc.stderr.decode("utf-8", "replace")[-300:]}


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def virtual_site(lab_site: Path, hosts: list[str], addresses: dict, count: int, tmp: Path) -> tuple[Path, list[str]]:
    """A copy of the lab's site file naming `count` extra nodes that point round-robin at the lab's
    hosts, for both transports (the address map for paramiko, an ssh_config for OpenSSH)."""
    doc = tomllib.loads(lab_site.read_text())
    names = [f"v{i:05d}" for i in range(1, count + 1)]
    mapping = {name: addresses[hosts[i % len(hosts)]] for i, name in enumerate(names)}
    doc["access"]["ssh"]["addresses"] = {**addresses, **mapping}
    config = tmp / f"ssh_config.{count}"
    base = Path(doc["access"]["clush"]["ssh_config"]).read_text()
    config.write_text(base + "".join(f"Host {n}\n  HostName {a}\n" for n, a in mapping.items()))
    doc["access"]["clush"]["ssh_config"] = str(config)
    doc["access"]["concurrency"] = 64
    site = tmp / f"site.{count}.toml"
    site.write_text(to_toml(doc))
    return site, names


def summarize(runs: list[dict], nodes: int) -> dict:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] for r in runs]
    return {"wall_s_median": round(statistics.median(walls), 3), "wall_s": [round(w, 3) for w in walls],
            "cpu_s_median": round(statistics.median(cpus), 3),
            "cpu_ms_per_node": round(1000 * statistics.median(cpus) / nodes, 3),
            "ok": [r["summary"].get("ok") for r in runs], "rc": [r["rc"] for r in runs],
            "errors": sorted({r["stderr"].strip()[-200:] for r in runs if r["rc"] not in (0,)})[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--leaves", type=int, default=8)
    ap.add_argument("--nodes", default="64,256,1024")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--running", action="store_true", help="use the lab that is up")
    args = ap.parse_args()
    sizes = [int(s) for s in args.nodes.split(",")]
    fleetctl = [sys.executable, "-m", "fleetctl"]
    if args.running:
        from fleetctl.lab.paths import active_site

        site_path = active_site()
        if site_path is None:
            raise SystemExit("no lab is up (drop --running to bring one up)")
        session = nullcontext(None)
    else:
        from fleetctl.lab.session import LabSession
        from fleetctl.lab.topology import LabParams

        session = LabSession(LabParams(hosts=args.hosts, nics_per_host=1, leaves=args.leaves, spines=2,
                                       slurm=False))
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "repeats": args.repeats}
    with session as lab, tempfile.TemporaryDirectory() as tmp:
        if lab is not None:
            site_path = lab.site_file
        doc = tomllib.loads(Path(site_path).read_text())
        addresses = doc["access"]["ssh"]["addresses"]
        hosts = sorted(addresses, key=lambda n: int(n[4:]))
        env = {**os.environ, "FLEETCTL_SITE": str(site_path)}
        out["lab_hosts"], out["gateways"] = len(hosts), doc["access"]["clush"]["gateways"]
        out["exec"] = []
        for count in sizes:
            site, names = virtual_site(Path(site_path), hosts, addresses, count, Path(tmp))
            runs: dict[str, list] = {"ssh": [], "clush": []}
            for _ in range(args.repeats):
                for transport in runs:
                    runs[transport].append(run_timed(
                        fleetctl + ["exec", "--site", str(site), "-t", transport, fold(names), "--format", "json",
                                    "--", "true"], env))
            row = {"nodes": count, **{t: summarize(r, count) for t, r in runs.items()}}
            row["clush_tree_cpu_vs_ssh"] = round(row["clush"]["cpu_s_median"] / row["ssh"]["cpu_s_median"], 3)
            out["exec"].append(row)
            print(json.dumps(row), file=sys.stderr)
        out["audit"] = []
        for transport in ("ssh", "clush"):
            runs = {"exec": [], "audit": []}
            for _ in range(args.repeats):
                runs["exec"].append(run_timed(fleetctl + ["exec", "-t", transport, fold(hosts), "--format", "json",
                                                          "--", "true"], env))
                runs["audit"].append(run_timed(fleetctl + ["audit", fold(hosts), "-t", transport, "--level",
                                                           "standard", "--since", "1s", "--format", "json"], env))
            row = {"transport": transport, "hosts": len(hosts),
                   **{k: summarize(v, len(hosts)) for k, v in runs.items()}}
            row["audit_vs_exec"] = round(row["audit"]["wall_s_median"] / row["exec"]["wall_s_median"], 3)
            out["audit"].append(row)
            print(json.dumps(row), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
