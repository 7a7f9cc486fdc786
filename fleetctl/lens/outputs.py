"""The coordinator's outputs, together: the event log (always), the webhook (when a URL is set),
Prometheus /metrics (when a port is set) and rolling HDF5 segments (when enabled).

An event record goes to the log first (fsync'ed), then to the webhook's durable spool; a failing
optional output is logged once per kind of failure and never stops the detection.
"""

from __future__ import annotations

from fleetctl.errors import FleetctlError
from fleetctl.lens.eventlog import EventLog, read_events
from fleetctl.lens.options import LensOptions


class Outputs:
    def __init__(self, opts: LensOptions, log=print, topo=None, cluster=None):
        self.opts, self.log = opts, log
        self.events_path = opts.path("events.jsonl")
        self.eventlog = EventLog(self.events_path)
        self.webhook = None
        self.metrics = None
        self.segments = None
        self._failed: set[str] = set()
        if opts.webhook_url:
            from fleetctl.lens.webhook import WebhookOutbox

            self.webhook = WebhookOutbox(opts.webhook_url, opts.path("webhook.spool"), log=log)
        if opts.metrics_port:
            from fleetctl.lens.metrics import LensMetrics

            self.metrics = LensMetrics()
            self.metrics.serve(opts.metrics_address, int(opts.metrics_port),
                               max_connections=int(opts.metrics_max_connections))
            log(f"metrics on http://{opts.metrics_address}:{opts.metrics_port}/metrics")
        self.topo, self.cluster = topo, cluster

    def open_events(self) -> list[dict]:
        return read_events(self.events_path, open_only=True)

    def event(self, rec: dict) -> None:
        self.eventlog.append(rec)  # a failure here is fatal: the log is the record of truth
        if self.webhook is not None:
            self._guard("webhook", lambda: self.webhook.submit(rec))

    def window(self, doc: dict, probes, health: dict, meta: dict, open_events: list[dict]) -> None:
        if self.metrics is not None:
            self._guard("metrics", lambda: (self.metrics.observe_window(doc),
                                            self.metrics.set_open_events(open_events)))
        if self.segments is not None:
            self._guard("segments", lambda: self.segments.append(
                probes, health, {"t_end": meta.get("t_end")}))

    def set_plan(self, plan) -> None:
        """A new plan (first start or re-plan): segments follow its topology and paths."""
        if not self.opts.segments:
            return
        try:
            from fleetctl.lens import segments as seg
        except ImportError:
            return  # not merged yet (h12out)
        if self.segments is not None:
            self._guard("segments", self.segments.close)
        params = {"window_s": self.opts.window_s, "solver": self.opts.solver,
                  "rate": plan.rate, "plan": plan.plan.to_dict(), "source": "lens"}
        layout = seg.SegmentLayout(plan.topo, plan.paths, plan.flows, plan.disc.switch_results or {})
        policy = seg.SegmentPolicy(segment_s=self.opts.segment_s, retention=self.opts.segment_retention)
        self._guard("segments", lambda: setattr(self, "segments", seg.SegmentWriter(
            self.opts.path("segments"), layout, cluster=self.cluster.name if self.cluster is not None else "",
            parameters=params, policy=policy, log=self.log)))

    def _guard(self, what: str, fn) -> None:
        try:
            fn()
        except (FleetctlError, OSError, ValueError, TypeError, KeyError) as exc:
            if what not in self._failed:
                self._failed.add(what)
                self.log(f"lens output {what} failed (reported once): {exc}")

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
        if self.metrics is not None:
            self.metrics.stop()
        if self.segments is not None:
            self._guard("segments", self.segments.close)
