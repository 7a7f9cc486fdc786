"""Lens metrics: a window's series, scraped over HTTP, replaced (not accumulated) window by window."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.lens.metrics import LensMetrics


def window(t_end=1000.0, links=("leaf1->spine1", "leaf1->spine2"), hosts=("node1", "node2")):
    return {
        "t_end": t_end,
        "elements": [{"type": "link", "id": d.replace("->", "--"), "direction": d,
                      "loss_pct": 1.5 if i == 0 else 0.0, "delay_p50_us": 12.0 + i,
                      "delay_p99_us": 40.0 + i, "probes": 500} for i, d in enumerate(links)]
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
    assert value(t, "fleetctl_lens_element_loss_percent", **link) == 1.5
    assert value(t, "fleetctl_lens_element_delay_p99_microseconds", **link) == 40.0
    assert math.isnan(value(t, "fleetctl_lens_element_loss_percent", type="switch", id="spine1",
                            direction=""))
    assert value(t, "fleetctl_lens_agent_overloaded", host="node2") == 1.0
    assert value(t, "fleetctl_lens_agent_alive", host="node1") == 1.0
    assert value(t, "fleetctl_lens_clock_offset_microseconds", host="node2") == 12.5
    assert value(t, "fleetctl_lens_probe_rate_pps") == 200.0
    assert value(t, "fleetctl_lens_window_end_seconds") == 1000.0
    assert value(t, "fleetctl_lens_windows_total") == 1.0


def test_vanished_elements_lose_their_series():
    m = LensMetrics()
    m.observe_window(window())
    m.observe_window(window(2000.0, links=("leaf1->spine2",), hosts=("node1",)))
    s = samples(m.text())
    names = {(n, dict(lbl).get("id") or dict(lbl).get("host")) for n, lbl in s}
    assert ("fleetctl_lens_element_loss_percent", "leaf1--spine1") not in names
    assert ("fleetctl_lens_element_loss_percent", "leaf1--spine2") in names
    assert ("fleetctl_lens_agent_alive", "node2") not in names
    assert ("fleetctl_lens_clock_drift_ppm", "node2") not in names


def test_cardinality_bound_and_malformed_entries():
    m = LensMetrics(max_series=10)
    w = window(links=[f"leaf{i}->spine1" for i in range(50)])
    w["agents"] += ["junk", {"host": "node9", "pps": "fast"}, {"pps": 3}]
    m.observe_window(w)
    m.observe_window("not a window")
    t = m.text()
    loss = [k for k in samples(t) if k[0] == "fleetctl_lens_element_loss_percent"]
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
    assert value(body, "fleetctl_lens_agent_probe_rate_pps", host="node1") == 100.0
    assert "python_gc" not in body  # its own registry, not the process-wide default one
    m.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
