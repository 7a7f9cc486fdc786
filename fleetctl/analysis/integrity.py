"""Measurement integrity: loss the agents' own counters explain is the endpoint's, not the
network's.

    marks = overload_marks(health, hosts)                # per host: overloaded intervals
    keep = probes_kept(probes, nic_host, marks)          # probes for triangulation
    findings = overload_findings(marks, ...)             # `probe.overload` warnings

An agent's health row (one per agent and window, health.HEALTH_FIELDS) is overloaded when the agent
or its host lost or delayed probes by itself: sends skipped, datagrams dropped by its sockets
(SO_RXQ_OVFL), UDP receive-buffer / input / send-buffer errors in its namespace, softnet backlog
drops, records pushed out of its ring before their echo could arrive, send lateness p99 beyond
`late_p99_us`, a stall (the agent not running between two loop turns) beyond `stall_us`, or CPU
near a whole core. Probes whose sender or responder was overloaded at the time are left out of
triangulation; a NIC down makes `send_errors`, which is the network's and never counts here.

"At the time" reaches back one echo timeout before an overloaded window: a probe sent then
waited for its echo during the window (a socket that overflowed, an answer the stalled responder
sent too late), and a drop is reported only with the next datagram after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COUNT_FIELDS = ("skipped", "rxq_ovfl", "udp_rcvbuf_errors", "udp_in_errors", "udp_sndbuf_errors",
                "softnet_dropped", "ring_forced")
MAX_CPU_SHARE = 0.9  # CPU time over window length: the agent had (nearly) a whole core


@dataclass(frozen=True)
class IntegrityThresholds:
    late_p99_us: float = 100_000.0  # the loop sleeps up to one tick (5-20 ms) by design
    stall_us: float = 250_000.0  # the agent's own skip-ahead lag (agent.MAX_LAG_S)
    echo_timeout_s: float = 1.0  # the agents' echo timeout (max(linger, 0.5) unless configured)
    cpu_share: float = MAX_CPU_SHARE
    margin_s: float = 0.25  # around each overloaded window: host clocks differ by milliseconds
    alive_guard_s: float = 0.05  # a responder counts as listening this long after its start


@dataclass
class HostOverload:
    host: str
    windows: int = 0  # health windows reported
    overloaded: int = 0  # of them, overloaded
    intervals: list[tuple[int, int]] = field(default_factory=list)  # ns, real wall clock
    totals: dict = field(default_factory=dict)  # counters summed over overloaded windows
    late_p99_us_max: float = 0.0
    stall_us_max: float = 0.0
    cpu_pct_max: float = 0.0
    probes_set_aside: int = 0
    alive: tuple[int, int] | None = None  # first window start, last window end (ns)
    probes_outside_alive: int = 0  # sent to it while its agent was not running
    # its answer log is in for probes sent before this (ns): the log leaves with the health row
    # that ends when the batch is cut, and a probe is logged when answered, up to one echo
    # timeout after its send
    log_complete_before: int | None = None
    probes_log_pending: int = 0  # sent to it after its answer log is complete: set aside


def overload_marks(health: dict, hosts: list[str],
                   th: IntegrityThresholds | None = None) -> dict[str, HostOverload]:
    """Per host with a health table ({"fields", "windows"}), its overloaded windows. Hosts that
    share their fields (all of them, in lens) are judged in one array: a loop over 1,280 hosts
    cost lens 0.1 s a window (benchmarks/lens_harness.py); host_marks is the same per host."""
    th = th or IntegrityThresholds()
    groups: dict[tuple, list[str]] = {}
    for host in hosts:
        table = health.get(host) or {}
        fields, rows = table.get("fields") or [], table.get("windows")
        if fields and rows is not None and len(rows) and "t_start_ns" in fields and "duration_s" in fields:
            groups.setdefault(tuple(fields), []).append(host)
    out: dict[str, HostOverload] = {}
    for fields, members in groups.items():
        tables = [health[h]["windows"] for h in members]
        counts = np.array([len(t) for t in tables])
        if all(isinstance(t, np.ndarray) for t in tables):  # lens's ingest keeps them as arrays
            data = np.concatenate(tables).astype(np.float64, copy=False)
        else:
            data = np.asarray([r for t in tables for r in t], dtype=np.float64)
        data = data.reshape(int(counts.sum()), len(fields))
        col = {name: i for i, name in enumerate(fields)}
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        dur = np.maximum(data[:, col["duration_s"]], 1e-3)
        t_start = data[:, col["t_start_ns"]]
        end = t_start + dur * 1e9
        first = np.minimum.reduceat(t_start, starts)
        last = np.maximum.reduceat(end, starts)
        bad = _bad_rows(data, col, dur, th)
        n_bad = np.add.reduceat(bad.astype(np.int64), starts)
        present = [name for name in COUNT_FIELDS if name in col]
        echo_ns = min(max(th.echo_timeout_s, 0.0), 60.0) * 1e9
        guard = th.alive_guard_s * 1e9
        for i, host in enumerate(members):
            if n_bad[i]:  # the details of the few overloaded hosts, one by one
                out[host] = host_marks(host, list(fields), tables[i], th)
                continue
            ho = HostOverload(host, windows=int(counts[i]))
            ho.alive = (int(first[i] + guard), int(last[i] - guard))
            ho.log_complete_before = int(last[i] - echo_ns)
            ho.totals = dict.fromkeys(present, 0)
            out[host] = ho
    return {h: out[h] for h in hosts if h in out}


def _bad_rows(data: np.ndarray, col: dict, dur: np.ndarray, th: IntegrityThresholds) -> np.ndarray:
    bad = np.zeros(len(data), dtype=bool)
    for name in COUNT_FIELDS:
        if name in col:
            bad |= data[:, col[name]] > 0  # -1 is "unknown", never a sign of overload
    if "late_p99_us" in col:
        bad |= data[:, col["late_p99_us"]] > th.late_p99_us
    if "stall_max_us" in col:  # absent from runs recorded before the field existed
        bad |= data[:, col["stall_max_us"]] > th.stall_us
    if "cpu_s" in col:
        bad |= data[:, col["cpu_s"]] / dur >= th.cpu_share
    return bad


def host_marks(host: str, fields: list[str], rows: list, th: IntegrityThresholds) -> HostOverload:
    """One host's marks from its health rows (fields with t_start_ns and duration_s)."""
    col = {name: i for i, name in enumerate(fields)}
    data = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(fields))
    dur = np.maximum(data[:, col["duration_s"]], 1e-3)
    ho = HostOverload(host, windows=len(rows))
    t_start = data[:, col["t_start_ns"]]
    ho.alive = (int(t_start.min() + th.alive_guard_s * 1e9),
                int((t_start + dur * 1e9).max() - th.alive_guard_s * 1e9))
    ho.log_complete_before = int((t_start + dur * 1e9).max()
                                 - min(max(th.echo_timeout_s, 0.0), 60.0) * 1e9)
    ho.totals = {name: 0 for name in COUNT_FIELDS if name in col}
    bad = _bad_rows(data, col, dur, th)
    ho.overloaded = int(bad.sum())
    if ho.overloaded:
        for name in ho.totals:
            v = data[bad, col[name]]
            ho.totals[name] = int(v[v > 0].sum())
        if "late_p99_us" in col:
            ho.late_p99_us_max = round(float(data[bad, col["late_p99_us"]].max()), 1)
        if "stall_max_us" in col:
            ho.stall_us_max = round(float(data[bad, col["stall_max_us"]].max()), 1)
        if "cpu_s" in col:
            ho.cpu_pct_max = round(float((data[bad, col["cpu_s"]] / dur[bad]).max() * 100), 1)
        t0 = data[bad, col["t_start_ns"]]
        m = th.margin_s * 1e9
        back = m + min(max(th.echo_timeout_s, 0.0), 60.0) * 1e9
        ho.intervals = [(int(a - back), int(a + d * 1e9 + m)) for a, d in zip(t0, dur[bad])]
    return ho


