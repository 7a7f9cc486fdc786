"""Lens metrics: gauges of the last window (replaced window by window), counters summed over every
window (a scrape at any interval loses no probe), base units, scraped over HTTP."""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.errors import UsageError
from fleetctl.lens.metrics import LensMetrics


def window(t_end=1000.0, links=("leaf1->spine1", "leaf1->spine2"), hosts=("node1", "node2")):
    return {
        "t_end": t_end,
        "elements": [{"type": "link", "id": d.replace("->", "--"), "direction": d,
                      "loss_pct": 1.5 if i == 0 else 0.0, "delay_p50_us": 12.0 + i,
                      "delay_p99_us": 40.0 + i, "probes": 500, **({"lost": 7} if i == 0 else {})}
                     for i, d in enumerate(links)]
        + [{"type": "switch", "id": "spine1", "loss_pct": None, "delay_p50_us": 3.0,
            "delay_p99_us": 9.0, "probes": 0}],
        "agents": [{"host": h, "alive": True, "overloaded": h == "node2", "pps": 100.0,
                    "cpu_pct": 4.5} for h in hosts],
        "clock": [{"host": h, "offset_us": 12.5 * i, "drift_ppm": -3.0} for i, h in
                  enumerate(hosts)],
    }


def samples(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text, name, **labels):
    return samples(text)[(name, tuple(sorted(labels.items())))]


def test_window_series():
    m = LensMetrics()
    m.observe_window(window())
    t = m.text()
    link = {"type": "link", "id": "leaf1--spine1", "direction": "leaf1->spine1"}
    assert value(t, "fleetctl_lens_element_loss_ratio", **link) == pytest.approx(0.015)
    assert value(t, "fleetctl_lens_element_delay_p99_seconds", **link) == pytest.approx(40e-6)
    assert math.isnan(value(t, "fleetctl_lens_element_loss_ratio", type="switch", id="spine1",
                            direction=""))
    assert value(t, "fleetctl_lens_agent_overloaded", node="node2") == 1.0
    assert value(t, "fleetctl_lens_agent_alive", node="node1") == 1.0
    assert value(t, "fleetctl_lens_agent_cpu_ratio", node="node1") == pytest.approx(0.045)
    assert value(t, "fleetctl_lens_clock_offset_seconds", node="node2") == pytest.approx(12.5e-6)
    assert value(t, "fleetctl_lens_clock_drift_ratio", node="node2") == pytest.approx(-3e-6)
    assert value(t, "fleetctl_lens_probes_per_second") == 200.0
    assert value(t, "fleetctl_lens_window_end_seconds") == 1000.0
    assert value(t, "fleetctl_lens_windows_total") == 1.0


def test_vanished_elements_lose_their_series():
    m = LensMetrics()
    m.observe_window(window())
    m.observe_window(window(2000.0, links=("leaf1->spine2",), hosts=("node1",)))
    s = samples(m.text())
    names = {(n, dict(lbl).get("id") or dict(lbl).get("node")) for n, lbl in s}
    assert ("fleetctl_lens_element_loss_ratio", "leaf1--spine1") not in names
    assert ("fleetctl_lens_element_loss_ratio", "leaf1--spine2") in names
    assert ("fleetctl_lens_agent_alive", "node2") not in names
    assert ("fleetctl_lens_clock_drift_ratio", "node2") not in names
    # Counters stay: the probes and losses of a link gone from the last window still count.
    assert ("fleetctl_lens_element_probes_total", "leaf1--spine1") in names


def test_counters_see_every_window_whatever_the_scrape_interval():
    m = LensMetrics()
    for t in range(30):  # thirty 1 s windows between two 30 s scrapes
        m.observe_window(window(1000.0 + t))
    text = m.text()
    link1 = {"type": "link", "id": "leaf1--spine1", "direction": "leaf1->spine1"}
    link2 = {"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2"}
    assert value(text, "fleetctl_lens_element_probes_total", **link1) == 30 * 500
    assert value(text, "fleetctl_lens_element_lost_probes_total", **link1) == 30 * 7  # the window's count
    assert value(text, "fleetctl_lens_element_lost_probes_total", **link2) == 0
    # No probe through it (the switch row with 0 probes): no counter series at all.
    assert not [k for k in samples(text) if k[0] == "fleetctl_lens_element_probes_total"
                and dict(k[1])["id"] == "spine1"]


def test_cardinality_bound_and_malformed_entries():
    m = LensMetrics(max_series=10)
    w = window(links=[f"leaf{i}->spine1" for i in range(50)])
    w["agents"] += ["junk", {"host": "node9", "pps": "fast"}, {"pps": 3}]
    m.observe_window(w)
    m.observe_window("not a window")
    t = m.text()
    loss = [k for k in samples(t) if k[0] == "fleetctl_lens_element_loss_ratio"]
    assert len(loss) == 10
    assert value(t, "fleetctl_lens_metrics_skipped_total", reason="max_series") == 41
    assert value(t, "fleetctl_lens_metrics_skipped_total", reason="malformed") == 4


