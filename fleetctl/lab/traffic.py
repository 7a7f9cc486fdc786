"""Small UDP traffic tools for the lab: a paced sender, a counting sink, an echo server and a pinger.

Run inside a namespace: `nsenter --net=/run/netns/fl-node1 python -m fleetctl.lab.traffic send ...`.
Each prints one JSON object when done. The rate-fault background load is `send --duration 0`
(runs until killed, paced, so bounded by --rate-bps).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from dataclasses import dataclass

_HDR = struct.Struct("!Qd")  # sequence number, send time


@dataclass(frozen=True)
class Pace:
    """A sender's load: `pps` packets per second or `rate_bps` bits per second, of `size` bytes; stop
    after `count` packets or `duration` seconds (both 0: until killed). With `burst_ms`, the packets of
    each burst_ms interval leave back to back: bursty load makes a queue (and its delay) appear below
    the average cap."""

    count: int = 0
    rate_bps: float = 0
    pps: float = 0
    size: int = 200
    duration: float = 0
    burst_ms: float = 0


def send(src: str, dst: str, dport: int, sport: int = 0, pace: Pace = Pace()) -> dict:
    """Paced UDP from (src, sport) to (dst, dport), as `pace` says."""
    count, pps, duration, burst_ms = pace.count, pace.pps, pace.duration, pace.burst_ms
    size = max(pace.size, _HDR.size)
    if pace.rate_bps and not pps:
        pps = pace.rate_bps / ((size + 28) * 8)
    interval = 1.0 / pps if pps else 0.0
    per_burst = max(1, round(pps * burst_ms / 1000)) if burst_ms and pps else 1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, sport))
    pad = b"\0" * (size - _HDR.size)
    start = time.monotonic()
    sent = errors = 0
    while (not count or sent < count) and (not duration or time.monotonic() - start < duration):
        if interval and sent % per_burst == 0:
            delay = start + sent * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        try:
            s.sendto(_HDR.pack(sent, time.time()) + pad, (dst, dport))
        except OSError:
            errors += 1  # e.g. no route while a cable is down: count it, keep the pace
        sent += 1
    return {"sent": sent, "errors": errors, "seconds": round(time.monotonic() - start, 4)}


def sink(bind: str, port: int, idle: float = 1.0, timeout: float = 30.0) -> dict:
    """Count packets until `idle` seconds pass without one (after the first) or `timeout`."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((bind, port))
    print(json.dumps({"ready": True}), flush=True)
    count = nbytes = 0
    first = last = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(idle if first is not None else max(0.01, deadline - time.monotonic()))
        try:
            data = s.recv(65536)
        except socket.timeout:
            if first is not None:
                break
            continue
        now = time.monotonic()
        first = now if first is None else first
        last = now
        count += 1
        nbytes += len(data) + 28
    span = (last - first) if first is not None and last > first else 0.0
    return {"received": count, "bytes": nbytes, "seconds": round(span, 4),
            "rate_bps": round(nbytes * 8 / span) if span else 0}


def echo(bind: str, port: int, timeout: float = 30.0) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((bind, port))
    s.settimeout(timeout)
    print(json.dumps({"ready": True}), flush=True)
    n = 0
    try:
        while True:
            data, peer = s.recvfrom(65536)
            s.sendto(data, peer)
            n += 1
    except socket.timeout:
        pass
    return {"echoed": n}


def ping(src: str, dst: str, dport: int, sport: int = 0, count: int = 1000, wait: float = 0.2,
         busy: bool = True, interval: float = 0.0) -> dict:
    """Sequential UDP echo round trips; `busy` polls without sleeping (the RTT floor, not the
    scheduler's wake-up latency)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, sport))
    s.connect((dst, dport))
    s.setblocking(not busy)
    if not busy:
        s.settimeout(wait)
    rtts = []
    lost = 0
    for seq in range(count):
        if interval and seq:
            time.sleep(interval)
        t0 = time.perf_counter()
        s.send(_HDR.pack(seq, time.time()))
        while True:
            try:
                data = s.recv(2048)
            except (BlockingIOError, InterruptedError):
                if time.perf_counter() - t0 > wait:
                    lost += 1
                    break
                continue
            except (socket.timeout, ConnectionRefusedError):
                lost += 1
                break
            if _HDR.unpack_from(data)[0] == seq:
                rtts.append((time.perf_counter() - t0) * 1e6)
                break
    rtts.sort()

    def pct(p):
        return round(rtts[min(len(rtts) - 1, int(p / 100 * len(rtts)))], 1) if rtts else None

    mean = round(sum(rtts) / len(rtts), 1) if rtts else None
    return {"sent": count, "lost": lost, "rtt_us": {"min": pct(0), "p50": pct(50), "p99": pct(99),
                                                    "max": pct(100), "mean": mean}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetctl.lab.traffic")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("send")
    p.add_argument("--src", default="0.0.0.0")
    p.add_argument("--sport", type=int, default=0)
    p.add_argument("--dst", required=True)
    p.add_argument("--dport", type=int, default=9)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--pps", type=float, default=0)
    p.add_argument("--rate-bps", type=float, default=0)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--duration", type=float, default=0)
    p.add_argument("--burst-ms", type=float, default=0)
    p = sub.add_parser("sink")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--idle", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p = sub.add_parser("echo")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=30.0)
    p = sub.add_parser("ping")
    p.add_argument("--src", default="0.0.0.0")
    p.add_argument("--sport", type=int, default=0)
    p.add_argument("--dst", required=True)
    p.add_argument("--dport", type=int, required=True)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--wait", type=float, default=0.2)
    p.add_argument("--blocking", action="store_true")
    p.add_argument("--interval", type=float, default=0.0)
    a = ap.parse_args(argv)
    if a.cmd == "send":
        out = send(a.src, a.dst, a.dport, a.sport, Pace(count=a.count, rate_bps=a.rate_bps, pps=a.pps, size=a.size,
                                                         duration=a.duration, burst_ms=a.burst_ms))
    elif a.cmd == "sink":
        out = sink(a.bind, a.port, a.idle, a.timeout)
    elif a.cmd == "echo":
        out = echo(a.bind, a.port, a.timeout)
    else:
        out = ping(a.src, a.dst, a.dport, a.sport, a.count, a.wait, busy=not a.blocking,
                   interval=a.interval)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
