"""`fleetctl act run`: one pass, or a loop, over act's inputs.

Inputs: audit reports (files in `fleetctl.audit/1` JSON), lens's event log (followed from the offset
saved in `<act.state_dir>/cursor.json`; only `open` records act), nodes drained by fleetctl's Slurm
hooks, and optionally act's own quick audits of a node set every N seconds (`audit` callable given
by the caller). Each input's detections go through the engine; the pass returns every decision.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.act import detections, eventlog
from fleetctl.act.engine import Engine
from fleetctl.atomic import write_atomic
from fleetctl.errors import DataError, SlurmError
from fleetctl.filekit import read_json

MAX_REPORT_BYTES = 64 << 20


@dataclass
class Sources:
    reports: list[str] = field(default_factory=list)
    events: str = ""
    hooks: bool = False
    audit: object = None  # callable() -> audit report dict, or None


def read_report(path: str) -> dict:
    """An audit report file, bounded (size, nesting: filekit) and checked field by field."""
    doc = read_json(path, "audit report", max_bytes=MAX_REPORT_BYTES)
    if not isinstance(doc, dict) or doc.get("schema") != "fleetctl.audit/1":
        raise DataError(f"audit report {path}: not a fleetctl.audit/1 report")
    try:
        detections.check_report(doc)
    except DataError as exc:
        raise DataError(f"{path}: {exc.message}") from None
    return doc


class Runner:
    def __init__(self, engine: Engine, sources: Sources, state_dir: str):
        self.engine = engine
        self.sources = sources
        self.cursor_path = Path(state_dir) / "cursor.json"
        self.skipped_lines = 0

    def _cursor(self) -> dict:
        try:
            doc = json.loads(self.cursor_path.read_bytes()[:65536])
            return doc if isinstance(doc, dict) else {}
        except (OSError, ValueError):
            return {}

    def once(self) -> list[dict]:
        """One pass over every source; Slurm's node states are read once for the pass (and again
        after each action of act's that changes them), however many detections it brings."""
        with self.engine.one_pass():
            return self._once()

    def _once(self) -> list[dict]:
        decisions: list[dict] = []
        for path in self.sources.reports:
            decisions += self._report(read_report(path), path)
        if self.sources.audit is not None:
            decisions += self._report(self.sources.audit(), "act's own audit")
        if self.sources.events:
            cursor = self._cursor()
            same = cursor.get("path") == self.sources.events
            offset = cursor.get("offset", 0) if same else 0
            ident = cursor.get("ident", "") if same else ""
            got = eventlog.read_from(self.sources.events,
                                     offset if isinstance(offset, int) and offset >= 0 else 0,
                                     ident if isinstance(ident, str) else "")
            self.skipped_lines += got.skipped
            for rec in got.records:
                if rec.get("state") == "open":
                    decisions += self.engine.handle(detections.from_lens_event(rec))
            if (got.offset, got.ident) != (offset, ident):
                write_atomic(self.cursor_path, json.dumps({"path": self.sources.events,
                                                           "offset": got.offset,
                                                           "ident": got.ident}) + "\n")
        if self.sources.hooks:
            try:
                nodes = self.engine.node_states()
            except SlurmError:
                nodes = []  # Slurm unreachable: nothing decided on missing information
            for det in detections.from_hook_drains(nodes, self.engine.backend.drain_prefix):
                decisions += self.engine.handle(det)
        return decisions

    def _report(self, report: dict, where: str) -> list[dict]:
        out = []
        for det in detections.from_audit_report(report):
            out += self.engine.handle(det)
        # The last report is kept for `fleetctl explain` (what was seen, and when).
        write_atomic(self.cursor_path.parent / "last-audit.json", json.dumps(report) + "\n")
        return out

    def loop(self, duration_s: float | None, poll_s: float, on_decisions=None,
             stop: threading.Event | None = None) -> int:
        """Passes every `poll_s` until `duration_s` (None: until interrupted) or `stop` is set;
        returns decisions seen. Report files are read in the first pass only; the other inputs at
        every pass."""
        end = None if duration_s is None else time.monotonic() + duration_s
        count = 0
        while True:
            got = self.once()
            self.sources.reports = []
            count += len(got)
            if got and on_decisions:
                on_decisions(got)
            if end is not None and time.monotonic() >= end:
                return count
            wait = poll_s if end is None else max(0.0, min(poll_s, end - time.monotonic()))
            if stop is None:
                time.sleep(wait)
            elif stop.wait(wait):
                return count


@dataclass
class RunOptions:
    """`fleetctl act run`'s options."""

    state_dir: str | None = None
    reports: tuple[str, ...] = ()
    events: str | None = None  # None: act.lens_events
    hooks: bool = False
    audit_nodes: str | None = None  # also audit these nodes (quick level) at every pass
    dry_run: bool = False
    spares_state_dir: str | None = None
    registry: str | None = None


def start(cluster, opts: RunOptions, backend=None) -> tuple[Runner, list[dict]]:
    """The engine for the site's policies and pool, its inputs, and what recovery of a previous
    crash decided (act's start-up, for `act run`)."""
    from fleetctl.act.config import ActConfig
    from fleetctl.act.policies import policies_from_site
    from fleetctl.spares import SparePool, SparesConfig

    config = ActConfig.from_site(cluster, **({"state_dir": opts.state_dir} if opts.state_dir else {}))
    if backend is None:
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(cluster)
    pool = SparePool(backend, SparesConfig.from_site(cluster, opts.spares_state_dir))
    engine = Engine(backend, policies_from_site(cluster), config, pool=pool,
                    dry_run=opts.dry_run or not config.enabled, registry=opts.registry)
    engine.remediator = _remediator(cluster, config)
    recovered = engine.recover()
    sources = Sources(reports=list(opts.reports),
                      events=opts.events if opts.events is not None else config.lens_events,
                      hooks=opts.hooks, audit=_audit_source(cluster, opts.audit_nodes))
    return Runner(engine, sources, config.state_dir), recovered


def _remediator(cluster, config):
    """The ladder's access to the nodes: the site's transport, and a quick audit of one node."""
    from fleetctl.act.remedy import Remediator
    from fleetctl.fanout.base import FanoutOptions
    from fleetctl.fanout.registry import get_transport

    def transport():
        return get_transport(None, FanoutOptions.from_site(cluster), cluster=cluster)

    def audit(node: str, since: float) -> dict:
        from fleetctl.audit import build_report, collect

        started = time.time()
        return build_report(cluster, collect(cluster, [node], "quick", since=since), level="quick",
                            started=started).to_dict()

    return Remediator(transport, audit, config.gpu_busy_command, config.gpu_reset_command, config.remedy_timeout_s)


def _audit_source(cluster, nodeset: str | None):
    """A callable giving a quick audit report of `nodeset` (None: no own audits)."""
    if not nodeset:
        return None
    from fleetctl.audit import build_report, collect

    nodes = cluster.select(nodeset)

    def audit() -> dict:
        started = time.time()
        return build_report(cluster, collect(cluster, nodes, "quick", since=started - 300), level="quick",
                            started=started).to_dict()

    return audit
