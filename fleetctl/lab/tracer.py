"""TTL-limited UDP probes over many source ports: which path does each UDP 5-tuple take?

Routers answer an expired probe with ICMP time-exceeded from their ingress port's address, and the
destination answers port-unreachable, so the answers of TTL 1..N for one source port name every hop of
that flow's ECMP path. Run inside the source namespace:
    nsenter --net=/run/netns/fl-node1 python -m fleetctl.lab.tracer --src A --dst B --sports 40000-40063
The production path discovery belongs to fleetctl.mesh; this is the lab's own check of its fabric.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

ICMP_TIME_EXCEEDED = 11
ICMP_DEST_UNREACH = 3


def _parse(packet: bytes) -> tuple[str, int, str, str, int, int] | None:
    """(responder, icmp type, inner src, inner dst, inner sport, inner dport) of an ICMP error."""
    ihl = (packet[0] & 0x0F) * 4
    icmp_type = packet[ihl]
    if icmp_type not in (ICMP_TIME_EXCEEDED, ICMP_DEST_UNREACH):
        return None
    inner = packet[ihl + 8:]
    if len(inner) < 28 or inner[9] != socket.IPPROTO_UDP:
        return None
    inner_ihl = (inner[0] & 0x0F) * 4
    sport, dport = struct.unpack_from("!HH", inner, inner_ihl)
    return (socket.inet_ntoa(packet[12:16]), icmp_type, socket.inet_ntoa(inner[12:16]),
            socket.inet_ntoa(inner[16:20]), sport, dport)


def trace(src: str, dst: str, sports: list[int], dport: int = 33434, max_ttl: int = 6,
          timeout: float = 0.5) -> dict[int, list[str | None]]:
    """Hop addresses per source port, the last being `dst` when the probe arrived (None: no answer)."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    raw.setblocking(False)
    paths: dict[int, list[str | None]] = {p: [] for p in sports}
    arrived: set[int] = set()
    for ttl in range(1, max_ttl + 1):
        pending = [p for p in sports if p not in arrived]
        if not pending:
            break
        answers: dict[int, str] = {}
        for sport in pending:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((src, sport))
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
                s.sendto(b"fleetctl-lab-trace", (dst, dport))
        deadline = time.monotonic() + timeout
        while len(answers) < len(pending) and time.monotonic() < deadline:
            try:
                packet = raw.recv(65536)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            parsed = _parse(packet)
            if not parsed:
                continue
            responder, icmp_type, isrc, idst, sport, idport = parsed
            if isrc != src or idst != dst or idport != dport or sport not in paths:
                continue
            answers[sport] = responder
            if icmp_type == ICMP_DEST_UNREACH:
                arrived.add(sport)
        for sport in pending:
            paths[sport].append(answers.get(sport))
    raw.close()
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
