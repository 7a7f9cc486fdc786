"""The shipped Prometheus rules (prolog_epilog/fleetctl-alerts.yml) name only metrics fleetctl exports:
lens's from a real exposition, audit's and failover's from the text their exporters write. promtool
is not on this machine; the file documents `promtool check rules` for where it is."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.lens.metrics import LensMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "prolog_epilog" / "fleetctl-alerts.yml"


def exported_names() -> set[str]:
    m = LensMetrics()
    m.observe_window({"t_end": 1.0, "elements": [{"type": "link", "id": "a--b", "direction": "a->b",
                                                  "loss_pct": 1.0, "delay_p50_us": 1.0, "delay_p99_us": 2.0,
                                                  "probes": 100, "lost": 1}],
                      "agents": [{"host": "n1", "alive": True, "overloaded": False, "pps": 1.0, "cpu_pct": 1.0}],
                      "clock": [{"host": "n1", "offset_us": 1.0, "drift_ppm": 1.0}]})
    names = {s.name for fam in text_string_to_metric_families(m.text()) for s in fam.samples}
    for source in ("fleetctl/audit/export.py", "fleetctl/failover/watch.py"):  # hand-written exposition
        names |= set(re.findall(r"# TYPE (fleetctl_\w+) ", (ROOT / source).read_text()))
    return names


def test_rules_are_well_formed_and_name_exported_metrics():
    doc = yaml.safe_load(RULES.read_text())
    names = exported_names()
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    assert len(rules) >= 8
    for rule in rules:
        assert rule["alert"].startswith("Fleetctl") and rule["labels"]["severity"] in ("critical", "warning")
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")
        used = set(re.findall(r"\bfleetctl_\w+", expr))
        assert used and used <= names, (rule["alert"], used - names)
