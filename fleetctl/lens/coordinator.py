"""The lens coordinator: plan, trace, keep agents alive, close a window every `window_s`, turn
findings into events, write the outputs, save state.

    c = Coordinator(site, nodes, transport, LensOptions.from_site(site), outputs)
    c.run(stop_event)            # until stop_event is set (SIGTERM in `lens run`)

Plan: the audit's planner (mesh.plan) over the chosen nodes' NICs, at `rate` per pair or the
site's probe budget; flows traced once per plan (mesh.discovery). Windows are aligned to wall
time; window [a, b) is closed at b + lag (options.lag_s), when every record of it is in. State
(state.json: last closed window, event machine; baselines.json once a minute) is saved after each
window, after the window's event records were appended to the log: a coordinator killed at any
point resumes without analysing a window twice and without a second record of an event
(events.adopt).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np

from fleetctl.atomic import write_atomic
from fleetctl.errors import DataError
from fleetctl.lens.agents import AgentSupervisor
from fleetctl.lens.baseline import PathBaselines
from fleetctl.lens.clocktrack import MOVED_US, ClockTracker, stop_workers
from fleetctl.lens.debugrecords import DebugCollector
from fleetctl.lens.debugstore import DIRECTORY as DEBUG_DIRECTORY
from fleetctl.lens.debugstore import DebugStore
from fleetctl.lens.events import EventRules, EventTracker, iso
from fleetctl.lens.heaptrim import release_free_heap
from fleetctl.lens.ingest import Ingest, summary_rows_cap
from fleetctl.lens.jobs import JobMap, JobRefresh
from fleetctl.lens.options import LensOptions
from fleetctl.lens.state import STATE_VERSION, first_window_end, read_baselines, read_state, \
    resume
from fleetctl.lens.window import FLAP_BIN_S, WindowAnalyzer, held_counts
from fleetctl.mesh import agent as agent_module
from fleetctl.meshrun.setup import SetupOptions, payload, prepare

BASELINES_SAVE_S = 60.0
MAX_BEHIND_WINDOWS = 10  # further behind than this: skip ahead (counted) rather than pile up
STATUS_ELEMENTS = 200
# status.json after every window while writing it costs at most this share of a window (at 1,280
# hosts x 8 it cost 53 ms: every agent's and clock's entry), else every STATUS_EVERY_S
STATUS_COST_SHARE = 0.02
STATUS_EVERY_S = 2.0
# batches a second (agents / lens.health_window_s) above which one core falls behind: at 1,280
# agents x 4 a second (5,120) the pinned scale harness saw 57 of 157 windows close without their
# summaries, at 1 a second (1,280) 105 of 111 with them; 512 agents x 4 (2,048) kept up for an
# hour on this 2-core machine (docs/scale.md)
ADVISED_BATCHES_PER_S = 2100.0
# the C heap's free pages handed back this often (lens/heaptrim.py): ~10-30 ms each at 1,280 x 8
HEAP_TRIM_EVERY_S = 60.0


class LensPlan:
    """The probe engine's plan (meshrun.setup, as `audit --mesh`), with lens's streaming agents."""

    def __init__(self, cluster, nodes: list[str], transport, opts: LensOptions, log):
        setup = prepare(cluster, nodes, transport, SetupOptions(
            budget_pps=opts.budget_pps, coverage_k=opts.coverage_k, duration=opts.window_s, rate=opts.rate,
            sports=opts.sports, port=opts.port, sport_base=opts.sport_base,
            tracer=_agent_tracer(opts, log) if opts.agents == "registered" and opts.trace_via == "agents"
            else None), log)
        for w in setup.warnings:
            log(w)
        self.setup, self.topo, self.plan, self.disc = setup, setup.topo, setup.plan, setup.disc
        self.rate, self.hosts = setup.rate, setup.hosts
        self.flows, self.paths = setup.disc.flows, setup.disc.paths
        self.agent_cfg = setup.agent_config(
            duration=opts.agent_hours * 3600, linger=opts.echo_timeout_s, echo_timeout_s=opts.echo_timeout_s,
            health_window_s=opts.health_window_s, output="stream" if opts.records else "summary")
        self.agent_cfg.update(summary_window_s=opts.window_s,
                              summary_bins=max(1, min(100, round(opts.window_s / FLAP_BIN_S))),
                              debug_records=opts.debug_share)
        self.t0 = time.time()
        self.fingerprint = f"{len(self.paths)}:{len(self.flows)}:{len(self.plan.pairs)}"
        self._by_node: dict[str, tuple[list, list]] | None = None

    def config_for(self, node: str, start_at: float) -> dict:
        """One node's agent configuration: the plan's settings with only the pairs and loops it
        sends or answers (what mesh.agent reads of the whole), so what each agent is sent grows
        with its own NICs, not with the fleet."""
        if self._by_node is None:
            by_node: dict[str, tuple[list, list]] = {}
            host_of = {int(i): n for n, e in self.agent_cfg["nodes"].items() for i, *_ in e["nics"]}
            for p in self.agent_cfg["pairs"]:
                for nic in {p[1], p[2]}:
                    if nic in host_of:
                        by_node.setdefault(host_of[nic], ([], []))[0].append(p)
            for lp in self.agent_cfg["loops"]:
                if lp[1] in host_of:
                    by_node.setdefault(host_of[lp[1]], ([], []))[1].append(lp)
            self._by_node = by_node
        pairs, loops = self._by_node.get(node, ([], []))
        # flows of a restarted sender continue above every sequence number its peers saw
        seq_base = int(max(0.0, start_at - self.t0) * self.rate) + 16
        mine = self.agent_cfg["nodes"].get(node)
        return dict(self.agent_cfg, nodes={node: mine} if mine else {}, pairs=pairs, loops=loops,
                    start_at=start_at, seq_base=seq_base)

    def script(self, node: str, start_at: float) -> str:
        return payload(agent_module, self.config_for(node, start_at))

    def registered_config(self, node: str, start_at: float) -> dict:
        """What a registered agent is sent: its configuration without the probe key (both ends
        derive it from the site key, lens/register.py)."""
        cfg = self.config_for(node, start_at)
        cfg.pop("key", None)
        return cfg

    def summary(self) -> dict:
        return {"pairs": len(self.plan.pairs), "design": self.plan.design,
                "rate_per_pair": self.rate, "max_host_pps": round(self.plan.max_host_pps, 1),
                "flows": int(len(self.flows)), "paths": len(self.paths),
                "paths_traced": int(self.paths.traced.sum()), "hosts": self.hosts,
                "loops": int((self.flows["dst_nic"] < 0).sum())}


def _agent_tracer(opts: LensOptions, log):
    """Flows traced by the registered agents themselves while the plan is made (lens/tracer.py)."""
    from fleetctl.lens.listener import parse_listen
    from fleetctl.lens.register import read_key
    from fleetctl.lens.tracer import trace_through_agents

    address, key = parse_listen(opts.listen), read_key(opts.key_file)

    def tracer(cfg: dict, hosts: list[str], warnings: list[str]) -> dict[str, dict]:
        return trace_through_agents(address, key, cfg, hosts, opts.trace_timeout_s, log, warnings)
    return tracer


def batch_period_for(agents: int) -> float:
    """The shortest health window of 0.25 s times a power of two (it divides the 1 s window, or
    the window divides it) that keeps `agents` under ADVISED_BATCHES_PER_S batches a second."""
    period = 0.25
    while agents / period > ADVISED_BATCHES_PER_S and period < 8.0:
        period *= 2
    return period


class Coordinator:
    def __init__(self, cluster, nodes: list[str], transport, opts: LensOptions, outputs,
                 log=print, slurm=None):
        opts.validate()
        self.cluster, self.nodes, self.transport, self.opts = cluster, list(nodes), transport, opts
        self.outputs = outputs  # lens.outputs.Outputs
        self.log = log
        self.slurm = slurm  # a SlurmBackend, or None
        self.queue: queue.Queue = queue.Queue(maxsize=10_000)
        self.counters = {"windows": 0, "windows_skipped": 0, "events_written": 0,
                         "batches": 0, "queue_full": 0}
        self.started = time.time()
        self.last_status = 0.0
        self._status_cost = 0.0  # seconds the last status.json took
        self.job_refresh = JobRefresh(slurm, self.opts.jobs_refresh_s, self.log)
        self.last_replan_check = time.time()
        self._heap_trimmed = time.time()  # the last malloc_trim (HEAP_TRIM_EVERY_S)
        self._shed_logged = float("-inf")  # the last log line about probes shed (_note_ingest)
        self._ingest_seen: tuple = (None, 0, 0, 0)  # the ingest and its counts, last window
        self.last_window: dict = {}
        self.host_side: set[str] = set()  # hosts whose own side slowed their probes last window
        self.tracker: EventTracker | None = None
        self.supervisor: AgentSupervisor | None = None
        self.debug: DebugCollector | None = None  # sampled debug records (lens.debug_records)
        self.debug_store: DebugStore | None = None

    # ------------------------------------------------------------------ setup
    def _build(self, nodes: list[str]) -> None:
        o = self.opts
        self.plan = LensPlan(self.cluster, nodes, self.transport, o, self.log)
        self.log(f"plan: {json.dumps(self.plan.summary())}")
        self.outputs.set_plan(self.plan)
        self.analyzer = WindowAnalyzer(self.plan.topo, self.plan.paths, self.plan.flows, o.solver,
                                       echo_timeout_s=o.echo_timeout_s)
        self.baselines = PathBaselines(len(self.plan.paths))
        self._baselines_at: float | None = None  # when _save last wrote baselines.json
        self._clock_seq = 0  # the clock fit whose moved hosts were re-based
        self.clock = ClockTracker(self.analyzer.hosts, self.analyzer.nic_host,
                                  jump_us=o.clock_jump_us, max_drift_ppm=o.clock_max_drift_ppm,
                                  worker_process=True)
        self.shard = None  # this coordinator as one shard of the site (lens.shard_max_hosts)
        if int(o.shard_max_hosts):
            from fleetctl.lens.shard import ShardPublisher, layout_for

            layout = layout_for(self.plan.topo, o.shard_max_hosts)
            self.shard = ShardPublisher(layout, self.plan.topo, self.plan.hosts, o.path(""))
            self.log(f"shard {self.shard.name}: {len(self.plan.hosts)} hosts, "
                     f"{len(self.shard.shared)} shared switches above them"
                     + (f"; {len(self.shard.foreign)} hosts of other shards too"
                        if self.shard.foreign else ""))
        self.ingest = Ingest(self.plan.flows, max_summary_rows=summary_rows_cap(
            len(self.plan.flows), o.lag_s, o.window_s))
        self.ingest.set_fields(list(agent_module.HEALTH_FIELDS))
        self._build_debug()
        self.jobs = JobMap(self.plan.topo, self.plan.paths, self.analyzer.inc_orig)
        rules = EventRules(k_open=o.k_open, k_open_down=o.k_open_down, k_open_gray=o.k_open_gray,
                           m_close=o.m_close, flap_count=o.flap_count,
                           flap_window_s=o.flap_window_s)
        if self.tracker is None:
            self.tracker = EventTracker(rules, self.plan.topo.location, self.jobs.affected)
        else:  # a re-plan keeps the events
            self.tracker.locate = self.plan.topo.location
            self.tracker.jobs_for = self.jobs.affected

    def _build_debug(self) -> None:
        """This plan's sampled debug records (lens.debug_records): collected beside the
        summaries and written under <state_dir>/debug-records for `lens records`; never
        analysed. What the store buffered for the old plan is written first."""
        share = self.opts.debug_share
        if share <= 0:
            return
        if self.debug is not None:  # a re-plan: records of the old flows still waiting go
            self.counters["debug_records_shed"] += self.debug.pending
        if self.debug_store is None:
            self.debug_store = DebugStore(self.opts.path(DEBUG_DIRECTORY), counters=self.counters)
        topo = self.plan.topo
        self._debug_guard(lambda: self.debug_store.set_layout(self.plan.flows, topo.nics,
                                                              topo.nic_host))
        self.debug = DebugCollector(self.plan.flows, share, counters=self.counters)

    def _close_debug(self, a: float, b: float) -> None:
        if self.debug is None:
            return
        probes = self.debug.close(int(a * 1e9), int(b * 1e9))
        self._debug_guard(lambda: self.debug_store.append(probes, a, b))

    def _debug_guard(self, fn) -> None:
        """A debug store that cannot write (a full disk) costs its records (counted), logged
        once; never the detection."""
        try:
            fn()
        except (DataError, OSError, ValueError) as exc:
            self.counters["debug_write_errors"] = self.counters.get("debug_write_errors", 0) + 1
            if self.counters["debug_write_errors"] == 1:
                self.log(f"cannot write the debug records (reported once): {exc}")

    def _on_batch(self, node: str, batch: dict) -> None:
        try:
            self.queue.put_nowait((node, batch, time.time()))
        except queue.Full:
            self.counters["queue_full"] += 1

    def _start_agents(self) -> None:
        silent_s = max(5.0, 4 * self.opts.health_window_s)
        rate = len(self.plan.hosts) / self.opts.health_window_s
        if rate > ADVISED_BATCHES_PER_S:
            self.log(f"{len(self.plan.hosts)} agents sending a batch every "
                     f"{self.opts.health_window_s:g} s: {rate:.0f} batches a second, above the "
                     f"{ADVISED_BATCHES_PER_S:.0f} one core keeps up with; set "
                     f"lens.health_window_s = {batch_period_for(len(self.plan.hosts)):g} "
                     "(docs/scale.md, \"Sizing a coordinator\")")
        if self.opts.agents == "registered":
            from fleetctl.lens.listener import AgentListener, parse_listen
            from fleetctl.lens.register import read_key

            key = read_key(self.opts.key_file)
            # a connection silent this long is closed (the agent registers again); coverage
            # ends at an agent's last batch either way. Longer than for started agents: a
            # coordinator starved of CPU reads late, and 1,280 agents registering again at
            # once is churn (the scale harness saw 900 such closes in a minute)
            self.supervisor = AgentListener(parse_listen(self.opts.listen), key, self.plan.hosts,
                                            self.plan.registered_config, self._on_batch, self.log,
                                            silent_s=max(30.0, silent_s))
        else:
            self.supervisor = AgentSupervisor(self.transport, self.plan.hosts, self.plan.script,
                                              self._on_batch, self.log, silent_s=silent_s)
        self.supervisor.start()

    # ------------------------------------------------------------------ state
    def _resume(self) -> float | None:
        """Load state.json (validated: what is invalid is logged and dropped) and the event log's
        open events; the end of the last closed window, or None on a first start."""
        path = self.opts.path("state.json")
        state = read_state(path, now=time.time(), log=self.log)
        saved = read_baselines(self.opts.path("baselines.json"), log=self.log)
        resumed = resume(path, state, self.tracker, self.baselines, self.plan.fingerprint,
                         log=self.log, saved_baselines=saved)
        self.counters["windows"] = resumed.windows
        self.tracker.adopt(self.outputs.open_events())
        last = resumed.last_window_end
        if last:
            self.log(f"resumed: last closed window ended {iso(last)}, "
                     f"{len(self.tracker.open_events())} open events")
        return last

    def _save(self, t_end: float) -> None:
        # the baselines (a number per path: 495,586 at 1,280 hosts x 8, ~4.6 MB of JSON) learn
        # slowly (2 % a window): they go to their own file once a BASELINES_SAVE_S, not with
        # every window's state (which rewrote and fsynced them every second, ~400 GB a day at
        # 1,280 hosts); a restart loses at most that much learning
        now = time.monotonic()
        if self._baselines_at is None or now - self._baselines_at >= BASELINES_SAVE_S:
            self._baselines_at = now
            text = json.dumps({"version": STATE_VERSION, "fingerprint": self.plan.fingerprint,
                               "baselines": self.baselines.to_state()}, separators=(",", ":"))
            write_atomic(self.opts.path("baselines.json"), text)
        state = {"version": STATE_VERSION, "last_window_end": t_end,
                 "windows": self.counters["windows"], "fingerprint": self.plan.fingerprint,
                 "tracker": self.tracker.to_state(), "saved": time.time()}
        write_atomic(self.opts.path("state.json"), json.dumps(state, separators=(",", ":")))

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event) -> None:
        Path(self.opts.state_dir).expanduser().mkdir(parents=True, exist_ok=True)
        self._build(self.nodes)
        last = self._resume()
        self._refresh_jobs(force=True)
        self._start_agents()
        w = self.opts.window_s
        next_end = first_window_end(time.time(), w, last)  # agents start 0.5 s from now
        try:
            while not stop.is_set():
                self._drain(0.05)
                now = time.time()
                if now >= next_end + self.opts.lag_s:
                    behind = int((now - self.opts.lag_s - next_end) // w)
                    if behind > MAX_BEHIND_WINDOWS:
                        self.counters["windows_skipped"] += behind
                        self.log(f"analysis {behind} windows behind: skipping ahead")
                        next_end += behind * w
                        self.ingest.closed_until_ns = int((next_end - w) * 1e9)
                    self._close(next_end - w, next_end)
                    next_end += w
                self._periodic(now)
        finally:
            if self.supervisor:
                self.supervisor.stop()
            if self.debug_store is not None:
                self._debug_guard(self.debug_store.flush)
            self._write_status(time.time(), stopping=True)
            stop_workers()

    def _drain(self, wait: float) -> None:
        try:
            item = self.queue.get(timeout=wait)
        except queue.Empty:
            return
        while True:
            node, batch, t = item
            self.ingest.add(node, batch, t)
            if self.debug is not None and "debug" in batch:
                self.debug.add(node, batch["debug"], t)
            self.counters["batches"] += 1
            self._note_health(node, batch)
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return

    def _note_health(self, node: str, batch: dict) -> None:
        st = self.supervisor.state.get(node) if self.supervisor else None
        rows = batch.get("health") or []
        if st is None or not rows or not isinstance(rows, list):
            return
        f = list(agent_module.HEALTH_FIELDS)
        row = rows[-1]
        if not isinstance(row, list) or len(row) != len(f):
            return
        d = dict(zip(f, row))
        dur = max(1e-3, float(d.get("duration_s") or 0))
        st.pps = (max(0, d.get("sent", 0)) + max(0, d.get("answered", 0))) / dur
        st.cpu_pct = 100 * max(0.0, float(d.get("cpu_s", 0))) / dur

    def _close(self, a: float, b: float) -> None:
        o = self.opts
        probes, health = self.ingest.close(int(a * 1e9), int(b * 1e9))
        summary = self.ingest.close_summary(int(a * 1e9), int(b * 1e9))
        blind = {h for h in self.plan.hosts
                 if not self.supervisor.covered(h, a - 0.3, b + o.echo_timeout_s)}
        began = time.monotonic()
        data = summary if summary is not None and not probes.size else probes
        model, epoch = self.clock.window_fit  # hosts whose clock a second fit has confirmed
        res = self.analyzer.analyze(data, a, b, health, blind, (model, epoch),
                                    self.baselines.current(),
                                    [ev["element"] for ev in self.tracker.open_events()])
        # the clock learns from this window after it (the model above is the last fit's), and
        # not from hosts whose agents' timestamps the window could not trust
        quiet = set(res.overloaded) | set(res.blind)
        if data is probes:
            self.clock.add(probes, quiet=quiet)
        else:
            self.clock.add_summary(summary, self.plan.flows, quiet=quiet)
        self.clock.maybe_refit(b, background=True)
        self._rebase_moved_clocks(b)
        if res.path_delay is not None and res.path_healthy is not None:
            self.baselines.update(res.path_delay, res.path_healthy)
        for st in self.supervisor.state.values():
            st.overloaded = st.node in res.overloaded
        findings = res.findings + self.clock.findings(b, set(res.overloaded) | set(res.blind))
        notes = self._note_host_side(res, b)
        # hosts blind or overloaded: the window says nothing about what only their probes
        # cross, so it closes nothing there (a fault outlives an agent restart); nor where a
        # responder's answer log was late (its loss left out): window.unjudged
        silent = self.analyzer.unjudged(res, self.tracker.loc)
        if silent:
            self.counters["places_unjudged"] = \
                self.counters.get("places_unjudged", 0) + len(silent)
        if res.loss_unknown:
            self.counters["probes_loss_unknown"] = \
                self.counters.get("probes_loss_unknown", 0) + res.loss_unknown
        self._note_ingest(b)
        held = held_counts(res.findings)
        for by, n in held.items():
            if n:
                name = f"findings_held_{by}"
                self.counters[name] = self.counters.get(name, 0) + n
        records = self.tracker.window(a, b, findings, silent)
        for rec in records:
            self.outputs.event(rec)
            self.counters["events_written"] += 1
            self._log_event(rec, b)
        self.counters["windows"] += 1
        if res.findings:
            self.counters["windows_with_findings"] = \
                self.counters.get("windows_with_findings", 0) + 1
        self.last_window = {"t_start": a, "t_end": b, "probes": res.probes,
                            "set_aside": res.set_aside, "overloaded": res.overloaded,
                            "blind": res.blind, "answer_log_pending": res.log_pending,
                            "findings": len(res.findings),
                            "host_side_delay": sorted(notes),
                            "late_records": self.ingest.late}
        self.outputs.window({**self._window_doc(res), "held": held}, probes, health,
                            self.last_window, self.tracker.open_events())
        self._close_debug(a, b)
        self._save(b)
        if self.shard is not None:
            self._publish_shard(res, a, b)
        self._elements = res.elements
        spent = time.monotonic() - began
        self.counters["analysis_s_max"] = round(max(self.counters.get("analysis_s_max", 0),
                                                    spent), 3)
        if spent > 0.5 * o.window_s:
            self.log(f"window {iso(b)}: analysis took {spent:.2f} s ({res.probes} probes)")
        if self._status_cost <= STATUS_COST_SHARE * o.window_s:
            self._write_status(time.time())  # else every STATUS_EVERY_S (_periodic)

    def _note_ingest(self, b: float) -> None:
        """What the ingest set aside, in the counters (status.json): probes shed because
        the analysis fell behind, summarized for windows far ahead of the clock, batches that
        could not be read. Shedding is logged at most once a minute: a window it emptied says
        nothing about the network, and the operator should know why."""
        ing = self.ingest  # a new plan's ingest counts from 0 again
        seen = self._ingest_seen if self._ingest_seen[0] is ing else (ing, 0, 0, 0)
        now = (ing, ing.dropped, ing.ahead, ing.bad_batches)
        self._ingest_seen = now
        shed = now[1] - seen[1]
        for i, name in enumerate(("probes_shed", "probes_ahead", "batches_unreadable"), 1):
            if now[i] > seen[i]:
                self.counters[name] = self.counters.get(name, 0) + now[i] - seen[i]
        if shed > 0 and b - self._shed_logged >= 60.0:
            self._shed_logged = b
            self.log(f"window {iso(b)}: the analysis is behind; {shed} probes of the oldest "
                     f"pending windows shed (nothing is judged from them)")

    def _publish_shard(self, res, a: float, b: float) -> None:
        """The window's shard document for `lens merge` (lens/shard.py). A window with hosts
        blind or overloaded still publishes: their paths are already set aside. A window that
        measured nothing at all (no probe data kept) does not replace the last document: it would
        tell the merge "no loss anywhere, no counts" (a loaded CI lab: the merge saw no shared
        switch for seconds, and missed a lossy spine). The last one ages out by `lens merge
        --stale`, and the merge then names the shard as missing."""
        if res.signals is None:
            self.counters["shard_windows_unmeasured"] = self.counters.get("shard_windows_unmeasured", 0) + 1
            return
        # what a shared switch's fault would explain: held by the merge when it names it
        self.analyzer.mark_explained_if_named(res.findings, res.signals, self.shard.shared)
        counts = self.shard.counts(self.analyzer.step, res.signals, res.findings)
        doc = self.shard.document(b, b - a, counts, res.findings)
        try:
            self.shard.publish(doc)
        except OSError as exc:  # the merge then sees this shard stale, and says so
            self.counters["shard_publish_failed"] = self.counters.get("shard_publish_failed", 0) + 1
            if self.counters["shard_publish_failed"] == 1:
                self.log(f"cannot write the shard document: {exc}")

    def _rebase_moved_clocks(self, b: float) -> None:
        """After a clock fit that moved some hosts' estimates: their paths' delay baselines
        hold the old estimate's error, and a baseline learns only from healthy windows, so one
        learnt 30 us off stayed off (a clean 512-host harness run: a host's every path +30 us,
        then a `flapping` delay event on one of its cables). They are learnt again."""
        seq = self.clock.fit_seq
        if seq == self._clock_seq:
            return
        self._clock_seq = seq
        moved = self.clock.moved
        if not moved:
            return
        idx = [i for i, h in enumerate(self.analyzer.hosts) if h in moved]
        nic_host = self.analyzer.nic_host
        paths = self.plan.paths
        mask = np.isin(nic_host[paths.src_nic], idx) | np.isin(nic_host[paths.dst_nic], idx)
        had = self.baselines.forget(mask)
        self.counters["baselines_relearnt"] = self.counters.get("baselines_relearnt", 0) + had
        worst = max(moved.items(), key=lambda kv: abs(kv[1]))
        self.log(f"window {iso(b)}: the clock fit moved {len(moved)} hosts' estimates by more "
                 f"than {MOVED_US:g} us (most: {worst[0]}, {worst[1]:+g} us); the delay baselines of their "
                 f"{had} learnt paths are learnt again")

    def _note_host_side(self, res, b: float) -> dict:
        """The window's host-side delay notes by host, logged once per episode, not per window."""
        notes = {n["element"]["id"]: n for n in res.host_side}
        for host in sorted(set(notes) - self.host_side):
            self.log(f"window {iso(b)}: {notes[host]['note']} (not an event)")
        self.host_side = set(notes)
        if notes:
            self.counters["windows_with_host_side_delay"] = \
                self.counters.get("windows_with_host_side_delay", 0) + 1
        return notes

    def _log_event(self, rec: dict, b: float) -> None:
        jobs = [j["job_id"] for j in rec.get("jobs", [])]
        self.log(f"event {rec['kind']}: {rec['id']} {rec['element']['type']} "
                 f"{rec['element'].get('direction') or rec['element']['id']} {rec['metric']} "
                 f"({rec['severity']}, jobs {jobs}, window end {iso(b)}, closed "
                 f"{time.time() - b:.2f} s after it)"
                 + (f", refined from {rec['refined_from']['type']} {rec['refined_from']['id']}"
                    if rec["kind"] == "update" and rec.get("refined_from") else ""))

    def _window_doc(self, res) -> dict:
        return {"t_end": res.t_end, "elements": res.elements,
                "agents": [{"host": s.node, "alive": s.alive, "overloaded": s.overloaded,
                            "pps": s.pps, "cpu_pct": s.cpu_pct}
                           for s in self.supervisor.state.values()],
                "clock": [{"host": c["host"], "offset_us": c["offset_us"],
                           "drift_ppm": c["drift_ppm"]} for c in self.clock.status()]}

    def _periodic(self, now: float) -> None:
        self._refresh_jobs()  # every lens.jobs_refresh_s
        if now - self._heap_trimmed >= HEAP_TRIM_EVERY_S:
            self._heap_trimmed = now
            took = release_free_heap()
            if took is not None:
                self.counters["heap_trims"] = self.counters.get("heap_trims", 0) + 1
                self.counters["heap_trim_s_max"] = round(
                    max(self.counters.get("heap_trim_s_max", 0), took), 3)
        if now - self.last_status >= STATUS_EVERY_S:
            self._write_status(now)
        if now - self.last_replan_check >= self.opts.replan_s:
            self.last_replan_check = now
            self._maybe_replan()

    def _refresh_jobs(self, force: bool = False) -> None:
        self.job_refresh(self.jobs, force)  # self.jobs is rebuilt with each plan

    def usable_nodes(self) -> list[str]:
        """The chosen nodes minus those Slurm has drained or down (probing them would blame the
        fabric for a node being serviced)."""
        if self.slurm is None:
            return self.nodes
        try:
            nodes = self.slurm.nodes(self.nodes)
        except Exception:  # noqa: BLE001 - keep the current plan when Slurm cannot answer
            return self.plan.hosts
        out = {n.name for n in nodes if not n.drained and "DOWN" not in n.state_text.upper()}
        known = {n.name for n in nodes}
        return [n for n in self.nodes if n in out or n not in known]

    def _maybe_replan(self) -> None:
        want = sorted(set(self.usable_nodes()))
        have = sorted(set(self.plan.hosts))
        if want == have or len(want) < 2:
            return
        self.log(f"nodes changed ({len(have)} -> {len(want)}): re-planning")
        self.supervisor.stop()
        self._build(want)
        self._start_agents()

    # ------------------------------------------------------------------ status
    def _baseline_coverage(self) -> dict | None:
        """Paths whose delay baseline is learnt (delay is judged against it)."""
        b = getattr(self, "baselines", None)
        if b is None:
            return None
        learnt = int((b.count >= b.warmup).sum())
        return {"paths": int(b.count.size), "learnt": learnt,
                "share": round(learnt / max(1, b.count.size), 3)}

    def _write_status(self, now: float, stopping: bool = False) -> None:
        self.last_status = now
        if self.tracker is None:
            return
        began = time.perf_counter()
        rows = getattr(self, "_elements", [])  # ElementRows; [] before a window with data
        elements = rows.worst(STATUS_ELEMENTS) if len(rows) else []
        doc = {"schema": "fleetctl.lens.status/1", "pid": os.getpid(),
               "running": not stopping, "started": iso(self.started), "updated": iso(now),
               "cluster": self.cluster.name, "window_s": self.opts.window_s,
               "plan": self.plan.summary() if hasattr(self, "plan") else None,
               "last_window": {**self.last_window,
                               **({"t_start": iso(self.last_window["t_start"]),
                                   "t_end": iso(self.last_window["t_end"])}
                                  if self.last_window else {})},
               "elements": elements,
               "agents": [s.to_dict() for s in self.supervisor.state.values()]
               if self.supervisor else [],
               "clock": self.clock.status() if hasattr(self, "clock") else [],
               # delay is judged against a path's learnt baseline: until most paths have one,
               # a slow switch can read as many slow NICs (docs/scale.md, "accuracy")
               "delay_baselines": self._baseline_coverage(),
               "open_events": self.tracker.open_events(), "counters": dict(self.counters)}
        try:
            write_atomic(self.opts.path("status.json"), json.dumps(doc, default=_default))
        except DataError as exc:
            self.log(str(exc))
        self._status_cost = time.perf_counter() - began


def _default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return str(v)
