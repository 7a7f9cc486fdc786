# FROZEN COPY of fleetctl/mesh/agent.py as of wire version 1 (commit 2844612), kept only so that
# benchmarks/agent_cpu.py can measure the old agent beside the new one in one run. Not imported by
# fleetctl, not shipped, not maintained: do not edit (fixes go to fleetctl/mesh/agent.py).
"""The probe agent: stdlib-only, shipped to every node with `run_python` (nothing installed there).

One process per node, one thread. Per NIC: a responder socket bound to (NIC address, port) and one
sender socket per source port (the set of source ports spreads a pair's flows over the ECMP paths;
one socket per port keeps each flow's 5-tuple fixed, so its traced path stays valid). Every probe
carries the run tag and an HMAC-SHA256 (truncated to 16 bytes) under the per-run key:

    probe  MAGIC type=1 ver run_tag src_nic dst_nic flow seq slot t1           + mac
    echo   MAGIC type=2 ver run_tag src_nic dst_nic flow seq slot t1 t2 t3     + mac

t1 sender's send time, t2 responder's (kernel, SO_TIMESTAMPNS) receive time, t3 responder's send
time, t4 the sender's kernel receive time of the echo. `slot` is the sender's record index, so an
echo finds its record without a lookup table. Foreign (wrong magic or run), garbled (bad length or
fields), forged (bad MAC) and replayed packets (responder: 64-probe anti-replay window per flow;
sender: an echo for a record already answered) are counted and dropped.

Memory is bounded: the record arrays are allocated once (at most `max_records`), the responder
tracks only the flows assigned to it. The agent always exits: sending stops at start + duration,
it answers for `linger` more seconds, then prints one JSON document (records as base64 of zlib of
little-endian arrays, in short pieces, one per line) and exits; an alarm ends it even if stdout
blocks.

In the lab (`lab up --clock-skew`), every timestamp is put on the host's emulated clock:
t + offset + drift * (t - t0), from the lab state passed in the configuration.

Configuration (JSON): embedded by the collector in place of `_EMBEDDED_CONFIG` (keeps the key off
the command line), or on stdin when run as `python -m fleetctl.mesh.agent`. FLEETCTL_NODE (set by
every transport) says which node's entry applies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
import zlib
from array import array

_EMBEDDED_CONFIG = None  # replaced by the collector with the run's configuration (a JSON string)

MAGIC = b"FLP1"
VERSION = 1
PROBE, ECHO = 1, 2
MAC_LEN = 16
# magic, type, version, run tag, src_nic, dst_nic, flow, seq, slot, t1
HEAD = struct.Struct("<4sBB8sIIIIIq")
TIMES = struct.Struct("<qq")  # t2, t3 of an echo
PROBE_LEN = HEAD.size + MAC_LEN
ECHO_LEN = HEAD.size + TIMES.size + MAC_LEN
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_BINDTODEVICE = getattr(socket, "SO_BINDTODEVICE", 25)
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
MSG_ERRQUEUE = getattr(socket, "MSG_ERRQUEUE", 0x2000)
LOOP_DPORT = 33434  # loop probes go to a closed port of the switch: it answers port-unreachable
CMSG_SPACE = socket.CMSG_SPACE(16)
REPLAY_WINDOW = 64
MAX_BURST = 64  # probes sent per loop turn at most: catching up must not become a flood
MAX_LAG_S = 0.25  # further behind schedule than this: skip ahead (counted), do not burst
# record states (the collector turns 1 into "lost out" or "lost back" with the responders' logs)
ANSWERED, UNANSWERED, SEND_FAILED, PENDING = 0, 1, 4, 255
COUNTERS = ("sent", "send_errors", "skipped", "echoes", "answered", "foreign", "garbled", "bad_mac",
            "replayed", "unexpected", "records_dropped", "log_dropped", "loop_errors")


def run_tag(run_id: str) -> bytes:
    return hashlib.sha256(run_id.encode()).digest()[:8]


def mac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()[:MAC_LEN]


def pack_probe(key: bytes, tag: bytes, src_nic: int, dst_nic: int, flow: int, seq: int, slot: int,
               t1: int) -> bytes:
    body = HEAD.pack(MAGIC, PROBE, VERSION, tag, src_nic, dst_nic, flow, seq, slot, t1)
    return body + mac(key, body)


def pack_echo(key: bytes, probe_head: bytes, t2: int, t3: int) -> bytes:
    body = bytearray(probe_head)
    body[4] = ECHO
    body += TIMES.pack(t2, t3)
    body = bytes(body)
    return body + mac(key, body)


def unpack(key: bytes, tag: bytes, data: bytes, counters: dict) -> tuple | None:
    """(type, src_nic, dst_nic, flow, seq, slot, t1, t2, t3, head) of a genuine packet, else
    None with the reason counted."""
    if len(data) < 4 or data[:4] != MAGIC:
        counters["foreign"] += 1
        return None
    if len(data) not in (PROBE_LEN, ECHO_LEN):
        counters["garbled"] += 1
        return None
    _, kind, version, ptag, src, dst, flow, seq, slot, t1 = HEAD.unpack_from(data)
    if ptag != tag:
        counters["foreign"] += 1  # another run's probe (or another tool's)
        return None
    body, got = data[:-MAC_LEN], data[-MAC_LEN:]
    if not hmac.compare_digest(mac(key, body), got):
        counters["bad_mac"] += 1
        return None
    expected_len = PROBE_LEN if kind == PROBE else ECHO_LEN if kind == ECHO else -1
    if version != VERSION or len(data) != expected_len:
        counters["garbled"] += 1
        return None
    t2 = t3 = 0
    if kind == ECHO:
        t2, t3 = TIMES.unpack_from(data, HEAD.size)
    return kind, src, dst, flow, seq, slot, t1, t2, t3, data[:HEAD.size]


class Clock:
    """The host's clock in ns: the real clock, or in the lab its emulated skewed version."""

    def __init__(self, skew: dict | None):
        skew = skew or {}
        self.offset_ns = int(round(float(skew.get("offset_ms", 0.0)) * 1e6))
        self.drift = float(skew.get("drift_ppm", 0.0)) * 1e-6
        self.t0_ns = int(round(float(skew.get("t0", 0.0)) * 1e9))

    def host(self, real_ns: int) -> int:
        if not self.offset_ns and not self.drift:
            return real_ns
        return real_ns + self.offset_ns + int((real_ns - self.t0_ns) * self.drift)


