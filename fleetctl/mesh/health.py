"""The probe agent's own health, per window: did the agent (or its host), not the network, lose
probes? Standard library only: shipped to the nodes inside the agent's payload.

Per window (1 s by default) one row of HEALTH_FIELDS (docs/hdf5-schema.md, "agent health records"):
send lateness against the schedule, skipped sends, the agent's counters, socket receive-queue
overflows (SO_RXQ_OVFL: the kernel hands the socket's cumulative drop count to every datagram
received after a drop), the UDP error counters of the agent's network namespace (/proc/net/snmp),
the host's softnet backlog drops (/proc/net/softnet_stat: per CPU, not per namespace) and the
agent's CPU time. Counters the host does not offer are -1 (unknown), never 0.
"""

from __future__ import annotations

import time
from array import array

SNMP_PATH = "/proc/net/snmp"
SOFTNET_PATH = "/proc/net/softnet_stat"
SNMP_FIELDS = ("RcvbufErrors", "InErrors", "SndbufErrors")
# one row per window; every value a number (int, or float where named *_s / *_us)
HEALTH_FIELDS = (
    "t_start_ns",          # wall clock (real, not the host's emulated clock) at window start
    "duration_s",          # window length actually covered
    "sent", "send_errors", "skipped",
    "late_p50_us", "late_p99_us", "late_max_us",  # send time minus scheduled time
    "echoes",              # sender: genuine echoes matched to a record
    "answered", "answer_errors",  # responder: echoes sent / echoes that could not be sent
    "rejected",            # foreign + garbled + bad_mac + replayed + unexpected + late
    "rxq_ovfl",            # datagrams the agent's sockets dropped (SO_RXQ_OVFL delta)
    "udp_rcvbuf_errors", "udp_in_errors", "udp_sndbuf_errors",  # namespace, /proc/net/snmp
    "softnet_dropped",     # host, /proc/net/softnet_stat column 2
    "cpu_s",               # agent CPU time (user + system) in the window
    "wakeups",             # loop turns (each drains every ready socket)
    "ring_forced",         # records emitted before their echo timeout (ring full)
    "stall_max_us",        # longest gap between two loop turns ending in the window: the agent
                           # was not running (descheduled), so it neither answered nor read
)
_P99 = HEALTH_FIELDS.index("late_p99_us")
REJECT_COUNTERS = ("foreign", "garbled", "bad_mac", "replayed", "unexpected", "late")
UNKNOWN = -1
MAX_HEALTH_ROWS = 86400  # one day of 1 s windows: the document mode's bound


def parse_udp_snmp(text: str) -> dict[str, int]:
    """The Udp: counters of a /proc/net/snmp text (a header line of names, then one of values)."""
    rows = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
    if len(rows) < 2 or len(rows[0]) != len(rows[1]):
        return {}
    out = {}
    for name, value in zip(rows[0][1:], rows[1][1:]):
        try:
            out[name] = int(value)
        except ValueError:
            continue
    return out


def parse_softnet_dropped(text: str) -> int:
    """Sum over CPUs of the second column (packets dropped: backlog full) of softnet_stat (hex)."""
    total = 0
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 2:
            try:
                total += int(cols[1], 16)
            except ValueError:
                continue
    return total


