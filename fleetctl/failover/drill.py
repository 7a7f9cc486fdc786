"""`fleetctl failover drill`: a checked transfer between two nodes over all their NICs through the
fleet plugin, with links taken down (or flapping) mid-transfer, measured.

The transfer is the plugin's C harness (fleetctl.failover.harness): node B receives, node A sends
random-sized messages with 8 in flight, every byte checked by B. Each trial takes one of A's NICs
(in turn) down for `hold_s` (fault `down`), or makes it flap (down/up every half period, fault
`flap`), brings it back and waits for the fail-back. Measured per trial, from the sender's trace and
the plugin's event logs:

- detection: fault -> the first `path_down` of that path (either end);
- resume: the longest stall of completed sends between the fault and the link's return;
- fail-back: link back -> the sender's `failback` of that path;
- throughput before (the `phase_s` before the fault), during (fault held) and after (the `phase_s`
  after the fail-back);
and once: integrity (bytes checked, corrupt, duplicated, lost) from the receiver's check.

Where the processes run and how a NIC is taken down are the caller's: a `Runner` and a `Faults`
(the CLI gives the lab's namespaces and fault injection on a lab site, or srun and `ip link` inside
a maintenance reservation on a real cluster, failover.realcluster). The harness and the plugin it
drives are given too (`harness.locate()`). Times are on one clock when `runner.shared_clock` (the
lab: one machine); otherwise the sender's own `link_down`/`link_up` events anchor them.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from fleetctl.failover import FailoverError, harness

FAULTS = ("down", "flap", "both")
MAX_TRIALS = 100
MAX_SIZE = 64 << 20


class Runner(Protocol):
    shared_clock: bool
    workdir: Path  # seen by this process and both nodes: handle, trace, progress, event logs

    def popen(self, node: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen: ...


class Faults(Protocol):
    def down(self, node: str, nic: str) -> None: ...

    def up(self, node: str, nic: str) -> None: ...

    def flap(self, node: str, nic: str, period_s: float) -> None: ...


@dataclass
class Trial:
    index: int
    fault: str
    nic: str
    path: int
    detection_ms: float | None = None
    resume_ms: float | None = None
    failback_ms: float | None = None
    gbps_before: float | None = None
    gbps_during: float | None = None
    gbps_after: float | None = None
    t_fault_ns: int = 0  # this process's monotonic clock
    t_restore_ns: int = 0
    t_failback_ns: int = 0
    t_wall_offset_ns: int = 0  # time.time_ns() - time.monotonic_ns() at the fault

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not k.startswith("t_")}


@dataclass
class DrillReport:
    node_a: str
    node_b: str
    nics: list[str]
    size: int
    trials: list[Trial] = field(default_factory=list)
    integrity: dict = field(default_factory=dict)
    sender: dict = field(default_factory=dict)
    receiver: dict = field(default_factory=dict)
    events: dict = field(default_factory=dict)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        def stat(name):
            values = [getattr(t, name) for t in self.trials if getattr(t, name) is not None]
            return {"p50": harness.pct(values, 50), "max": max(values) if values else None, "n": len(values)}

        return {"detection_ms": stat("detection_ms"), "resume_ms": stat("resume_ms"),
                "failback_ms": stat("failback_ms"), "gbps_before": stat("gbps_before"),
                "gbps_during": stat("gbps_during"), "gbps_after": stat("gbps_after")}

    def to_dict(self) -> dict:
        return {"node_a": self.node_a, "node_b": self.node_b, "nics": self.nics, "size": self.size,
                "ok": not self.problems, "problems": self.problems, "summary": self.summary(),
                "trials": [t.to_dict() for t in self.trials], "integrity": self.integrity,
                "sender": self.sender, "receiver": self.receiver, "events": self.events,
                "seconds": round(self.seconds, 1)}


def _first(events: list[dict], name: str, path: int, after_ns: int) -> int | None:
    times = [e["mono_ns"] for e in events if e.get("event") == name and e.get("path") == path
             and isinstance(e.get("mono_ns"), int) and e["mono_ns"] >= after_ns]
    return min(times) if times else None


def _wait(cond, timeout: float, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


@dataclass(frozen=True)
class DrillOptions:
    size: int = 1 << 20  # largest message; sizes are random from a quarter of it
    trials: int = 1  # faults per kind
    fault: str = "down"  # down | flap | both
    hold_s: float = 2.0  # how long a link stays down
    phase_s: float = 1.0  # steady transfer before and after each fault
    flap_period_s: float = 2.0
    flap_s: float = 3.0  # how long a link flaps
    holddown_ms: int = 500  # the plugin's fail-back hold-down
    failback_timeout_s: float = 15.0


def check(node_a: str, node_b: str, nics: list[str], options: DrillOptions) -> None:
    """FailoverError for a drill that cannot run as asked, before anything starts."""
    if options.fault not in FAULTS:
        raise FailoverError(f"--fault {options.fault!r}: expected one of {', '.join(FAULTS)}")
    if not 1 <= options.trials <= MAX_TRIALS:
        raise FailoverError(f"--trials {options.trials}: between 1 and {MAX_TRIALS}")
    if not 16 <= options.size <= MAX_SIZE:
        raise FailoverError(f"--size {options.size}: between 16 bytes and {MAX_SIZE >> 20} MiB")
    if len(nics) < 2:
        raise FailoverError(f"{node_a}/{node_b}: {len(nics)} NIC(s): a drill needs two to fail over between")
    if node_a == node_b:
        raise FailoverError("NODE_A and NODE_B are the same node")


class Drill:
    def __init__(self, runner: Runner, faults: Faults, node_a: str, node_b: str, nics: list[str],
                 files: harness.HarnessFiles, options: DrillOptions = DrillOptions()):
        check(node_a, node_b, nics, options)
        self.runner, self.faults, self.files = runner, faults, files
        self.a, self.b, self.nics = node_a, node_b, nics
        self.opt = options

    # ---- files
    def _file(self, name: str) -> Path:
        return self.runner.workdir / name

    def _env(self, node: str) -> dict[str, str]:
        return {"FLEET_NET_IFACES": ",".join(self.nics), "FLEET_NET_HOLDDOWN_MS": str(self.opt.holddown_ms),
                "FLEET_NET_COUNTERS_DIR": str(self._file(f"counters-{node}")),
                "FLEET_NET_LOG": str(self._file(f"events-{node}.jsonl"))}

    def _events(self, node: str) -> list[dict]:
        return harness.read_events(self._file(f"events-{node}.jsonl"))

    # ---- the run
    def run(self) -> DrillReport:
        started = time.monotonic()
        report = DrillReport(self.a, self.b, list(self.nics), self.opt.size)
        stop = self._file("stop")
        base = [str(self.files.harness), "--lib", str(self.files.lib), "--version", "12",
                "--max-size", str(self.opt.size), "--min-size", str(max(16, self.opt.size // 4)),
                "--handle-file", str(self._file("handle")), "--stop-file", str(stop)]
        recv = self.runner.popen(self.b, [*base, "--role", "recv"], self._env(self.b))
        send = self.runner.popen(self.a, [*base, "--role", "send", "--progress", str(self._file("progress")),
                                          "--trace", str(self._file("trace"))], self._env(self.a))
        try:
            if not _wait(lambda: harness.progress_bytes(self._file("progress")) > 0 or send.poll() is not None, 30):
                report.problems.append("the transfer did not start within 30 s")
            elif send.poll() is not None:
                report.problems.append(f"the sender exited at start ({send.returncode})")
            else:
                self._trials(report)
        finally:
            stop.touch()
            (rc_r, res_r, err_r), (rc_s, res_s, err_s) = harness.finish([recv, send], timeout=60)
        report.seconds = time.monotonic() - started
        self._measure(report, rc_r, res_r, err_r, rc_s, res_s, err_s)
        return report

    def _kinds(self) -> list[str]:
        return ["down", "flap"] if self.opt.fault == "both" else [self.opt.fault]

    def _trials(self, report: DrillReport) -> None:
        index = 0
        time.sleep(self.opt.phase_s)
        for _ in range(self.opt.trials):
            for kind in self._kinds():
                path = index % len(self.nics)
                nic = self.nics[path]
                trial = Trial(index, kind, nic, path)
                before = self._count(self.a, "failback", path)
                trial.t_fault_ns = time.monotonic_ns()
                trial.t_wall_offset_ns = time.time_ns() - trial.t_fault_ns
                try:
                    if kind == "down":
                        self.faults.down(self.a, nic)
                        time.sleep(self.opt.hold_s)
                    else:
                        self.faults.flap(self.a, nic, self.opt.flap_period_s)
                        time.sleep(self.opt.flap_s)
                except BaseException:  # a failed fault or Ctrl-C: never leave the NIC down
                    with contextlib.suppress(Exception):
                        self.faults.up(self.a, nic)
                    raise
                trial.t_restore_ns = time.monotonic_ns()
                self.faults.up(self.a, nic)
                if not _wait(lambda: self._count(self.a, "failback", path) > before,
                             self.opt.failback_timeout_s, 0.05):
                    report.problems.append(f"trial {index}: {nic} did not fail back within "
                                           f"{self.opt.failback_timeout_s:g} s")
                trial.t_failback_ns = time.monotonic_ns()
                report.trials.append(trial)
                time.sleep(self.opt.phase_s)
                index += 1

    def _count(self, node: str, event: str, path: int) -> int:
        return sum(1 for e in self._events(node) if e.get("event") == event and e.get("path") == path)

    # ---- figures
    def _measure(self, report, rc_r, res_r, err_r, rc_s, res_s, err_s) -> None:
        recv = res_r[0] if res_r else {}
        send = res_s[0] if res_s else {}
        report.receiver, report.sender = {"exit": rc_r, **recv}, {"exit": rc_s, **send}
        if rc_s != 0 or rc_r != 0 or not recv or not send:
            tail = (err_s[-300:] + " | " + err_r[-300:]).strip(" |")
            report.problems.append(f"harness exit codes sender {rc_s}, receiver {rc_r}: {tail}")
        lost = (send.get("messages", 0) - recv.get("messages", 0)) + recv.get("lost", 0) if send and recv else None
        report.integrity = {"bytes_checked": recv.get("bytes"), "messages": recv.get("messages"),
                            "corrupt": recv.get("corrupt"), "duplicated": recv.get("duplicated"), "lost": lost}
        for name in ("corrupt", "duplicated", "lost"):
            if report.integrity[name]:
                report.problems.append(f"{report.integrity[name]} {name} message(s)")
        trace = harness.read_trace(self._file("trace"))
        ev_a, ev_b = self._events(self.a), self._events(self.b)
        report.events = {node: {k: sum(1 for e in ev if e.get("event") == k)
                                for k in ("link_down", "link_up", "path_down", "replay", "failback", "conn_failed")}
                         for node, ev in ((self.a, ev_a), (self.b, ev_b))}
        for trial in report.trials:
            self._trial_figures(trial, trace, ev_a, ev_b)
            if trial.gbps_during is not None and trial.gbps_during <= 0:
                report.problems.append(f"trial {trial.index}: no data moved while {trial.nic} was out")

    def _trial_figures(self, t: Trial, trace, ev_a, ev_b) -> None:
        """Figures of one trial in the sender's monotonic clock (the trace's and the event logs'
        `mono_ns`). Without a shared clock the fault times go through wall time, using the offset
        between `ts` and `mono_ns` in each log: as exact as the nodes' clock synchronization."""
        def offset(events):  # wall_ns - mono_ns of the process that wrote the log
            values = sorted(int(e["ts"] * 1e9) - e["mono_ns"] for e in events
                            if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("mono_ns"), int))
            return values[len(values) // 2] if values else None

        shift_a = shift_b = 0  # add to this process's monotonic time to get each log's clock
        if not self.runner.shared_clock:
            off_a, off_b = offset(ev_a), offset(ev_b)
            shift_a = t.t_wall_offset_ns - off_a if off_a is not None else 0
            shift_b = t.t_wall_offset_ns - off_b if off_b is not None else None
        fault, restore = t.t_fault_ns + shift_a, t.t_restore_ns + shift_a
        downs = [_first(ev_a, "path_down", t.path, fault)]
        if shift_b is not None:
            far = _first(ev_b, "path_down", t.path, t.t_fault_ns + shift_b)
            downs.append(far - shift_b + shift_a if far else None)
        downs = [x for x in downs if x]
        if downs:
            t.detection_ms = round((min(downs) - fault) / 1e6, 1)
        t.resume_ms = round(harness.resume_ms(trace, fault, restore), 1)
        back = _first(ev_a, "failback", t.path, restore)
        if back:
            t.failback_ms = round((back - restore) / 1e6, 1)
        phase = int(self.opt.phase_s * 1e9)
        t.gbps_before = harness.gbps(trace, fault - phase, fault)
        t.gbps_during = harness.gbps(trace, fault, restore)
        after_start = back or (t.t_failback_ns + shift_a)
        t.gbps_after = harness.gbps(trace, after_start, after_start + phase)


def new_workdir(parent: str | None = None) -> Path:
    return Path(tempfile.mkdtemp(prefix="fleetctl-drill-", dir=parent))