def probes_kept(probes: np.ndarray, nic_host: np.ndarray, hosts: list[str],
                marks: dict[str, HostOverload], clock_offset_s: np.ndarray | None = None
                ) -> np.ndarray:
    """True for probes whose sender and responder were not overloaded when it was sent, and whose
    responder's agent was running then (16 agents starting on 2 cores: the last starts ~0.4 s
    after the first sends to it; those probes were never answerable). Send times are the sender's
    clock; `clock_offset_s` (per host, from the clock fit) brings them closer to the wall clock
    the health windows use, the margins cover the rest."""
    keep = np.ones(probes.size, dtype=bool)
    if not marks or probes.size == 0:
        return keep
    t = probes["t_send"].astype(np.int64)
    src_h = nic_host[probes["src_nic"]]
    if clock_offset_s is not None:
        off = np.nan_to_num(np.asarray(clock_offset_s, dtype=np.float64))
        t = t - (off[src_h] * 1e9).astype(np.int64)
    dst_nic = probes["dst_nic"]
    dst_h = np.where(dst_nic >= 0, nic_host[np.maximum(dst_nic, 0)], -1)
    lo = np.full(len(hosts) + 1, np.iinfo(np.int64).min)  # last slot: no responder (loops)
    hi_ = np.full(len(hosts) + 1, np.iinfo(np.int64).max)
    for hi, host in enumerate(hosts):
        m = marks.get(host)
        if m is not None and m.alive is not None:
            lo[hi], hi_[hi] = m.alive
    outside = (t < lo[dst_h]) | (t > hi_[dst_h])  # dst_h -1 picks the last slot
    for hi, n in zip(*np.unique(dst_h[outside], return_counts=True)):
        marks[hosts[int(hi)]].probes_outside_alive += int(n)
    keep &= ~outside
    keep &= ~_log_pending(probes, t, dst_h, hosts, marks, keep)
    # overloaded intervals of every host in one sorted key space: host * span + time, so one
    # searchsorted per end answers for all hosts at once (no pass over the probes per host)
    ivs = [(hi, iv) for hi, host in enumerate(hosts)
           if host in marks and marks[host].intervals for iv in _merged(marks[host].intervals)]
    if not ivs:
        return keep
    base = min(int(t.min()), min(int(iv[0]) for _, iv in ivs))
    span = max(int(t.max()), max(int(iv[1]) for _, iv in ivs)) - base + 1
    lo_k = np.array([hi * span + int(iv[0]) - base for hi, iv in ivs], dtype=np.int64)
    hi_k = np.array([hi * span + int(iv[1]) - base for hi, iv in ivs], dtype=np.int64)
    hit = np.zeros(probes.size, dtype=bool)
    for h in (src_h, dst_h):
        ok = h >= 0
        k = h[ok].astype(np.int64) * span + (t[ok] - base)
        pos = np.searchsorted(lo_k, k, side="right") - 1
        inside = (pos >= 0) & (k <= hi_k[np.maximum(pos, 0)])
        hit_here = np.zeros(probes.size, dtype=bool)
        hit_here[np.flatnonzero(ok)[inside]] = True
        counted = hit_here & keep
        for hi, n in zip(*np.unique(h[counted], return_counts=True)):
            marks[hosts[int(hi)]].probes_set_aside += int(n)
        hit |= hit_here
    keep &= ~hit
    return keep


