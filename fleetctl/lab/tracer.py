"""TTL-limited UDP probes over many source ports: which path does each UDP 5-tuple take?

Routers answer an expired probe with ICMP time-exceeded from their ingress port's address, and the
destination answers port-unreachable, so the answers of TTL 1..N for one source port name every hop of
that flow's ECMP path. Run inside the source namespace:
    nsenter --net=/run/netns/fl-node1 python -m fleetctl.lab.tracer --src A --dst B --sports 40000-40063
The probing is the mesh's own tracer (fleetctl.mesh.trace_agent); this is the lab's command for it.
"""

from __future__ import annotations

import argparse
import json
import sys

from fleetctl.mesh import trace_agent


def trace(src: str, dst: str, sports: list[int], dport: int = 33434, max_ttl: int = 6,
          timeout: float = 0.5) -> dict[int, list[str | None]]:
    """Hop addresses per source port, the last being `dst` when the probe arrived (None: no answer).
    The mesh's own tracer does the probing; this only says its answer the lab's way."""
    flows = [[str(p), src, p, dst, dport, max_ttl, ""] for p in sports]
    hops, arrived, _errors = trace_agent.trace(flows, timeout, retries=0)
    paths: dict[int, list[str | None]] = {}
    for p in sports:
        h = hops[str(p)]
        if str(p) in arrived:
            answered = [i for i, x in enumerate(h) if x is not None]
            h = h[:answered[-1] + 1 if answered else 0] + [dst]
        paths[p] = h
    return paths


def _ports(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetctl.lab.tracer")
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--sports", default="40000-40063")
    ap.add_argument("--dport", type=int, default=33434)
    ap.add_argument("--max-ttl", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=0.5)
    a = ap.parse_args(argv)
    paths = trace(a.src, a.dst, _ports(a.sports), a.dport, a.max_ttl, a.timeout)
    print(json.dumps({"src": a.src, "dst": a.dst, "dport": a.dport,
                      "paths": {str(k): v for k, v in paths.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