class Agent:
    def __init__(self, config: dict, node: str):
        self.node = node
        mine = config["nodes"].get(node)
        if mine is None:
            raise ValueError(f"node {node!r} is not in the run configuration")
        self.key = bytes.fromhex(config["key"])
        self.tag = run_tag(config["run_id"])
        self.port = int(config["port"])
        self.sports = [int(p) for p in config["sports"]]
        self.rate = float(config["rate"])
        self.duration = float(config["duration"])
        self.linger = float(config.get("linger", 1.0))
        self.start_at = float(config.get("start_at") or time.time())
        self.clock = Clock(mine.get("clock"))
        self.counters = {k: 0 for k in COUNTERS}
        self.errors: list[str] = []
        self.kernel_rx = 0
        self.software_rx = 0
        self.nics = {int(i): (addr, dev) for i, addr, dev in mine["nics"]}
        # pairs this node sends: (flow base, src nic, dst nic, dst address)
        self.pairs = [(int(f), int(s), int(d), a) for f, s, d, a in config["pairs"]
                      if int(s) in self.nics]
        # loops this node sends: (flow, src nic, switch address) - to a switch and back
        self.loop_port = int(config.get("loop_port", 0))
        self.loops = [(int(f), int(s), a) for f, s, a in config.get("loops", [])
                      if int(s) in self.nics]
        self.loop_addr = {f: a for f, _s, a in self.loops}
        n_sp = len(self.sports)
        # flows answered here: flow -> [highest seq, bitmap] (bounded by the assignment)
        self.replay = {int(f) + j: [-1, 0] for f, _s, d, _a in config["pairs"]
                       if int(d) in self.nics for j in range(n_sp)}
        expected = int(self.rate * self.duration * (len(self.pairs) + len(self.loops)) * 1.05) + 16
        cap = int(config.get("max_records", 2_000_000))
        self.capacity = max(0, min(expected, cap))
        zero8 = bytes(8 * self.capacity)
        self.r_flow = array("I", bytes(4 * self.capacity))
        self.r_seq = array("I", bytes(4 * self.capacity))
        self.r_t1, self.r_t2, self.r_t3, self.r_t4 = (array("q", zero8) for _ in range(4))
        self.r_state = array("B", bytes([PENDING]) * self.capacity)
        self.n = 0
        log_cap = max(0, min(int(self.rate * self.duration * max(1, len(self.replay) // n_sp)
                                 * 1.05) + 16, cap))
        self.log_flow = array("I", bytes(4 * log_cap))
        self.log_seq = array("I", bytes(4 * log_cap))
        self.log_n = 0
        self.sel = selectors.DefaultSelector()
        self.senders: dict[tuple[int, int], socket.socket] = {}  # (nic, sport index) -> socket
        self.loopers: dict[int, socket.socket] = {}  # nic -> loop socket (IP_RECVERR)
        self.targets: list[tuple] = []  # the send schedule's round: see `open`

    # ------------------------------------------------------------------ sockets
    def _socket(self, addr: str, port: int, dev: str) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dev:  # egress through this NIC only: a dead NIC must not be masked by another route
            try:
                s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, dev.encode())
            except OSError as exc:
                self.errors.append(f"{dev}: SO_BINDTODEVICE: {exc.strerror}")
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((addr, port))
        s.setblocking(False)
        return s

    def open(self) -> None:
        for nic, (addr, dev) in self.nics.items():
            try:
                r = self._socket(addr, self.port, dev)
                self.sel.register(r, selectors.EVENT_READ, (True, nic))
                for j, sp in enumerate(self.sports):
                    s = self._socket(addr, sp, dev)
                    self.senders[(nic, j)] = s
                    self.sel.register(s, selectors.EVENT_READ, (False, nic))
                if self.loop_port and any(src == nic for _f, src, _a in self.loops):
                    s = self._socket(addr, self.loop_port, dev)
                    s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)  # ICMP answers -> error queue
                    self.loopers[nic] = s
                    self.sel.register(s, selectors.EVENT_READ, (None, nic))
            except OSError as exc:
                self.errors.append(f"nic {nic} {addr}: {exc.strerror or exc}")
        n_sp = len(self.sports)
        # one round of the schedule: (flows, src nic, dst nic, address, port, sockets)
        self.targets = [(tuple(b + j for j in range(n_sp)), s, d, a, self.port,
                         tuple(self.senders[(s, j)] for j in range(n_sp)))
                        for b, s, d, a in self.pairs if (s, 0) in self.senders]
        self.targets += [((f,), s, s, a, LOOP_DPORT, (self.loopers[s],))
                         for f, s, a in self.loops if s in self.loopers]

    def close(self) -> None:
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            key.fileobj.close()
        self.sel.close()

    # ------------------------------------------------------------------ receive
    def _recv(self, sock: socket.socket):
        data, anc, _flags, addr = sock.recvmsg(256, CMSG_SPACE)
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                sec, nsec = struct.unpack_from("qq", payload)
                self.kernel_rx += 1
                return data, addr, sec * 1_000_000_000 + nsec
        self.software_rx += 1
        return data, addr, time.time_ns()

    def drain_loop(self, sock: socket.socket, nic: int) -> None:
        """ICMP port-unreachable from the switch a loop probe was sent to: the loop is closed.
        The error queue hands back our own probe (MAC checked), its slot finds the record."""
        for _ in range(256):
            try:
                data, anc, _flags, _addr = sock.recvmsg(256, 512, MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError):
                try:  # nothing should arrive as data; read it away (counted) if it does
                    sock.recv(256)
                    self.counters["foreign"] += 1
                    continue
                except OSError:
                    return
            except OSError:
                return
            rx, err = None, None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                    sec, nsec = struct.unpack_from("qq", payload)
                    rx = sec * 1_000_000_000 + nsec
                elif level == socket.IPPROTO_IP and kind == IP_RECVERR and len(payload) >= 24:
                    err = payload
            rx = rx or time.time_ns()
            p = unpack(self.key, self.tag, data, self.counters)
            if p is None or err is None:
                continue
            origin, icmp_type, icmp_code = err[4], err[5], err[6]
            offender = socket.inet_ntoa(err[20:24])
            _kind, src, _dst, flow, seq, slot = p[:6]
            if origin != 2 or icmp_type != 3 or icmp_code != 3 or \
                    offender != self.loop_addr.get(flow) or src != nic:
                self.counters["loop_errors"] += 1  # answered by someone else: not closed
                continue
            self._echoed(nic, ECHO, src, flow, seq, slot, 0, 0, rx)

    def drain(self, sock: socket.socket, responder: bool, nic: int) -> None:
        for _ in range(256):  # bounded: the send schedule must not starve
            try:
                data, addr, rx = self._recv(sock)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ICMP errors queued on the socket (e.g. port unreachable)
                continue
            p = unpack(self.key, self.tag, data, self.counters)
            if p is None:
                continue
            kind, src, dst, flow, seq, slot, _t1, t2, t3, head = p
            if responder:
                self._answer(sock, addr, nic, kind, src, dst, flow, seq, head, rx)
            else:
                self._echoed(nic, kind, src, flow, seq, slot, t2, t3, rx)

    def _answer(self, sock, addr, nic, kind, src, dst, flow, seq, head, rx) -> None:
        st = self.replay.get(flow)
        if kind != PROBE or dst != nic or st is None:
            self.counters["unexpected"] += 1
            return
        top, bits = st
        if seq > top:
            shift = seq - top
            st[1] = ((bits << shift) | 1) & ((1 << REPLAY_WINDOW) - 1) if top >= 0 else 1
            st[0] = seq
        else:
            back = top - seq
            if back >= REPLAY_WINDOW or bits >> back & 1:
                self.counters["replayed"] += 1
                return
            st[1] = bits | (1 << back)
        if self.log_n < len(self.log_flow):
            self.log_flow[self.log_n], self.log_seq[self.log_n] = flow, seq
            self.log_n += 1
        else:
            self.counters["log_dropped"] += 1
        t2 = self.clock.host(rx)
        try:
            sock.sendto(pack_echo(self.key, head, t2, self.clock.host(time.time_ns())), addr)
            self.counters["answered"] += 1
        except OSError:
            self.counters["send_errors"] += 1

    def _echoed(self, nic, kind, src, flow, seq, slot, t2, t3, rx) -> None:
        if kind != ECHO or src != nic or slot >= self.n or self.r_flow[slot] != flow \
                or self.r_seq[slot] != seq:
            self.counters["unexpected"] += 1
            return
        if self.r_state[slot] != PENDING:
            self.counters["replayed"] += 1
            return
        self.r_t2[slot], self.r_t3[slot], self.r_t4[slot] = t2, t3, self.clock.host(rx)
        self.r_state[slot] = ANSWERED
        self.counters["echoes"] += 1

    # ------------------------------------------------------------------ send
    def send(self, i: int) -> None:
        flows, src, dst, daddr, dport, socks = self.targets[i % len(self.targets)]
        k = i // len(self.targets)
        j = k % len(flows)
        flow, seq = flows[j], k // len(flows)
        if self.n >= self.capacity:
            self.counters["records_dropped"] += 1
            return
        slot = self.n
        self.n += 1
        t1 = self.clock.host(time.time_ns())
        self.r_flow[slot], self.r_seq[slot], self.r_t1[slot] = flow, seq, t1
        packet = pack_probe(self.key, self.tag, src, dst, flow, seq, slot, t1)
        try:
            try:
                socks[j].sendto(packet, (daddr, dport))
            except ConnectionRefusedError:  # a loop socket's last ICMP answer, reported once
                socks[j].sendto(packet, (daddr, dport))
            self.r_state[slot] = PENDING
            self.counters["sent"] += 1
        except OSError:  # NIC down, no route: the probe never left
            self.r_state[slot] = SEND_FAILED
            self.counters["send_errors"] += 1

    def loop(self) -> None:
        mono0 = time.monotonic() + max(0.0, self.start_at - time.time())
        send_end = mono0 + self.duration
        end = send_end + self.linger
        interval = 1.0 / (self.rate * len(self.targets)) if self.targets and self.rate > 0 \
            else None
        next_t, i = mono0, 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if interval is not None and now < send_end:
                if now - next_t > MAX_LAG_S:
                    skip = int((now - next_t) / interval)
                    self.counters["skipped"] += skip
                    i += skip
                    next_t += skip * interval
                burst = 0
                while next_t <= now and burst < MAX_BURST:
                    self.send(i)
                    i += 1
                    next_t += interval
                    burst += 1
                wait = max(0.0, min(next_t, end) - time.monotonic())
            else:
                wait = end - now
            for key, _ev in self.sel.select(min(wait, 0.05)):
                responder, nic = key.data
                if responder is None:
                    self.drain_loop(key.fileobj, nic)
                else:
                    self.drain(key.fileobj, responder, nic)

    # ------------------------------------------------------------------ output
    def report(self) -> dict:
        for slot in range(self.n):
            if self.r_state[slot] == PENDING:
                self.r_state[slot] = UNANSWERED
        n, m = self.n, self.log_n
        kinds = "kernel" if self.kernel_rx and not self.software_rx else \
            "software" if not self.kernel_rx else "mixed"
        return {
            "node": self.node, "version": VERSION, "rx_timestamps": kinds,
            "counters": self.counters, "errors": self.errors,
            "capacity": self.capacity,
            "records": {"n": n, "flow": _b64(self.r_flow[:n]), "seq": _b64(self.r_seq[:n]),
                        "t1": _b64(self.r_t1[:n]), "t2": _b64(self.r_t2[:n]),
                        "t3": _b64(self.r_t3[:n]), "t4": _b64(self.r_t4[:n]),
                        "state": _b64(self.r_state[:n])},
            "received": {"n": m, "flow": _b64(self.log_flow[:m]), "seq": _b64(self.log_seq[:m])},
        }