def _log_pending(probes: np.ndarray, t: np.ndarray, dst_h: np.ndarray, hosts: list[str],
                 marks: dict[str, HostOverload], keep: np.ndarray) -> np.ndarray:
    """Probes to a responder sent after its answer log is complete (its batch late): of the
    unanswered, lost out and lost back cannot be told apart, and a guess blames the other
    direction's links. Cut by send time, answered or not, so the loss share is not biased."""
    until = np.full(len(hosts) + 1, np.iinfo(np.int64).max)
    for hi, host in enumerate(hosts):
        m = marks.get(host)
        if m is not None and m.log_complete_before is not None:
            until[hi] = m.log_complete_before
    pending = keep & (dst_h >= 0) & (t >= until[dst_h])
    for hi, n in zip(*np.unique(dst_h[pending], return_counts=True)):
        marks[hosts[int(hi)]].probes_log_pending += int(n)
    return pending


def responders_log_pending(marks: dict[str, HostOverload], b_ns: int) -> set[str]:
    """Hosts whose answer log for probes sent before b_ns is not all in: per-window summaries
    cannot tell which of their rows' probes were lost out and which back."""
    return {h for h, m in marks.items()
            if m.log_complete_before is not None and m.log_complete_before < b_ns}


def hosts_set_aside(marks: dict[str, HostOverload], a_ns: int, b_ns: int) -> set[str]:
    """Hosts whose probes of window [a_ns, b_ns) are set aside as a whole (per-window summaries
    cannot be split by time the way probes_kept splits records): overloaded at any time in it,
    or its agent started inside it or stopped reporting before its middle (its last health row
    may still be on its way when the window closes)."""
    out = set()
    mid = (a_ns + b_ns) // 2
    for host, m in marks.items():
        if any(lo < b_ns and hi > a_ns for lo, hi in m.intervals):
            out.add(host)
        elif m.alive is not None and (m.alive[0] > a_ns or m.alive[1] < mid):
            out.add(host)
    return out


def _merged(intervals: list[tuple[int, int]]) -> np.ndarray:
    """Sorted, overlapping intervals joined: disjoint (start, end) rows."""
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return np.array(out, dtype=np.int64)


