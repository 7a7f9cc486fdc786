"""The probe agent: stdlib-only, shipped to every node with `run_python` (nothing installed there).

The payload is wire.py + health.py + records.py + this file (PAYLOAD_PARTS, joined by
meshrun.setup.payload), one script. One process per node, one thread, one epoll. Per NIC: a responder socket bound to (NIC address, port) and one
sender socket per source port (the set of source ports spreads a pair's flows over the ECMP paths;
one socket per port keeps each flow's 5-tuple fixed, so its traced path stays valid). Packets:
wire.py (version 2, keyed BLAKE2b MAC). Foreign, garbled, forged and replayed packets (responder:
64-probe anti-replay window per flow; sender: an echo for a record already answered) are counted
and dropped.

Hot path (docs/mesh-probing.md, "agent cost"): every wake-up drains all ready datagrams of every
ready socket (recvmsg_into one preallocated buffer, bounded per turn), answers in place in that
buffer, sends from one reused probe buffer; records live in preallocated ring arrays.

Records: a bounded ring (records.py, a power of two). A record is final once answered or older than the echo
timeout; every health window (1 s) the final records leave the ring as a batch with that window's
health row. Output modes (config "output"):
  "document" (default, the one-shot audit): batches accumulate (at most `max_records` records) and
      one JSON document is printed at exit, as before plus "health";
  "stream" (continuous probing): each batch is printed at once as `FLS1 <batch> <i> <n> <text>`
      lines (collect.parse_stream joins them), then an end object; memory stays bounded by the ring.

Sampled debug records (config "debug_records", a share of flows in [0, 1], summary mode only): beside
its summaries a batch also carries, in record mode's encoding, every record and answer-log entry of
the flows `debug_sampled` picks (a hash of the flow id: the same flows on every host and every
run), at most MAX_DEBUG_RECORDS of each per batch (whole flows are left out beyond it, counted).
The summaries are unchanged; the coordinator stores these records for `fleetctl lens records`.

Clock: timestamps go through a clock source chosen by the node's "clock" entry: the system clock,
or "offset" (a fixed offset and drift, e.g. the lab's emulated skew: mesh.collect.injected_clocks). The
agent never reads anything but its configuration and /proc counters.

Configuration (JSON): embedded by the collector in place of `_EMBEDDED_CONFIG` (keeps the key off
the command line), or on stdin when run as `python -m fleetctl.mesh.agent`. FLEETCTL_NODE (set by
every transport) says which node's entry applies.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import time
from array import array

from fleetctl.mesh.health import HEALTH_FIELDS, HealthMeter  # payload-local
from fleetctl.mesh.records import ANSWERED, FREE, PENDING, SEND_FAILED, UNANSWERED  # payload-local
from fleetctl.mesh.records import RECORD_FIELDS, RecordRing, b64, b64_bytes  # payload-local
from fleetctl.mesh.summary import RECEIVED_FIELDS, RECEIVED_ROW, ROW, SUMMARY_FIELDS  # payload-local
from fleetctl.mesh.summary import pack, received_counts, summarize  # payload-local
from fleetctl.mesh.wire import ECHO, ECHO_LEN, HEAD, IDS, IDS_AT, IDS_T1  # payload-local
from fleetctl.mesh.wire import MAX_DATAGRAM  # payload-local
from fleetctl.mesh.wire import PROBE, PROBE_LEN, TIMES, Codec, run_tag  # payload-local

# the shipped script: these modules of this package, in this order, lines marked payload-local
# left out (meshrun.setup.payload joins them); each only uses names of the modules before it
PAYLOAD_PARTS = ("wire", "health", "records", "summary", "agent")

_EMBEDDED_CONFIG = None  # replaced by the collector with the run's configuration (a JSON string)

VERSION = 2  # wire and document version
# plain ints (some socket constants are enums: `flags & MSG_TRUNC` on an enum costs a call)
SO_TIMESTAMPNS = int(getattr(socket, "SO_TIMESTAMPNS", 35))
SO_RXQ_OVFL = int(getattr(socket, "SO_RXQ_OVFL", 40))
SO_BINDTODEVICE = int(getattr(socket, "SO_BINDTODEVICE", 25))
IP_RECVERR = int(getattr(socket, "IP_RECVERR", 11))
MSG_ERRQUEUE = int(getattr(socket, "MSG_ERRQUEUE", 0x2000))
MSG_TRUNC = int(getattr(socket, "MSG_TRUNC", 0x20))
SOL_SOCKET = int(socket.SOL_SOCKET)
LOOP_DPORT = 33434  # loop probes go to a closed port of the switch: it answers port-unreachable
CMSG_SPACE = socket.CMSG_SPACE(16) + socket.CMSG_SPACE(4)  # timestamp + overflow count
TS = struct.Struct("qq")
U32 = struct.Struct("I")
REPLAY_WINDOW = 64
REPLAY_MASK = (1 << REPLAY_WINDOW) - 1
MAX_BURST = 64  # probes sent per loop turn at most (unless two ticks hold more)
MAX_LAG_S = 0.25  # further behind schedule than this: skip ahead (counted), do not burst
# shortest loop turn: per-wake-up costs (epoll, sleep, one empty read per ready socket), not
# per-datagram ones, dominated the agent's CPU; t2/t4 are kernel times, so a responder that
# answers a few ms later measures the same one-way delays
TICK_MIN_S, TICK_MAX_S, TICK_PACKETS = 0.005, 0.02, 32
MAX_DRAIN = 256  # datagrams read from one socket per turn: the send schedule must not starve
STREAM_PIECE = 400  # characters of batch text per output line (srun splits longer lines)
# debug sample: Knuth's multiplicative hash (2**32 / golden ratio) spreads neighbouring flow ids
# (a pair's source ports) over the 32-bit range, so a share picks flows all over the plan
DEBUG_HASH = 2654435761
# sampled records per batch, and as many answer-log entries: ~30 bytes each on the wire, so a
# batch grows by at most ~60 KB whatever the share (a summary window is one batch a second)
MAX_DEBUG_RECORDS = 2000
COUNTERS = ("sent", "send_errors", "skipped", "echoes", "answered", "answer_errors", "foreign",
            "garbled", "bad_mac", "replayed", "unexpected", "late", "records_dropped",
            "log_dropped", "loop_errors", "ring_forced")


# ---------------------------------------------------------------------- compatibility (bytes API)
def pack_probe(key: bytes, tag: bytes, src_nic: int, dst_nic: int, flow: int, seq: int, slot: int,
               t1: int) -> bytes:
    return Codec(key, tag).pack_probe(src_nic, dst_nic, flow, seq, slot, t1)


def pack_echo(key: bytes, probe_head: bytes, t2: int, t3: int) -> bytes:
    return Codec(key, bytes(probe_head[6:14])).pack_echo(probe_head, t2, t3)


def unpack(key: bytes, tag: bytes, data: bytes, counters: dict) -> tuple | None:
    """(type, src_nic, dst_nic, flow, seq, slot, t1, t2, t3, head) of a genuine packet, else
    None with the reason counted."""
    got = Codec(key, tag).unpack(data)
    if isinstance(got, str):
        counters[got] += 1
        return None
    return (*got, bytes(data[:HEAD.size]))


# ---------------------------------------------------------------------- debug sample
def debug_rank(flow: int) -> int:
    """A flow's place in the debug sample: the share s samples the flows ranked below s * 2**32."""
    return (flow * DEBUG_HASH) & 0xFFFFFFFF


