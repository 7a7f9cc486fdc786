"""Prometheus metrics of `fleetctl lens` (docs/lens.md, "Outputs"), on a registry of their own.

    m = LensMetrics()
    m.observe_window({"t_end": ..., "elements": [...], "agents": [...], "clock": [...]})
    m.set_open_events(read_events(log, open_only=True))
    server = m.serve("0.0.0.0", 9464)   # server.shutdown(); server.server_close()

Base units throughout (seconds, ratios, probes per second). Two kinds of series:
- counters per element, `..._element_probes_total` and `..._element_lost_probes_total`, summed over
  every window: a scrape at any interval sees every probe and every loss since the coordinator
  started (`rate(lost[5m]) / rate(probes[5m])` is the loss over any span), where the gauges
  below show only the last 1 s window of every 30;
- gauges of the last window: every window replaces the previous one's series, so an element, agent
  or host absent from the new window loses its series (a fabric that shrinks leaves no stale ones).
Labels speak the fleet's vocabulary, as audit's export does: `node` (a host), `type`/`id`/`direction`
(a fabric element). At most `max_series` elements / nodes are exported per family (counters included, over the whole
run), so the label cardinality stays bounded whatever the windows hold. Malformed entries are
skipped and counted, never raised.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge, generate_latest
from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fleetctl.errors import UsageError
from fleetctl.lens.eventlog import METRICS, SEVERITIES

PREFIX = "fleetctl_lens"
DEFAULT_MAX_SERIES = 20_000  # elements (link directions, switches, NICs) or hosts per family
MAX_LABEL = 200  # characters of a label value
DEFAULT_MAX_CONNECTIONS = 16  # /metrics connections served at once (site: lens.metrics_max_connections)
MAX_CONNECTIONS = 1024
CONNECTION_TIMEOUT_S = 10.0  # a connection silent this long (between two reads or writes) is closed

_ELEMENT = ("type", "id", "direction")
HELD_BY = ("open_event", "window_finding")  # a window document's `held` keys


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


_ELEMENT_GAUGES = {
    "loss_ratio": ("element_loss_ratio", "Probe loss over the element in the last window (0-1)"),
    "delay_p50_s": ("element_delay_p50_seconds", "Median path delay over the element, last window"),
    "delay_p99_s": ("element_delay_p99_seconds", "99th percentile path delay, last window"),
}


class _Elements:
    """The per-element series as a collector: the last window's gauges (`last`, replaced whole
    each window: an element gone from it loses its series) and the counters summed over every
    window (`totals`: key -> [probes, lost]), kept as plain rows and made into metric families
    when scraped. A gauge and two counters a label set through prometheus_client's child
    objects cost 0.21 s a window at 1,280 hosts x 8 NICs (32,056 elements), once a second."""

    def __init__(self):
        self.last: dict[tuple[str, ...], dict[str, float]] = {}
        self.totals: dict[tuple[str, ...], list[float]] = {}
        self.lock = threading.Lock()  # the totals are added to while a scrape reads them

    def collect(self):
        last = self.last  # replaced, never changed in place: this view stays whole
        gauges = {key: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=_ELEMENT)
                  for key, (name, doc) in _ELEMENT_GAUGES.items()}
        for labels, row in last.items():
            for key, value in row.items():
                gauges[key].add_metric(labels, value)
        yield from gauges.values()
        probes = CounterMetricFamily(f"{PREFIX}_element_probes",
                                     "Probes over the element, every window", labels=_ELEMENT)
        lost = CounterMetricFamily(f"{PREFIX}_element_lost_probes",
                                   "Probes lost over the element, every window", labels=_ELEMENT)
        with self.lock:
            totals = [(labels, n, k) for labels, (n, k) in self.totals.items()]
        for labels, n, k in totals:
            probes.add_metric(labels, n)
            lost.add_metric(labels, k)
        yield probes
        yield lost


class LensMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, *,
                 max_series: int = DEFAULT_MAX_SERIES):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_series = max_series
        r = self.registry
        # per element: held as plain rows and turned into series only when scraped (_Elements)
        self.elements = _Elements()
        r.register(self.elements)
        self.agents = _Family(r, ("node",), {
            "alive": ("agent_alive", "1 when the host's probe agent reported in the last window"),
            "overloaded": ("agent_overloaded", "1 when the agent measured itself overloaded"),
            "pps": ("agent_probes_per_second", "Probes sent and answered per second by the agent"),
            "cpu": ("agent_cpu_ratio", "CPU the agent used, in cores (1 = one whole core)"),
        })
        self.clock = _Family(r, ("node",), {
            "offset_s": ("clock_offset_seconds", "Host clock minus the reference clock"),
            "drift": ("clock_drift_ratio", "Host clock drift against the reference (1e-6 = 1 ppm)"),
        })
        self.open_events = Gauge(f"{PREFIX}_open_events", "Open lens events",
                                 ("severity", "metric"), registry=r)
        for sev in SEVERITIES:  # a fixed grid: always present, zero when none are open
            for metric in METRICS:
                self.open_events.labels(sev, metric).set(0)
        self.window_end = Gauge(f"{PREFIX}_window_end_seconds",
                                "End of the last window observed (seconds since 1970)", registry=r)
        self.probe_rate = Gauge(f"{PREFIX}_probes_per_second",
                                "Probes per second of all agents together", registry=r)
        self.windows = PromCounter(f"{PREFIX}_windows", "Windows observed", registry=r)
        # findings that opened nothing because another fault explains them (window.py's
        # explained rules): an operator sees the rules act, not only their silence
        self.held = PromCounter(f"{PREFIX}_findings_held", "Findings explained by an open event "
                                "or a stronger finding of their window, so opening nothing",
                                ("by",), registry=r)
        for by in HELD_BY:
            self.held.labels(by)
        self.skipped = PromCounter(f"{PREFIX}_metrics_skipped",
                                   "Window entries not exported (malformed, or past max_series)",
                                   ("reason",), registry=r)
        self._server = None

    # ------------------------------------------------------------ updates
    def _rows(self, entries, fields: dict[str, tuple[str, float]], labels) -> dict:
        """{label key: {field: value in base units}}; `fields` maps each field to the window's key
        and the factor to base units. Past `max_series` rows the rest are counted, not read."""
        rows = {}
        if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
            if entries:  # not a list of entries at all
                self.skipped.labels("malformed").inc()
            entries = []
        for i, entry in enumerate(entries):
            if len(rows) >= self.max_series:
                self.skipped.labels("max_series").inc(len(entries) - i)
                break
            try:
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
                key = labels(entry)
                rows[key] = {name: _number(entry.get(src)) * factor
                             for name, (src, factor) in fields.items() if src in entry}
            except (TypeError, ValueError, KeyError):
                self.skipped.labels("malformed").inc()
        return rows

    def observe_window(self, window: dict) -> None:
        """One window's figures (format in docs/lens.md): counters add to the totals, gauges replace
        the previous window's series."""
        if not isinstance(window, dict):
            self.skipped.labels("malformed").inc()
            return
        elements = self._rows(
            window.get("elements"),
            {"loss_ratio": ("loss_pct", 0.01), "delay_p50_s": ("delay_p50_us", 1e-6),
             "delay_p99_s": ("delay_p99_us", 1e-6), "probes": ("probes", 1), "lost": ("lost", 1)},
            lambda e: (_label(e["type"]), _label(e["id"]), _label(e.get("direction"))))
        self._count(elements)
        self.elements.last = {k: {n: v for n, v in row.items() if n not in ("probes", "lost")}
                              for k, row in elements.items()}
        agents = self._rows(window.get("agents"), {"alive": ("alive", 1), "overloaded": ("overloaded", 1),
                                                   "pps": ("pps", 1), "cpu": ("cpu_pct", 0.01)},
                            lambda e: (_label(e["host"]),))
        self.agents.replace(agents)
        self.clock.replace(self._rows(window.get("clock"), {"offset_s": ("offset_us", 1e-6),
                                                             "drift": ("drift_ppm", 1e-6)},
                                      lambda e: (_label(e["host"]),)))
        rate = sum(v["pps"] for v in agents.values() if not math.isnan(v.get("pps", math.nan)))
        self.probe_rate.set(rate)
        try:
            self.window_end.set(_number(window.get("t_end")))
        except (TypeError, ValueError):
            self.skipped.labels("malformed").inc()
        held = window.get("held")
        if isinstance(held, dict):
            for by in HELD_BY:
                n = held.get(by)
                if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 2**31:
                    self.held.labels(by).inc(n)
        self.windows.inc()

    def _count(self, elements: dict) -> None:
        """Add a window's probes and losses to the per-element counters. An element's lost count
        comes from the window (`lost`), else from its rounded loss ratio."""
        totals = self.elements.totals
        with self.elements.lock:
            for key, row in elements.items():
                probes = row.get("probes", math.nan)
                if not probes > 0:  # NaN or none through it
                    continue
                seen = totals.get(key)
                if seen is None:
                    if len(totals) >= self.max_series:
                        self.skipped.labels("max_series").inc()
                        continue
                    seen = totals[key] = [0.0, 0.0]
                lost = row.get("lost", math.nan)
                if not lost >= 0:
                    ratio = row.get("loss_ratio", math.nan)
                    lost = round(probes * ratio) if ratio >= 0 else 0.0
                seen[0] += probes
                seen[1] += min(lost, probes)

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

    def serve(self, addr: str, port: int, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
              timeout_s: float = CONNECTION_TIMEOUT_S):
        """Serve /metrics on addr:port in a daemon thread; the server (port 0: any free port, read
        it from server.server_address). Stop it with stop() or server.shutdown(). At most
        `max_connections` are served at once (one thread each; more are closed on accept) and a
        connection silent for `timeout_s` is closed, so idle clients cannot pile up threads and
        file descriptors in the coordinator."""
        if not 0 <= int(port) <= 65535:
            raise UsageError(f"metrics port {port}: between 0 and 65535")
        if not 1 <= int(max_connections) <= MAX_CONNECTIONS or not 0.01 <= timeout_s <= 3600:
            raise UsageError(f"metrics: max_connections 1-{MAX_CONNECTIONS}, timeout_s 0.01-3600")
        try:
            info = socket.getaddrinfo(addr or None, int(port), type=socket.SOCK_STREAM,
                                      flags=socket.AI_PASSIVE)[0]
            server = _Server(info[0], info[4][:2], int(max_connections), float(timeout_s))
        except OSError as exc:
            raise UsageError(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}") from None
        server.set_app(make_wsgi_app(self.registry))
        threading.Thread(target=server.serve_forever, name="lens-metrics", daemon=True).start()
        self._server = server
        return server

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _Handler(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # no line per scrape in the coordinator's log
        pass


class _Server(ThreadingMixIn, WSGIServer):
    """prometheus_client's threaded WSGI server, bounded: a socket timeout on every connection and
    at most `max_connections` handler threads; a connection past the cap is closed at once
    (counted in `refused`), a failed or timed-out one is counted in `errors` (no traceback)."""

    daemon_threads = True
    request_queue_size = 1024  # pending connections wait in the kernel, not as descriptors here

    def __init__(self, family: int, address: tuple, max_connections: int, timeout_s: float):
        self.address_family = family
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = self.errors = 0
        super().__init__(address, _Handler)

    def get_request(self):
        sock, addr = super().get_request()
        sock.settimeout(self.timeout_s)
        return sock, addr

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the handler thread
        except BaseException:
            self._slots.release()
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        self.errors += 1