FIX = ("lower the probe rate (--rate, or mesh.probe_budget_pps for the whole plan), probe fewer "
       "pairs (a covering design: lower mesh.coverage_k or the budget), or give the agent CPU "
       "(the host's own load starves it)")


def overload_findings(marks: dict[str, HostOverload], rate: float | None = None) -> list[dict]:
    """One `probe.overload` warning per host with overloaded windows."""
    out = []
    for host, m in sorted(marks.items()):
        if not m.overloaded:
            continue
        counters = {k: v for k, v in m.totals.items() if v}
        what = ", ".join(f"{k} {v}" for k, v in counters.items())
        extra = []
        if m.late_p99_us_max:
            extra.append(f"send lateness p99 up to {m.late_p99_us_max / 1000:.1f} ms")
        if m.stall_us_max:
            extra.append(f"not running for up to {m.stall_us_max / 1000:.0f} ms at a time")
        if m.cpu_pct_max:
            extra.append(f"agent CPU up to {m.cpu_pct_max:g} %")
        note = (f"probe agent on {host} overloaded in {m.overloaded} of {m.windows} windows"
                + (f" ({what})" if what else "") + ("; " + ", ".join(extra) if extra else "")
                + f": {m.probes_set_aside} probes from or to it left out of the network "
                  "analysis, a measurement problem, not a network fault")
        out.append({
            "element": {"type": "host", "id": host},
            "category": "probe",
            "check": "probe.overload",
            "metric": "overload",
            "severity": "warning",
            "confidence": 1.0,
            "evidence": {"windows": m.windows, "overloaded_windows": m.overloaded,
                         "counters": counters, "late_p99_us_max": m.late_p99_us_max,
                         "stall_us_max": m.stall_us_max,
                         "cpu_pct_max": m.cpu_pct_max, "probes_set_aside": m.probes_set_aside,
                         **({"rate_per_pair_pps": rate} if rate else {})},
            "note": note,
            "fix": FIX,
        })
    return out


HOST_DELAY_FIX = ("look at the host's load (CPU, interrupts, the probe agent's CPU in "
                  "`lens status` or the run's health table); a host that stays slow with nothing "
                  "running is worth a node audit")
SIDE_WORDS = {"send": "from", "receive": "to", "both": "from and to"}


def host_delay_note(f: dict) -> dict:
    """`probe.host_delay`: a delay finding on a whole host (rollup.is_host_side) restated as what
    it is: every path from (or to) all of the host's NICs was slow at once, which its own
    sending or receiving side explains (software timestamps on a busy host; an error of its
    clock estimate looks the same), so probes cannot blame its NICs or cables. A warning about
    the measurement, not a network fault."""
    ev = dict(f.get("evidence") or {})
    side = ev.get("side", "both")
    excess = ev.get("excess_delay_us_bad_median")
    host = f["element"]["id"]
    note = (f"every path {SIDE_WORDS.get(side, 'from and to')} all NICs of {host} was slow"
            + (f" by a median {excess:g} us" if excess is not None else "")
            + ": the host's own side (its CPU, kernel, probe agent or the estimate of its clock) "
              "explains that, so its NICs and cables are not blamed; their delay could not be "
              "measured there")
    out = {"element": {"type": "host", "id": host}, "category": "probe",
           "check": "probe.host_delay", "metric": "host_delay", "severity": "warning",
           "confidence": f.get("confidence", 0.0), "evidence": ev, "note": note,
           "fix": HOST_DELAY_FIX}
    if f.get("windows") is not None:
        out["windows"] = list(f["windows"])
    return out


def budget_finding(plan: dict) -> dict | None:
    """`probe.budget`: the rate asked for puts some host above its probe budget."""
    if not plan or not plan.get("over_budget"):
        return None
    return {
        "element": {"type": "run", "id": "probe-plan"},
        "category": "probe",
        "check": "probe.budget",
        "metric": "budget",
        "severity": "warning",
        "confidence": 1.0,
        "evidence": {k: plan.get(k) for k in ("rate_per_pair_pps", "budget_pps", "host_pps_max",
                                              "pairs", "design")},
        "note": (f"--rate {plan.get('rate_per_pair_pps'):g}/s per pair puts up to "
                 f"{plan.get('host_pps_max'):g} probes/s on a host, above its budget of "
                 f"{plan.get('budget_pps'):g}/s (mesh.probe_budget_pps): agents may overload and "
                 "their loss is then set aside"),
        "fix": "drop --rate to use the budget's rate, or raise mesh.probe_budget_pps",
    }