def debug_sampled(flow: int, share: float) -> bool:
    """Is `flow` in the debug sample of this share? The same answer on every host and run."""
    return debug_rank(flow) < int(share * 4294967296)


def debug_cap(idx: list, flows, cap: int) -> tuple[list, int]:
    """At most `cap` of the positions `idx` (into `flows`), whole flows only: the flows ranked
    lowest are kept, as a smaller share would have picked them. (kept positions, left out)."""
    if len(idx) <= cap:
        return idx, 0
    count: dict[int, int] = {}
    for i in idx:
        count[flows[i]] = count.get(flows[i], 0) + 1
    keep, total = set(), 0
    for f in sorted(count, key=debug_rank):
        if total + count[f] > cap:
            break
        keep.add(f)
        total += count[f]
    kept = [i for i in idx if flows[i] in keep]
    return kept, len(idx) - len(kept)


def b64_picked(values, code: str, pick: list) -> str:
    """The items `pick` of `values` as one b64 text (record mode's encoding of a field)."""
    return "".join(b64(array(code, [values[i] for i in pick])))


# ---------------------------------------------------------------------- clock sources
class SystemClock:
    """The host's own clock: timestamps as the kernel gives them."""

    def host(self, real_ns: int) -> int:
        return real_ns


class OffsetClock:
    """A fixed offset and drift on top of the system clock: t + offset + drift * (t - t0).
    Entry: {"source": "offset", "offset_ms", "drift_ppm", "t0" (epoch s)}."""

    def __init__(self, entry: dict):
        self.offset_ns = int(round(float(entry.get("offset_ms", 0.0)) * 1e6))
        self.drift = float(entry.get("drift_ppm", 0.0)) * 1e-6
        self.t0_ns = int(round(float(entry.get("t0", 0.0)) * 1e9))
        if abs(self.offset_ns) > 10 ** 15 or abs(self.drift) > 1e-2:
            raise ValueError("clock offset/drift out of range")

    def host(self, real_ns: int) -> int:
        return real_ns + self.offset_ns + int((real_ns - self.t0_ns) * self.drift)


CLOCK_SOURCES = {"system": SystemClock, "offset": OffsetClock}