def _read(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


class HostCounters:
    """The namespace's UDP error counters and the host's softnet drops (cumulative, or UNKNOWN)."""

    def __init__(self, snmp_path: str = SNMP_PATH, softnet_path: str = SOFTNET_PATH):
        self.snmp_path, self.softnet_path = snmp_path, softnet_path

    def read(self) -> tuple[int, ...]:
        text = _read(self.snmp_path)
        udp = parse_udp_snmp(text) if text is not None else {}
        soft = _read(self.softnet_path)
        return tuple(udp.get(k, UNKNOWN) for k in SNMP_FIELDS) + \
            (parse_softnet_dropped(soft) if soft is not None else UNKNOWN,)


def delta(now: tuple[int, ...], before: tuple[int, ...]) -> list[int]:
    """now - before per counter, UNKNOWN where either side is unknown (or went backwards)."""
    return [n - b if n >= 0 and b >= 0 and n >= b else UNKNOWN for n, b in zip(now, before)]


def percentile(sorted_values, q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class HealthMeter:
    """Accumulates one window, closes it into a row; keeps the run's totals."""

    def __init__(self, counters: dict, window_s: float, late_cap: int = 1 << 16,
                 host: HostCounters | None = None, keep_rows: bool = True):
        self.counters = counters  # the agent's live counter dict (read, never written)
        self.window_s = window_s
        self.host = host or HostCounters()
        self.late = array("d", bytes(8 * late_cap))  # lateness samples of the window (s)
        self.n_late = 0
        self.late_max = 0.0
        self.wakeups = 0
        self.ring_forced = 0
        self.stall_max = 0.0
        self.ovfl_total = 0  # updated by the agent: sum over sockets of the last SO_RXQ_OVFL
        self._open(time.time_ns())
        self.run_start = (self.t_start, self.cpu0, self.host0, dict(counters))
        self.run_late_max = 0.0
        self.worst_late_p99 = 0.0
        self.keep_rows = keep_rows  # document mode keeps every row; a stream sends them on
        self.rows: list[list] = []

    def restart(self) -> None:
        """Begin the first window (and the run's totals) now: called once every socket is bound,
        so the first window's start says when the agent began listening (the collector treats
        probes sent to it before then as never answerable, not as lost by the network)."""
        self._open(time.time_ns())
        self.run_start = (self.t_start, self.cpu0, self.host0, dict(self.counters))

    def _open(self, now_ns: int) -> None:
        self.t_start = now_ns
        self.cpu0 = time.process_time()
        self.host0 = self.host.read()
        self.c0 = dict(self.counters)
        self.ovfl0 = self.ovfl_total
        self.n_late, self.late_max, self.wakeups, self.ring_forced = 0, 0.0, 0, 0
        self.stall_max = 0.0

    def note_gap(self, seconds: float) -> None:
        """The time since the previous loop turn (noted before the window can close, so a stall
        belongs to the window it happened in)."""
        if seconds > self.stall_max:
            self.stall_max = seconds

    def note_late(self, seconds: float) -> None:
        if self.n_late < len(self.late):
            self.late[self.n_late] = seconds
            self.n_late += 1
        if seconds > self.late_max:
            self.late_max = seconds

    def close(self) -> list:
        """End the window now: its row (HEALTH_FIELDS order), also kept in `rows` (bounded)."""
        now = time.time_ns()
        c, c0 = self.counters, self.c0
        d = {k: c[k] - c0.get(k, 0) for k in c}
        late = sorted(self.late[:self.n_late])
        host = delta(self.host.read(), self.host0)
        row = [self.t_start, round((now - self.t_start) * 1e-9, 6),
               d["sent"], d["send_errors"], d["skipped"],
               round(percentile(late, 0.5) * 1e6, 1), round(percentile(late, 0.99) * 1e6, 1),
               round(self.late_max * 1e6, 1),
               d["echoes"], d["answered"], d["answer_errors"],
               sum(d.get(k, 0) for k in REJECT_COUNTERS),
               self.ovfl_total - self.ovfl0, *host,
               round(time.process_time() - self.cpu0, 6), self.wakeups, self.ring_forced,
               round(self.stall_max * 1e6, 1)]
        self.run_late_max = max(self.run_late_max, self.late_max)
        self.worst_late_p99 = max(self.worst_late_p99, row[_P99])
        if self.keep_rows and len(self.rows) < MAX_HEALTH_ROWS:
            self.rows.append(row)
        self._open(now)
        return row

    def run_summary(self) -> dict:
        """Totals over the whole run (the document's health.run)."""
        t0, cpu0, host0, c0 = self.run_start
        elapsed = (time.time_ns() - t0) * 1e-9
        cpu = time.process_time() - cpu0
        host = dict(zip(("udp_rcvbuf_errors", "udp_in_errors", "udp_sndbuf_errors",
                         "softnet_dropped"), delta(self.host.read(), host0)))
        sent = self.counters["sent"] - c0.get("sent", 0)
        answered = self.counters["answered"] - c0.get("answered", 0)
        return {"duration_s": round(elapsed, 3), "cpu_s": round(cpu, 4),
                "cpu_pct": round(100 * cpu / elapsed, 2) if elapsed > 0 else 0.0,
                "packets_per_s": round((sent + answered) / elapsed, 1) if elapsed > 0 else 0.0,
                "late_p99_us_worst_window": self.worst_late_p99,
                "late_max_us": round(self.run_late_max * 1e6, 1),
                "rxq_ovfl": self.ovfl_total, **host}
