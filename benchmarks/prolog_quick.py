"""Wall time of the quick-level node payload, interpreter start included, as a Slurm prolog sees it.

Each run pipes the built payload to a fresh `python3 -` with the quick-level arguments and waits for
its JSON document. Without --site it builds a lab-like node in a temporary directory (4 simulated H100s
from docs/simulated-gpus.md, a 10,000-line kernel log with Xid lines, the machine's own NICs); with
--site/--node it uses that site's arguments (e.g. the lab's site file), and --netns runs each payload
inside that network namespace (`nsenter --net=/run/netns/NAME`), as on a lab node; --own-netns
creates a namespace with a veth pair for the run (root), so the NIC checks take the lab's netlink path.

    python benchmarks/prolog_quick.py [-n 50] [--bare] [--own-netns] [--site FILE --node NAME [--netns NAME]]

Prints one JSON object: p50/p99/max wall seconds, the payload's own elapsed_s, goal check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetctl.checks import build_payload, payload_args
from fleetctl.config.site import load_site, parse_site
from fleetctl.errors import FleetctlError

ROOT = Path(__file__).resolve().parents[1]
GOAL_P50_S, GOAL_P99_S = 0.300, 1.0


def lab_like_site(tmp: Path, nics: str):
    sample = json.loads((ROOT / "docs/simulated-gpus.md").read_text().split("```json", 1)[1].split("```", 1)[0])
    sample["gpus"] = [dict(sample["gpus"][0], index=i) for i in range(4)]
    node = tmp / "node1"
    node.mkdir()
    (node / "gpus.json").write_text(json.dumps(sample))
    noise = "2026-11-29T15:40:00,000001+00:00 eth0: renamed from veth1234\n"
    xid = "2026-11-29T15:50:01,123456+00:00 NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=p, Graphics Exception\n"
    (node / "kern.log").write_text((noise * 99 + xid) * 100)
    text = f"""
[cluster]
name = "bench"
[checks]
kernel_log = "{tmp}/{{node}}/kern.log"
simulated_gpus = "{tmp}/{{node}}/gpus.json"
state_file = "{tmp}/{{node}}/state.json"
[[node_classes]]
name = "h100"
nodes = "node1"
mounts = ["/"]
gpus = {{ count = 4, model = "NVIDIA H100 80GB HBM3" }}
nics = [{nics}]
"""
    return parse_site(text, source="bench-site.toml"), "node1"


@contextlib.contextmanager
def own_netns():
    """A throw-away namespace with a veth pair vA/vB (MTU 9000 on vA), like a lab node's NICs."""
    name = f"fleetctl-bench-{os.getpid()}"
    ip = lambda *a: subprocess.run(["ip", *a], check=True, capture_output=True)  # noqa: E731
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "add", "vA", "type", "veth", "peer", "name", "vB")
        ip("-n", name, "link", "set", "vA", "mtu", "9000")
        for dev in ("lo", "vA", "vB"):
            ip("-n", name, "link", "set", dev, "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="runs (default 50)")
    ap.add_argument("--bare", action="store_true", help="python3 -I -S: no site-packages (no pynvml)")
    ap.add_argument("--own-netns", action="store_true", help="run inside a temporary namespace (root)")
    ap.add_argument("--site"), ap.add_argument("--node"), ap.add_argument("--netns")
    opts = ap.parse_args()
    try:
        with contextlib.ExitStack() as stack:
            if opts.own_netns:
                opts.netns = stack.enter_context(own_netns())
            return measure(opts)
    except (FleetctlError, OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"prolog_quick: {exc}") from None


def measure(opts) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        if opts.site:
            site, node = load_site(opts.site), opts.node
        else:
            in_netns = '{ name = "vA", mtu = 9000 }, { name = "vB" }'
            site, node = lab_like_site(Path(tmp), in_netns if opts.own_netns else '{ name = "lo" }')
        args = payload_args(site, node, "quick", since=time.time() - 86400 * 3650)
        args["state_file"] = str(Path(tmp) / "state.json")  # never touch a real node's state
        args = json.dumps(args)
        source = build_payload().encode()
        cmd = (["nsenter", f"--net=/run/netns/{opts.netns}"] if opts.netns else []) + \
              ["python3"] + (["-I", "-S"] if opts.bare else []) + ["-", args]
        walls, inner, statuses, nic_sources = [], [], set(), set()
        for _ in range(opts.n):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, input=source, capture_output=True)
            walls.append(time.perf_counter() - t0)
            try:
                doc = json.loads(proc.stdout)
            except ValueError:
                tail = (proc.stderr.decode(errors="replace").strip() or "no output")[-200:]
                raise SystemExit(f"prolog_quick: payload run {len(walls)} failed (exit {proc.returncode}): {tail}")
            inner.append(doc["elapsed_s"])
            nic_sources.update(r["evidence"].get("source") for r in doc["results"] if r["code"] == "nic.link")
            statuses.add(doc["status"])
    p50, p99 = statistics.median(walls), percentile(walls, 99)
    print(json.dumps({
        "benchmark": "prolog_quick", "runs": opts.n, "bare_python": opts.bare, "netns": opts.netns,
        "nic_source": sorted(nic_sources),
        "payload_bytes": len(source), "python": sys.version.split()[0],
        "wall_s": {"p50": round(p50, 4), "p99": round(p99, 4), "min": round(min(walls), 4),
                   "max": round(max(walls), 4)},
        "payload_elapsed_s_p50": round(statistics.median(inner), 4), "document_status": sorted(statuses),
        "goal": {"p50_s": GOAL_P50_S, "p99_s": GOAL_P99_S, "met": p50 <= GOAL_P50_S and p99 <= GOAL_P99_S},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
