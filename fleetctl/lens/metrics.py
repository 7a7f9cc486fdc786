"""Prometheus metrics of `fleetctl lens` (docs/lens.md, "Outputs"), on a registry of their own.

    m = LensMetrics()
    m.observe_window({"t_end": ..., "elements": [...], "agents": [...], "clock": [...]})
    m.set_open_events(read_events(log, open_only=True))
    server = m.serve("0.0.0.0", 9464)   # server.shutdown(); server.server_close()

Every window replaces the previous one's series: an element, agent or host absent from the new
window loses its series (a fabric that shrinks does not leave stale ones behind), and at most
`max_series` elements / hosts are exported per family, so the label cardinality stays bounded
whatever the window holds. Malformed entries are skipped and counted, never raised.
"""

from __future__ import annotations

import math
from collections import Counter

from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge, generate_latest
from prometheus_client.exposition import start_http_server

from fleetctl.errors import UsageError
from fleetctl.lens.eventlog import METRICS, SEVERITIES

PREFIX = "fleetctl_lens"
DEFAULT_MAX_SERIES = 20_000  # elements (link directions, switches, NICs) or hosts per family
MAX_LABEL = 200  # characters of a label value

_ELEMENT = ("type", "id", "direction")


def _label(value) -> str:
    return str(value if value is not None else "")[:MAX_LABEL]


def _number(value) -> float:
    """A finite float, NaN for None (no measurement); ValueError otherwise."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    out = float(value)
    if math.isinf(out):
        raise ValueError("infinite")
    return out


class _Family:
    """Gauges sharing one label set, whose series are replaced as a whole each window."""

    def __init__(self, registry, labels: tuple[str, ...], gauges: dict[str, str]):
        self.gauges = {key: Gauge(f"{PREFIX}_{name}", doc, labels, registry=registry)
                       for key, (name, doc) in gauges.items()}
        self.current: set[tuple[str, ...]] = set()

    def replace(self, rows: dict[tuple[str, ...], dict[str, float]]) -> None:
        for key in self.current - set(rows):
            for g in self.gauges.values():
                try:
                    g.remove(*key)
                except KeyError:
                    pass
        for key, values in rows.items():
            for name, value in values.items():
                self.gauges[name].labels(*key).set(value)
        self.current = set(rows)


class LensMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, *,
                 max_series: int = DEFAULT_MAX_SERIES):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_series = max_series
        r = self.registry
        self.elements = _Family(r, _ELEMENT, {
            "loss_pct": ("element_loss_percent", "Probe loss over the element in the last window (%)"),
            "delay_p50_us": ("element_delay_p50_microseconds", "Median delay over the element (us)"),
            "delay_p99_us": ("element_delay_p99_microseconds", "99th percentile delay (us)"),
            "probes": ("element_probes", "Probes over the element in the last window"),
        })
        self.agents = _Family(r, ("host",), {
            "alive": ("agent_alive", "1 when the host's probe agent reported in the last window"),
            "overloaded": ("agent_overloaded", "1 when the agent measured itself overloaded"),
            "pps": ("agent_probe_rate_pps", "Probes sent and answered per second by the agent"),
            "cpu_pct": ("agent_cpu_percent", "CPU the agent used (% of one core)"),
        })
        self.clock = _Family(r, ("host",), {
            "offset_us": ("clock_offset_microseconds", "Host clock minus the reference clock (us)"),
            "drift_ppm": ("clock_drift_ppm", "Host clock drift against the reference (ppm)"),
        })
        self.open_events = Gauge(f"{PREFIX}_open_events", "Open lens events",
                                 ("severity", "metric"), registry=r)
        for sev in SEVERITIES:  # a fixed grid: always present, zero when none are open
            for metric in METRICS:
                self.open_events.labels(sev, metric).set(0)
        self.window_end = Gauge(f"{PREFIX}_window_end_seconds",
                                "End of the last window observed (seconds since 1970)", registry=r)
        self.probe_rate = Gauge(f"{PREFIX}_probe_rate_pps",
                                "Probes per second of all agents together", registry=r)
        self.windows = PromCounter(f"{PREFIX}_windows", "Windows observed", registry=r)
        self.skipped = PromCounter(f"{PREFIX}_metrics_skipped",
                                   "Window entries not exported (malformed, or past max_series)",
                                   ("reason",), registry=r)
        self._server = None

    # ------------------------------------------------------------ updates
    def _rows(self, entries, keys: tuple[str, ...], labels) -> dict:
        rows = {}
        for entry in entries or []:
            if len(rows) >= self.max_series:
                self.skipped.labels("max_series").inc()
                continue
            try:
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
                key = labels(entry)
                rows[key] = {k: _number(entry.get(k)) for k in keys if k in entry}
            except (TypeError, ValueError, KeyError):
                self.skipped.labels("malformed").inc()
        return rows

    def observe_window(self, window: dict) -> None:
        """One window's figures (format in docs/lens.md); replaces the previous window's series."""
        if not isinstance(window, dict):
            self.skipped.labels("malformed").inc()
            return
        self.elements.replace(self._rows(
            window.get("elements"), ("loss_pct", "delay_p50_us", "delay_p99_us", "probes"),
            lambda e: (_label(e["type"]), _label(e["id"]), _label(e.get("direction")))))
        agents = self._rows(window.get("agents"), ("alive", "overloaded", "pps", "cpu_pct"),
                            lambda e: (_label(e["host"]),))
        self.agents.replace(agents)
        self.clock.replace(self._rows(window.get("clock"), ("offset_us", "drift_ppm"),
                                      lambda e: (_label(e["host"]),)))
        rate = sum(v["pps"] for v in agents.values() if not math.isnan(v.get("pps", math.nan)))
        self.probe_rate.set(rate)
        try:
            self.window_end.set(_number(window.get("t_end")))
        except (TypeError, ValueError):
            self.skipped.labels("malformed").inc()
        self.windows.inc()

    def set_open_events(self, events) -> None:
        """Open events by severity and metric, from the event log's current view."""
        counts = Counter((e.get("severity"), e.get("metric")) for e in events or []
                         if isinstance(e, dict) and e.get("state") == "open")
        for sev in SEVERITIES:
            for metric in METRICS:
                self.open_events.labels(sev, metric).set(counts.get((sev, metric), 0))

    # ------------------------------------------------------------ exposition
    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def serve(self, addr: str, port: int):
        """Serve /metrics on addr:port in a daemon thread; the server (port 0: any free port, read
        it from server.server_address). Stop it with stop() or server.shutdown()."""
        if not 0 <= int(port) <= 65535:
            raise UsageError(f"metrics port {port}: between 0 and 65535")
        try:
            server, _thread = start_http_server(int(port), addr, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}") from None
        self._server = server
        return server

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