def _b64(arr: array) -> list[str]:
    """base64 of zlib of the little-endian array, in 400-character pieces: printed one per line
    (indent=0), no output line is long enough for a transport to split it (srun does)."""
    if sys.byteorder != "little":
        arr = array(arr.typecode, arr)
        arr.byteswap()
    text = base64.b64encode(zlib.compress(arr.tobytes(), 1)).decode("ascii")
    return [text[i:i + 400] for i in range(0, len(text), 400)]


def run(config: dict, node: str) -> dict:
    agent = Agent(config, node)
    agent.open()
    try:
        agent.loop()
    finally:
        agent.close()
    return agent.report()


def main() -> int:
    try:
        text = _EMBEDDED_CONFIG if _EMBEDDED_CONFIG is not None else sys.stdin.read()
        config = json.loads(text)
        node = os.environ.get("FLEETCTL_NODE") or socket.gethostname().split(".")[0]
        start = float(config.get("start_at") or time.time())
        limit = max(0.0, start - time.time()) + float(config["duration"]) \
            + float(config.get("linger", 1.0)) + 10
        # last resort: nothing may keep the agent alive (e.g. a stdout nobody reads)
        signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
        signal.alarm(int(limit) + 1)
        out = run(config, node)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"fleetctl probe agent: bad configuration: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"fleetctl probe agent: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(out, indent=0))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
