"""Path discovery on the node: TTL-limited UDP probes with each probe flow's exact 5-tuple.

Stdlib only; shipped with `run_python` like the probe agent, before it starts. For every flow this
node sends (probes from its NICs, and echoes from its responder port), a UDP datagram with TTL
1, 2, ... leaves through the same (address, port) -> (address, port); the router where it expires
answers ICMP time-exceeded, which a raw ICMP socket reads (the quoted header names the flow). With
`icmp_errors_use_inbound_ifaddr` the answer comes from the ingress port, so each hop names a link;
routers answering from a loopback name a switch (discovery.py maps both).

Flows are traced in rounds, one TTL per round for all flows at once; a flow stops at its switch hop
count or when its destination answers. Hops still unanswered get one more try. Output (JSON):
{"node", "paths": {key: [hop address or null, ...]}, "arrived": [key, ...], "errors": [...]}.

Configuration as for the probe agent: embedded in place of `_EMBEDDED_CONFIG`, or on stdin.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

_EMBEDDED_CONFIG = None  # replaced by the collector (a JSON string)

ICMP_TIME_EXCEEDED, ICMP_DEST_UNREACH = 11, 3
SO_BINDTODEVICE = getattr(socket, "SO_BINDTODEVICE", 25)
PAYLOAD = b"fleetctl-mesh-trace"


def parse_icmp(packet: bytes):
    """(responder, type, inner src, inner dst, inner sport, inner dport) of an ICMP error about a
    UDP datagram, or None."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8 + 28:
        return None
    icmp_type = packet[ihl]
    if icmp_type not in (ICMP_TIME_EXCEEDED, ICMP_DEST_UNREACH):
        return None
    inner = packet[ihl + 8:]
    if inner[9] != socket.IPPROTO_UDP:
        return None
    inner_ihl = (inner[0] & 0x0F) * 4
    if len(inner) < inner_ihl + 4:
        return None
    sport, dport = struct.unpack_from("!HH", inner, inner_ihl)
    return (socket.inet_ntoa(packet[12:16]), icmp_type, socket.inet_ntoa(inner[12:16]),
            socket.inet_ntoa(inner[16:20]), sport, dport)


def _send(src: str, sport: int, dst: str, dport: int, ttl: int, dev: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dev:
            s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, dev.encode())
        s.bind((src, sport))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        s.sendto(PAYLOAD, (dst, dport))


def trace(flows: list, timeout: float = 0.3, retries: int = 1) -> tuple[dict, list[str], list[str]]:
    """flows: [key, src, sport, dst, dport, hops, dev]. Returns ({key: hops}, keys whose
    destination answered, errors)."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    raw.setblocking(False)
    by_tuple = {(f[1], f[3], int(f[2]), int(f[4])): str(f[0]) for f in flows}
    hops = {str(f[0]): [None] * int(f[5]) for f in flows}
    arrived: set[str] = set()
    errors: list[str] = []
    failed: set[str] = set()
    max_hops = max((int(f[5]) for f in flows), default=0)
    try:
        for attempt in range(1 + retries):
            for ttl in range(1, max_hops + 1):
                todo = [f for f in flows if int(f[5]) >= ttl and str(f[0]) not in arrived
                        and str(f[0]) not in failed and hops[str(f[0])][ttl - 1] is None]
                if not todo:
                    continue
                for key, src, sport, dst, dport, _h, dev in todo:
                    try:
                        _send(src, int(sport), dst, int(dport), ttl, dev)
                    except OSError as exc:  # NIC down, address gone: this flow cannot be traced
                        failed.add(str(key))
                        if len(errors) < 20:
                            errors.append(f"{src}:{sport} -> {dst}:{dport}: {exc.strerror or exc}")
                want = {str(f[0]) for f in todo} - failed
                _collect(raw, by_tuple, hops, arrived, want, ttl, timeout)
    finally:
        raw.close()
    return hops, sorted(arrived), errors


def _collect(raw, by_tuple, hops, arrived, want, ttl, timeout) -> None:
    deadline = time.monotonic() + timeout
    while want and time.monotonic() < deadline:
        try:
            packet = raw.recv(65536)
        except BlockingIOError:
            time.sleep(0.0005)
            continue
        parsed = parse_icmp(packet)
        if parsed is None:
            continue
        responder, icmp_type, isrc, idst, sport, dport = parsed
        key = by_tuple.get((isrc, idst, sport, dport))
        if key is None:
            continue
        if responder == idst:  # the destination itself answered: the flow arrived
            arrived.add(key)
            want.discard(key)
            continue
        if icmp_type == ICMP_TIME_EXCEEDED and ttl <= len(hops[key]) and key in want:
            hops[key][ttl - 1] = responder
            want.discard(key)


def main() -> int:
    try:
        text = _EMBEDDED_CONFIG if _EMBEDDED_CONFIG is not None else sys.stdin.read()
        config = json.loads(text)
        node = os.environ.get("FLEETCTL_NODE") or socket.gethostname().split(".")[0]
        flows = config["nodes"].get(node, [])
        signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
        signal.alarm(int(config.get("limit", 60)))
        paths, arrived, errors = trace(flows, float(config.get("timeout", 0.3)),
                              int(config.get("retries", 1)))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"fleetctl path tracer: bad configuration: {exc}", file=sys.stderr)
        return 2
    except PermissionError:
        print("fleetctl path tracer: a raw ICMP socket needs root or CAP_NET_RAW", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"fleetctl path tracer: {exc}", file=sys.stderr)
        return 1
    # indent=0: one short line per item, so no transport splits a line (srun does)
    sys.stdout.write(json.dumps({"node": node, "paths": paths, "arrived": arrived,
                                 "errors": errors}, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