def clock_source(entry: dict | None):
    """The clock source a node's "clock" entry names (no entry: the system clock). An entry
    without "source" but with an offset or drift is an offset clock (configuration version 1)."""
    if not entry:
        return SystemClock()
    name = entry.get("source") or ("offset" if "offset_ms" in entry or "drift_ppm" in entry
                                   else "system")
    if name not in CLOCK_SOURCES:
        raise ValueError(f"unknown clock source {name!r}")
    return CLOCK_SOURCES[name]() if name == "system" else CLOCK_SOURCES[name](entry)


class Schedule:
    """The send schedule of one run: probe i of the round-robin over the targets is due at
    start + i * interval until `send_end`; catching up never becomes a flood: at most two ticks'
    worth (or MAX_BURST) per turn."""

    def __init__(self, rate: float, n_targets: int, tick_s: float, start: float, send_end: float):
        self.interval = 1.0 / (rate * n_targets) if n_targets and rate > 0 else None
        self.send_end = send_end
        self.next_t, self.i = start, 0
        self.max_burst = max(MAX_BURST, int(2 * tick_s / self.interval) + 1) if self.interval else 0

    def sending(self) -> bool:
        return self.interval is not None and self.next_t < self.send_end


class Agent:
    def __init__(self, config: dict, node: str, out=None):
        self.node = node
        mine = config["nodes"].get(node)
        if mine is None:
            raise ValueError(f"node {node!r} is not in the run configuration")
        self._settings(config, mine)
        self.counters = {k: 0 for k in COUNTERS}
        self.errors: list[str] = []
        self.kernel_rx = 0
        self.software_rx = 0
        self.out = out or sys.stdout
        self._assignment(config, mine)
        sends_per_s, answers_per_s = self._sizes(config)
        self._allocate(config, sends_per_s, answers_per_s)

    def _settings(self, config: dict, mine: dict) -> None:
        """The run's settings, each read and bounded (ValueError, KeyError, TypeError: a bad one)."""
        self.codec = Codec(bytes.fromhex(config["key"]), run_tag(config["run_id"]))
        self.port = int(config["port"])
        self.sports = [int(p) for p in config["sports"]]
        self.rate = float(config["rate"])
        # first sequence number of every flow: a restarted agent (lens) continues above what its
        # peers' anti-replay windows have seen instead of being taken for a replay
        self.seq_base = min(1 << 31, max(0, int(config.get("seq_base", 0))))
        self.duration = float(config["duration"])
        self.linger = float(config.get("linger", 1.0))
        self.start_at = float(config.get("start_at") or time.time())
        output = config.get("output", "document")
        if output not in ("document", "stream", "summary"):
            raise ValueError(f"unknown output mode {output!r}")
        self.stream = output != "document"  # batches printed as they leave the ring
        self.summaries = output == "summary"
        # a share of flows whose every record also goes out (summary mode: records mode has all)
        share = float(config.get("debug_records", 0.0))
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"debug_records {share!r}: a share between 0 and 1")
        self.debug_share = share if self.summaries else 0.0
        # summary windows: the coordinator's (the sender's clock cuts them); at most 100 bins
        self.summary_window_ns = int(1e9 * min(60.0, max(0.1, float(
            config.get("summary_window_s", 1.0)))))
        self.summary_bins = min(100, max(1, int(config.get("summary_bins", 10))))
        self.window_s = min(60.0, max(0.1, float(config.get("health_window_s", 1.0))))
        self.echo_timeout_s = min(10.0, max(0.1, float(config.get("echo_timeout_s",
                                                                    max(self.linger, 0.5)))))
        self.clock = clock_source(mine.get("clock"))
        self.rcvbuf = min(64 << 20, max(1024, int(config.get("rcvbuf_bytes", 4 << 20))))

    def _assignment(self, config: dict, mine: dict) -> None:
        """This node's NICs, the pairs and loops it sends, the flows it answers."""
        self.nics = {int(i): (addr, dev) for i, addr, dev in mine["nics"]}
        # pairs this node sends: (flow base, src nic, dst nic, dst address)
        self.pairs = [(int(f), int(s), int(d), a) for f, s, d, a in config["pairs"]
                      if int(s) in self.nics]
        # loops this node sends: (flow, src nic, switch address) - to a switch and back
        self.loop_port = int(config.get("loop_port", 0))
        self.loops = [(int(f), int(s), a) for f, s, a in config.get("loops", [])
                      if int(s) in self.nics]
        self.loop_addr = {f: a for f, _s, a in self.loops}
        # flows answered here: flow -> [highest seq, bitmap] (bounded by the assignment)
        self.replay = {int(f) + j: [-1, 0] for f, _s, d, _a in config["pairs"]
                       if int(d) in self.nics for j in range(len(self.sports))}
        # the sampled flows this node sends or answers, found once (a set lookup per record)
        mine = [f + j for f, _s, _d, _a in self.pairs for j in range(len(self.sports))]
        mine += [f for f, _s, _a in self.loops] + list(self.replay)
        self.debug_flows = frozenset(f for f in mine if debug_sampled(f, self.debug_share)) \
            if self.debug_share > 0 else frozenset()

    def _sizes(self, config: dict) -> tuple[float, float]:
        """The loop's tick and the record bounds from the load; (sends, answers) per second."""
        n_sp = len(self.sports)
        cap = int(config.get("max_records", 2_000_000))
        sends_per_s = self.rate * (len(self.pairs) + len(self.loops))
        answers_per_s = self.rate * (len(self.replay) // max(1, n_sp))
        tick = config.get("tick_s")
        if tick is None:  # about TICK_PACKETS datagrams per turn, within [TICK_MIN_S, TICK_MAX_S]
            load = 2 * (sends_per_s + answers_per_s) + 1e-9  # a probe: two datagrams here
            tick = min(TICK_MAX_S, max(TICK_MIN_S, TICK_PACKETS / load))
        self.tick_s = min(TICK_MAX_S, max(0.0, float(tick)))
        answers_per_s = max(answers_per_s, self.rate)  # the log's bounds: at least one flow
        # document mode: at most `capacity` records in all (the old bound); stream: unbounded
        expected = int(sends_per_s * self.duration * 1.05) + 16
        self.capacity = max(0, min(expected, cap))
        log_expected = int(answers_per_s * self.duration * 1.05) + 16
        self.log_capacity = max(0, min(log_expected, cap))
        return sends_per_s, answers_per_s

    def _allocate(self, config: dict, sends_per_s: float, answers_per_s: float) -> None:
        """Everything the hot path uses, allocated once: the record ring, the health meter, the
        buffers, the epoll and its socket maps."""
        span = self.echo_timeout_s + 2 * self.window_s
        if self.summaries:  # records wait for their whole summary window to be final
            span += self.summary_window_ns * 1e-9
        ring = config.get("ring_records") or int(sends_per_s * span * 1.5) + 64
        self.rec = rec = RecordRing(int(ring), int(answers_per_s * 2 * self.window_s * 1.5) + 64,
                                    keep=not self.stream)
        # the hot path's aliases (the ring's arrays are never reallocated)
        self.r_flow, self.r_seq, self.r_slot, self.r_state = rec.flow, rec.seq, rec.slot, \
            rec.state
        self.r_t1, self.r_t2, self.r_t3, self.r_t4 = rec.t1, rec.t2, rec.t3, rec.t4
        self.batches = 0
        self.drained_ns = time.time_ns()  # real time before the last turn that emptied the queues
        self.backlog = False  # a drain stopped at MAX_DRAIN this turn: its queue is not empty
        self.health = HealthMeter(self.counters, self.window_s,
                                  late_cap=int(sends_per_s * self.window_s * 1.2) + 64,
                                  keep_rows=not self.stream)
        self.pending_health: list[list] = []
        self.ovfl: dict[int, int] = {}  # fd -> last SO_RXQ_OVFL count
        # preallocated buffers: one receive buffer, one probe buffer
        self.rbuf = bytearray(MAX_DATAGRAM)
        self.rview = memoryview(self.rbuf)
        self.rbufs = [self.rbuf]
        self.pbuf = bytearray(ECHO_LEN)
        self.pview = memoryview(self.pbuf)[:PROBE_LEN]
        self.epoll = select.epoll()
        self.by_fd: dict[int, tuple] = {}  # fd -> (socket, role, nic); role 0 send 1 answer 2 loop
        self.senders: dict[tuple[int, int], socket.socket] = {}
        self.loopers: dict[int, socket.socket] = {}
        self.targets: list[tuple] = []

    # ------------------------------------------------------------------ sockets
    def _socket(self, addr: str, port: int, dev: str) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dev:  # egress through this NIC only: a dead NIC must not be masked by another route
            try:
                s.setsockopt(SOL_SOCKET, SO_BINDTODEVICE, dev.encode())
            except OSError as exc:
                self.errors.append(f"{dev}: SO_BINDTODEVICE: {exc.strerror}")
        for opt in (SO_TIMESTAMPNS, SO_RXQ_OVFL):
            try:
                s.setsockopt(SOL_SOCKET, opt, 1)
            except OSError:
                pass
        s.setsockopt(SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        s.bind((addr, port))
        s.setblocking(False)
        return s

    def _register(self, sock: socket.socket, role: int, nic: int) -> None:
        self.epoll.register(sock.fileno(), select.EPOLLIN)
        self.by_fd[sock.fileno()] = (sock, role, nic)

    def open(self) -> None:
        for nic, (addr, dev) in self.nics.items():
            try:
                self._register(self._socket(addr, self.port, dev), 1, nic)
                for j, sp in enumerate(self.sports):
                    s = self._socket(addr, sp, dev)
                    self.senders[(nic, j)] = s
                    self._register(s, 0, nic)
                if self.loop_port and any(src == nic for _f, src, _a in self.loops):
                    s = self._socket(addr, self.loop_port, dev)
                    s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)  # ICMP answers -> error queue
                    self.loopers[nic] = s
                    self._register(s, 2, nic)
            except OSError as exc:
                self.errors.append(f"nic {nic} {addr}: {exc.strerror or exc}")
        n_sp = len(self.sports)
        # one round of the schedule: (flows, src nic, dst nic, (address, port), sockets)
        self.targets = [(tuple(b + j for j in range(n_sp)), s, d, (a, self.port),
                         tuple(self.senders[(s, j)] for j in range(n_sp)))
                        for b, s, d, a in self.pairs if (s, 0) in self.senders]
        self.targets += [((f,), s, s, (a, LOOP_DPORT), (self.loopers[s],))
                         for f, s, a in self.loops if s in self.loopers]
        self.health.restart()  # listening from now on: the first window starts here

    def close(self) -> None:
        for sock, _role, _nic in self.by_fd.values():
            sock.close()
        self.by_fd.clear()
        self.epoll.close()

    # ------------------------------------------------------------------ receive
    def _rx_time(self, anc, fd: int) -> int:
        """Kernel receive time from the ancillary data (and the socket's overflow count)."""
        rx = 0
        for level, kind, data in anc:
            if level == SOL_SOCKET:
                if kind == SO_TIMESTAMPNS and len(data) >= 16:
                    sec, nsec = TS.unpack_from(data)
                    rx = sec * 1_000_000_000 + nsec
                elif kind == SO_RXQ_OVFL and len(data) >= 4:
                    drops = U32.unpack_from(data)[0]
                    before = self.ovfl.get(fd, 0)
                    if drops > before:
                        self.ovfl[fd] = drops
                        self.health.ovfl_total += drops - before
        if rx:
            self.kernel_rx += 1
            return rx
        self.software_rx += 1
        return time.time_ns()

    # The two drains and send_burst are the hot path: names are bound to locals, the common
    # case (one timestamp cmsg, a genuine packet) runs inline, counters are added once per call.
    def _received(self, sock: socket.socket, fd: int, want):
        """The ready datagrams of kind `want` (at most MAX_DRAIN read in all): (address, receive
        time) each, the datagram itself in self.rbuf until the next one is read. Others are
        counted by kind; a drain that hit MAX_DRAIN sets `backlog`."""
        recv, bufs, buf, check, c = sock.recvmsg_into, self.rbufs, self.rbuf, self.codec.check, \
            self.counters
        ts = TS.unpack_from
        kernel = 0
        try:
            for _ in range(MAX_DRAIN):
                try:
                    n, anc, flags, addr = recv(bufs, CMSG_SPACE)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:  # ICMP errors queued on the socket (e.g. port unreachable)
                    continue
                if len(anc) == 1 and anc[0][1] == SO_TIMESTAMPNS and anc[0][0] == SOL_SOCKET:
                    sec, nsec = ts(anc[0][2])
                    rx = sec * 1_000_000_000 + nsec
                    kernel += 1
                else:
                    rx = self._rx_time(anc, fd)
                kind = check(buf, MAX_DATAGRAM + 1 if flags & MSG_TRUNC else n)
                if kind != want:
                    c[kind if kind.__class__ is str else "unexpected"] += 1
                    continue
                yield addr, rx
            else:
                self.backlog = True
        finally:
            self.kernel_rx += kernel

    def drain_echoes(self, sock: socket.socket, fd: int, nic: int) -> None:
        """Sender socket: match every ready echo (at most MAX_DRAIN) to its record."""
        buf, c, mask, host = self.rbuf, self.counters, self.rec.mask, self.clock.host
        r_slot, r_flow, r_seq, r_state = self.r_slot, self.r_flow, self.r_seq, self.r_state
        r_t2, r_t3, r_t4 = self.r_t2, self.r_t3, self.r_t4
        ids, times = IDS.unpack_from, TIMES.unpack_from
        echoes = 0
        for _addr, rx in self._received(sock, fd, ECHO):
            src, _dst, flow, seq, slot = ids(buf, IDS_AT)
            pos = slot & mask
            if src != nic or r_slot[pos] != slot or r_flow[pos] != flow or r_seq[pos] != seq:
                c["unexpected"] += 1
                continue
            state = r_state[pos]
            if state != PENDING:
                c["late" if state == FREE else "replayed"] += 1
                continue
            r_t2[pos], r_t3[pos] = times(buf, HEAD.size)
            r_t4[pos] = host(rx)
            r_state[pos] = ANSWERED
            echoes += 1
        c["echoes"] += echoes

    def drain_probes(self, sock: socket.socket, fd: int, nic: int) -> None:
        """Responder socket: answer every ready genuine probe (at most MAX_DRAIN) in place."""
        buf, c, host, echo, sendto = self.rbuf, self.counters, self.clock.host, \
            self.codec.echo_in_place, sock.sendto
        replay, out, ids, time_ns = self.replay, self.rview[:ECHO_LEN], IDS_T1.unpack_from, \
            time.time_ns
        answered = 0
        for addr, rx in self._received(sock, fd, PROBE):
            _src, dst, flow, seq, _slot, t1 = ids(buf, IDS_AT)
            st = replay.get(flow)
            if dst != nic or st is None:
                c["unexpected"] += 1
                continue
            top, bits = st
            if seq > top:  # anti-replay: a 64-probe window per flow
                st[1] = ((bits << (seq - top)) | 1) & REPLAY_MASK if top >= 0 else 1
                st[0] = seq
            else:
                back = top - seq
                if back >= REPLAY_WINDOW or bits >> back & 1:
                    c["replayed"] += 1
                    continue
                st[1] = bits | (1 << back)
            self._log(flow, seq, t1)
            echo(buf, host(rx), host(time_ns()))
            try:
                sendto(out, addr)
                answered += 1
            except OSError:
                c["answer_errors"] += 1
        c["answered"] += answered

    def drain_loop(self, sock: socket.socket, nic: int) -> None:
        """ICMP port-unreachable from the switch a loop probe was sent to: the loop is closed.
        The error queue hands back our own probe (MAC checked), its slot finds the record."""
        for _ in range(MAX_DRAIN):
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
                if level == SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                    sec, nsec = TS.unpack_from(payload)
                    rx = sec * 1_000_000_000 + nsec
                elif level == socket.IPPROTO_IP and kind == IP_RECVERR and len(payload) >= 24:
                    err = payload
            rx = rx or time.time_ns()
            kind = self.codec.check(data, len(data))
            if kind.__class__ is str:
                self.counters[kind] += 1
                continue
            if err is None:
                continue
            src, _dst, flow, seq, slot = IDS.unpack_from(data, IDS_AT)
            origin, icmp_type, icmp_code = err[4], err[5], err[6]
            offender = socket.inet_ntoa(err[20:24])
            if origin != 2 or icmp_type != 3 or icmp_code != 3 or \
                    offender != self.loop_addr.get(flow) or src != nic:
                self.counters["loop_errors"] += 1  # answered by someone else: not closed
                continue
            self._loop_closed(nic, flow, seq, slot, rx)

    def _log(self, flow: int, seq: int, t1: int) -> None:
        rec = self.rec
        if not self.stream and rec.log_n >= self.log_capacity:
            self.counters["log_dropped"] += 1
            return
        if rec.log_full():
            self.emit()  # the log ring is full before its window ended: flush it early
        rec.log(flow, seq, t1)

    def _loop_closed(self, nic, flow, seq, slot, rx) -> None:
        pos = slot & self.rec.mask
        if self.r_slot[pos] != slot or self.r_flow[pos] != flow or self.r_seq[pos] != seq:
            self.counters["unexpected"] += 1
            return
        state = self.r_state[pos]
        if state != PENDING:
            self.counters["late" if state == FREE else "replayed"] += 1
            return
        self.r_t2[pos] = self.r_t3[pos] = 0
        self.r_t4[pos] = self.clock.host(rx)
        self.r_state[pos] = ANSWERED
        self.counters["echoes"] += 1

    # ------------------------------------------------------------------ send
    def send_burst(self, i: int, count: int) -> None:
        """Probes i .. i+count-1 of the schedule: round-robin over the targets, each target's
        source ports in turn; seq counts a flow's probes."""
        targets, nt, rec, pbuf, pview = self.targets, len(self.targets), self.rec, self.pbuf, \
            self.pview
        mask = rec.mask
        pack, host, time_ns, c = self.codec.pack_probe_into, self.clock.host, time.time_ns, \
            self.counters
        r_flow, r_seq, r_slot, r_t1, r_state = self.r_flow, self.r_seq, self.r_slot, self.r_t1, \
            self.r_state
        limit = None if self.stream else self.capacity
        seq_base = self.seq_base
        sent = 0
        for i in range(i, i + count):
            flows, src, dst, dest, socks = targets[i % nt]
            k = i // nt
            nf = len(flows)
            j = k % nf
            flow, seq = flows[j], seq_base + k // nf
            if limit is not None and rec.n >= limit:
                c["records_dropped"] += 1
                continue
            if rec.n - rec.emitted >= rec.size:
                self._force_room()
            idx = rec.n
            rec.n = idx + 1
            pos, slot = idx & mask, idx & 0xFFFFFFFF
            t1 = host(time_ns())
            r_flow[pos], r_seq[pos], r_slot[pos], r_t1[pos] = flow, seq, slot, t1
            r_state[pos] = PENDING
            pack(pbuf, src, dst, flow, seq, slot, t1)
            try:
                try:
                    socks[j].sendto(pview, dest)
                except ConnectionRefusedError:  # a loop socket's last ICMP answer, reported once
                    socks[j].sendto(pview, dest)
                sent += 1
            except OSError:  # NIC down, no route: the probe never left
                r_state[pos] = SEND_FAILED
                c["send_errors"] += 1
        c["sent"] += sent

    def send(self, i: int) -> None:
        self.send_burst(i, 1)

    def _force_room(self) -> None:
        """The ring is full of records still waiting for echoes (the output cannot keep up or
        the rate is far above the plan): the oldest quarter leaves now, unanswered (counted)."""
        rec = self.rec
        upto = rec.emitted + max(1, rec.size // 4)
        self.counters["ring_forced"] += upto - rec.emitted
        self.health.ring_forced += upto - rec.emitted
        self.emit(upto=upto)

    # ------------------------------------------------------------------ batches
    def emit(self, final: bool = False, upto: int | None = None) -> None:
        """Final records (or all before `upto`, or all) and the responder log leave their rings
        as one batch (printed at once in stream mode), with the health rows closed since the
        last batch."""
        if upto is None:
            # a record is lost only if its echo timeout passed before a drain that emptied every
            # socket: after a stall its echo may be waiting in a receive queue, not lost
            limit = self.clock.host(self.drained_ns) - int(self.echo_timeout_s * 1e9)
            if final:
                upto = self.rec.n
            elif self.summaries:  # whole summary windows only: all their records are final
                w = self.summary_window_ns
                upto = self.rec.sent_before(limit // w * w)
            else:
                upto = self.rec.final_upto(limit)
        recs = self.rec.take(upto)
        flows, seqs, t1s = self.rec.take_log()
        rows, self.pending_health = self.pending_health, []
        if not self.stream:
            return
        batch = {"kind": "batch", "v": VERSION, "node": self.node, "batch": self.batches,
                 "health": rows}
        if self.summaries:
            batch["summary"] = self._summary(recs, flows, t1s)
            if self.debug_flows:
                debug = self._debug(recs, flows, seqs)
                if debug is not None:
                    batch["debug"] = debug
        else:
            batch["records"] = {"n": len(recs["flow"]),
                                **{k: "".join(b64(v)) for k, v in recs.items()}}
            batch["received"] = {"n": len(flows), "flow": "".join(b64(flows)),
                                 "seq": "".join(b64(seqs))}
        self._print_object(batch)

    def _summary(self, recs: dict, flows, t1s) -> dict:
        """A batch's records and responder log as per-window, per-flow summaries (summary.py)."""
        w = self.summary_window_ns
        rows, bins = summarize(recs, w, self.summary_bins, self.loop_addr)
        got = received_counts(flows, t1s, w)
        return {"window_ns": w, "bins": self.summary_bins,
                "rows": {"n": len(rows["flow"]),
                         "data": "".join(b64_bytes(pack(rows, SUMMARY_FIELDS, ROW)))},
                "row_bins": {"n": len(bins), "data": "".join(b64(bins))},
                "received": {"n": len(got["flow"]),
                             "data": "".join(b64_bytes(pack(got, RECEIVED_FIELDS, RECEIVED_ROW)))}}

    def _debug(self, recs: dict, flows, seqs) -> dict | None:
        """The sampled flows' records and answer-log entries of a batch in record mode's
        encoding, at most MAX_DEBUG_RECORDS of each (`dropped`: those left out); None if none."""
        mine, rf = self.debug_flows, recs["flow"]
        idx, dropped = debug_cap([i for i in range(len(rf)) if rf[i] in mine], rf,
                                 MAX_DEBUG_RECORDS)
        got, dropped_log = debug_cap([i for i in range(len(flows)) if flows[i] in mine], flows,
                                     MAX_DEBUG_RECORDS)
        if not idx and not got and not dropped and not dropped_log:
            return None
        return {"records": {"n": len(idx), **{name: b64_picked(recs[name], code, idx)
                                              for name, code in RECORD_FIELDS}},
                "received": {"n": len(got), "flow": b64_picked(flows, "I", got),
                             "seq": b64_picked(seqs, "I", got)},
                "dropped": dropped + dropped_log}

    def _print_object(self, obj: dict) -> None:
        """One object as FLS1 lines: `FLS1 <batch> <i> <n> <piece>` (compact JSON in pieces)."""
        text = json.dumps(obj, separators=(",", ":"))
        pieces = [text[i:i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)] or [""]
        k = self.batches
        self.batches += 1
        self.out.write("".join(f"FLS1 {k} {i} {len(pieces)} {p}\n" for i, p in enumerate(pieces)))
        self.out.flush()

    # ------------------------------------------------------------------ loop
    def loop(self) -> None:
        mono0 = time.monotonic() + max(0.0, self.start_at - time.time())
        send_end = mono0 + self.duration
        end = send_end + self.linger
        schedule = Schedule(self.rate, len(self.targets), self.tick_s, mono0, send_end)
        next_window = time.monotonic() + self.window_s
        meter = self.health
        prev = time.monotonic()
        while True:
            now = time.monotonic()
            meter.note_gap(now - prev)
            prev = now
            if now >= next_window:
                next_window = self._close_window(now, next_window)
            if now >= end:
                break
            if schedule.sending():  # (the last tick's probes too)
                self._send_due(schedule, now)
                wait = min(schedule.next_t, end, next_window) - time.monotonic()
            else:
                wait = min(end, next_window) - now
            self._turn(now, wait)
        self.pending_health.append(meter.close())
        self.emit(final=True)

    def _close_window(self, now: float, next_window: float) -> float:
        """The health window ends: its row and the final records leave as a batch. The next
        window's end."""
        self.pending_health.append(self.health.close())
        next_window += self.window_s
        if next_window <= now:  # stalled for more than a window: realign
            next_window = now + self.window_s
        self.emit()
        return next_window

    def _send_due(self, schedule: Schedule, now: float) -> None:
        """The probes due by now in one burst (lateness of its first one noted); further behind
        than MAX_LAG_S, the schedule skips ahead (counted) instead of bursting."""
        interval = schedule.interval
        due = min(now, schedule.send_end - interval * 1e-3)  # the schedule ends at send_end
        if due - schedule.next_t > MAX_LAG_S:
            skip = int((due - schedule.next_t) / interval)
            self.counters["skipped"] += skip
            schedule.i += skip
            schedule.next_t += skip * interval
        if schedule.next_t <= due:
            burst = min(schedule.max_burst, int((due - schedule.next_t) / interval) + 1)
            self.health.note_late(now - schedule.next_t)
            self.send_burst(schedule.i, burst)
            schedule.i += burst
            schedule.next_t += burst * interval

    def _turn(self, now: float, wait: float) -> None:
        """One wake-up: drain every ready socket (waiting for one at most `wait`), then sleep out
        the rest of the tick."""
        tick, poll, by_fd = self.tick_s, self.epoll.poll, self.by_fd
        self.health.wakeups += 1
        # one blocking call per turn: under load the tick's sleep has filled the queues and
        # poll(0) finds them; only an idle agent blocks in poll until a datagram or a send
        turn_ns = time.time_ns()
        self.backlog = False
        events = poll(0)
        if not events:
            wait = max(wait, now + tick - time.monotonic())
            if wait > 0:
                events = poll(min(wait, 0.05))
        for fd, _ev in events:
            sock, role, nic = by_fd[fd]
            if role == 0:
                self.drain_echoes(sock, fd, nic)
            elif role == 1:
                self.drain_probes(sock, fd, nic)
            else:
                self.drain_loop(sock, nic)
        if not self.backlog:  # every datagram that arrived before turn_ns has been read
            self.drained_ns = turn_ns
        # coalesce: at most one turn per tick, so each turn drains many datagrams (the
        # receive queues hold them meanwhile; t2/t4 are kernel times, unaffected)
        rest = now + tick - time.monotonic()
        if rest > 0 and events:
            time.sleep(rest)

    # ------------------------------------------------------------------ output
    def summary(self) -> dict:
        kinds = "kernel" if self.kernel_rx and not self.software_rx else \
            "software" if not self.kernel_rx else "mixed"
        return {"node": self.node, "version": VERSION, "rx_timestamps": kinds,
                "counters": self.counters, "errors": self.errors, "capacity": self.capacity,
                "health": {"window_s": self.window_s, "fields": list(HEALTH_FIELDS),
                           "windows": [] if self.stream else self.health.rows,
                           "run": self.health.run_summary()}}

    def report(self) -> dict:
        """The one-shot document (output "document"): every batch's records together."""
        doc = self.summary()
        rec = self.rec
        n, m = len(rec.acc["flow"]), len(rec.acc_flow)
        doc["records"] = {"n": n, **{k: b64(v) for k, v in rec.acc.items()}}
        doc["received"] = {"n": m, "flow": b64(rec.acc_flow), "seq": b64(rec.acc_seq)}
        return doc

    def finish_stream(self) -> None:
        self._print_object({"kind": "end", **self.summary()})


def run(config: dict, node: str, out=None) -> dict | None:
    """Probe per the configuration; the document (output "document"), or None after streaming."""
    agent = Agent(config, node, out)
    agent.open()
    try:
        agent.loop()
    finally:
        agent.close()
    if agent.stream:
        agent.finish_stream()
        return None
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
    if out is not None:
        sys.stdout.write(json.dumps(out, indent=0))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