def test_open_events_grid():
    m = LensMetrics()
    ev = [{"state": "open", "severity": "critical", "metric": "loss"},
          {"state": "open", "severity": "critical", "metric": "loss"},
          {"state": "closed", "severity": "warning", "metric": "delay"},
          {"state": "open", "severity": "warning", "metric": "clock"}]
    m.set_open_events(ev)
    t = m.text()
    assert value(t, "fleetctl_lens_open_events", severity="critical", metric="loss") == 2
    assert value(t, "fleetctl_lens_open_events", severity="warning", metric="delay") == 0
    m.set_open_events([])
    assert value(m.text(), "fleetctl_lens_open_events", severity="warning", metric="clock") == 0


def test_serve_over_http_and_stop():
    m = LensMetrics()
    m.observe_window(window())
    server = m.serve("127.0.0.1", 0)
    port = server.server_address[1]
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert value(body, "fleetctl_lens_agent_probes_per_second", node="node1") == 100.0
    assert "python_gc" not in body  # its own registry, not the process-wide default one
    m.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


# ---------------------------------------------------------------- idle connections (issue 20, 13)

def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _idle_clients(port: int, n: int) -> list[socket.socket]:
    """n real TCP connections that send nothing, as an unprivileged user's script would."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        out.append(s)
    return out


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset: closed too
        return True


def _wait(cond, timeout: float) -> bool:
    """A bounded wait (the proof that something does not hang), never a timing assertion."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_idle_connections_are_capped_and_cannot_exhaust_descriptors():
    from fleetctl.lens.metrics import DEFAULT_MAX_CONNECTIONS

    m = LensMetrics()
    m.observe_window(window())
    port = m.serve("127.0.0.1", 0).server_address[1]
    base_fds, base_threads = _open_fds(), threading.active_count()
    n = 1015
    clients = _idle_clients(port, n)
    try:
        # every connection past the cap is closed at once; the server holds at most the cap
        assert _wait(lambda: sum(map(_closed_by_server, clients)) >= n - DEFAULT_MAX_CONNECTIONS,
                     10), "connections past the cap were kept open"
        assert _open_fds() - base_fds - n <= DEFAULT_MAX_CONNECTIONS + 2
        assert threading.active_count() - base_threads <= DEFAULT_MAX_CONNECTIONS + 2
    finally:
        for c in clients:
            c.close()
        m.stop()


def test_an_idle_connection_is_closed_after_the_timeout_and_scrapes_go_on():
    m = LensMetrics()
    m.observe_window(window())
    port = m.serve("127.0.0.1", 0, max_connections=4, timeout_s=0.5).server_address[1]
    clients = _idle_clients(port, 4)  # the whole cap, idle
    try:
        assert _wait(lambda: all(map(_closed_by_server, clients)), 10), "idle connections kept"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"fleetctl_lens_agent_alive" in body
        trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
        trickle.sendall(b"GET /metr")  # a request that never ends
        trickle.settimeout(10)
        assert trickle.recv(1) == b""  # closed by the server within its timeout, not hours
        trickle.close()
    finally:
        for c in clients:
            c.close()
        m.stop()
    with pytest.raises(UsageError):
        LensMetrics().serve("127.0.0.1", 0, max_connections=0)


def test_the_site_cap_reaches_the_server_and_the_unit_sets_a_descriptor_limit(tmp_path):
    import re
    from pathlib import Path

    from fleetctl.lens.options import LensOptions
    from fleetctl.lens.outputs import Outputs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = LensOptions(state_dir=str(tmp_path), metrics_port=port, metrics_max_connections=2)
    out = Outputs(opts, log=lambda _m: None)
    clients = _idle_clients(port, 5)
    try:
        assert _wait(lambda: sum(map(_closed_by_server, clients)) >= 3, 10)
        assert out.metrics._server.refused >= 3
    finally:
        for c in clients:
            c.close()
        out.close()
    unit = (Path(__file__).resolve().parents[2] / "prolog_epilog" / "fleetctl-lens.service").read_text()
    limit = re.search(r"^LimitNOFILE=(\d+)$", unit, re.M)
    assert limit and int(limit.group(1)) >= 4096


def test_elements_that_are_not_a_list_are_one_malformed_entry():
    m = LensMetrics()
    m.observe_window({**window(), "elements": 5})
    t = m.text()
    assert value(t, "fleetctl_lens_metrics_skipped_total", reason="malformed") == 1
    assert not [k for k in samples(t) if k[0] == "fleetctl_lens_element_loss_ratio"]
    assert value(t, "fleetctl_lens_windows_total") == 1.0


def test_held_findings_are_counted_by_what_explains_them():
    m = LensMetrics()
    t = m.text()  # present at zero before any window
    assert value(t, "fleetctl_lens_findings_held_total", by="open_event") == 0.0
    w = window()
    w["held"] = {"open_event": 2, "window_finding": 1}
    m.observe_window(w)
    w = window(2000.0)
    w["held"] = {"open_event": 1, "window_finding": True, "other": 5}  # a bool is no count
    m.observe_window(w)
    t = m.text()
    assert value(t, "fleetctl_lens_findings_held_total", by="open_event") == 3.0
    assert value(t, "fleetctl_lens_findings_held_total", by="window_finding") == 1.0
    assert ("fleetctl_lens_findings_held_total", (("by", "other"),)) not in samples(t)
