"""The shipped Prometheus rules (prolog_epilog/fleetctl-alerts.yml) and Grafana dashboard
(prolog_epilog/fleetctl-dashboard.json) name only metrics fleetctl exports: lens's from a real
exposition, audit's and failover's from the text their exporters write. promtool (Debian's, put in
.tools/bin by scripts/install) checks the rules, and every dashboard query as a recording rule."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.lens.metrics import LensMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "prolog_epilog" / "fleetctl-alerts.yml"
DASHBOARD = ROOT / "prolog_epilog" / "fleetctl-dashboard.json"


def promtool() -> str:
    found = ROOT / ".tools" / "bin" / "promtool"
    if found.is_file():
        return str(found)
    on_path = shutil.which("promtool")
    assert on_path, "no promtool: ./scripts/install puts Debian's in .tools/bin"
    return on_path


def dashboard_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in doc["panels"] for target in panel.get("targets", [])]


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


def test_promtool_checks_the_rules():
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_the_dashboard_loads_and_queries_only_exported_metrics():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "fleetctl-overview" and doc["schemaVersion"] >= 36
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
    queries = dashboard_queries()
    assert len(queries) >= 12
    names = exported_names()
    for title, expr in queries:
        used = set(re.findall(r"\bfleetctl_\w+", expr))
        assert used and used <= names, (title, used - names)
    # lens, audit and failover each have their panels
    exporters = {q.split("_")[1] for _, e in queries for q in re.findall(r"\bfleetctl_\w+", e)}
    assert exporters == {"lens", "audit", "failover"}


def test_promtool_parses_every_dashboard_query(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"fleetctl_dashboard:query{i}", "expr": expr}
                                                        for i, (_, expr) in enumerate(dashboard_queries())]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
