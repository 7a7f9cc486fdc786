"""The audit report's verdicts, exit codes, Prometheus text and history diff, on check documents of
the payload's schema (docs/checks.md)."""

from __future__ import annotations

import json

import pytest

from fleetctl.audit.export import (changes_since, previous_report, prometheus_text, write_atomic,
                                   write_history)
from fleetctl.audit.report import AuditReport
from fleetctl.audit.runner import NodeOutcome, payload_source
from fleetctl.errors import DataError


def doc(status="ok", *results, complete=True):
    return {"schema": "fleetctl.checks/1", "status": status, "action": "none", "complete": complete,
            "level": "quick", "simulated": False, "results": list(results), "facts": {}}


def res(code, status, subject="", action="none"):
    return {"code": code, "status": status, "message": f"{code} {status}", "action": action,
            "subject": subject, "evidence": {}}


def report(outcomes, fleet=()):
    return AuditReport(cluster="t", level="quick", started=100.0, finished=102.5,
                       outcomes={o.node: o for o in outcomes}, fleet=list(fleet))


def test_exit_codes_follow_the_worst_node():
    ok = NodeOutcome("n1", doc("ok", res("gpu.count", "ok")))
    warn = NodeOutcome("n2", doc("warn", res("gpu.temperature", "warn", "gpu1")))
    fail = NodeOutcome("n3", doc("fail", res("xid.79", "fail", "0000:18:00", "reboot")))
    dead = NodeOutcome("n4", transport_status="unreachable", error="no route to host")
    assert report([ok]).exit_code == 0
    assert report([ok, warn]).exit_code == 1
    assert report([ok, dead]).exit_code == 1  # a node that could not be checked is not a failure
    assert report([ok, warn, fail, dead]).exit_code == 2
    assert report([dead]).exit_code == 3  # nothing answered: the audit could not run
    r = report([ok, warn, fail, dead])
    assert [n["node"] for n in r.to_dict()["nodes"]] == ["n3", "n4", "n2", "n1"]
    assert r.summary()["fail_nodes"] == "n3" and r.summary()["error_nodes"] == "n4"


def test_failing_fleet_finding_fails_the_node_it_names():
    a = NodeOutcome("n1", doc("ok"))
    b = NodeOutcome("n2", doc("ok"))
    finding = {"code": "fleet.nic.mtu", "status": "fail", "nodes": "n2", "subject": "eth0",
               "message": "mtu differs", "action": "drain", "evidence": {}}
    r = report([a, b], [finding])
    assert r.node_status("n2") == "fail" and r.node_status("n1") == "ok" and r.exit_code == 2
    warn_only = dict(finding, status="warn")
    assert report([a, b], [warn_only]).exit_code == 1


def test_prometheus_text_is_well_formed():
    r = report([NodeOutcome("n1", doc("fail", res("gpu.ecc", "fail", 'gpu"0'), res("gpu.count", "ok"))),
                NodeOutcome("n2", transport_status="timeout", error="timed out")])
    text = prometheus_text(r)
    assert 'fleetctl_audit_node_status{cluster="t",node="n1"} 2' in text
    assert 'fleetctl_audit_node_status{cluster="t",node="n2"} 3' in text
    assert 'code="gpu.ecc",subject="gpu\\"0"} 2' in text  # label values escaped
    assert "gpu.count" not in text  # passing checks are not exported one by one
    assert 'fleetctl_audit_nodes{cluster="t",status="fail"} 1' in text
    for line in text.splitlines():
        assert line.startswith("#") or line.startswith("fleetctl_audit_")


def test_history_diff_new_and_resolved(tmp_path):
    first = report([NodeOutcome("n1", doc("warn", res("gpu.temperature", "warn", "gpu1"))),
                    NodeOutcome("n2", doc("ok"))])
    write_history(tmp_path, first.to_dict())
    (tmp_path / "audit-99999999T999999-999.json").write_text("{ truncated")  # damaged: skipped
    second = report([NodeOutcome("n1", doc("ok")),
                     NodeOutcome("n2", doc("fail", res("xid.79", "fail", "0000:18:00", "reboot")))])
    second.finished = 200.0
    changes = changes_since(previous_report(tmp_path), second)
    assert changes["nodes"]["n1"] == {"status": ["warn", "ok"], "new": [],
                                      "resolved": ["gpu.temperature/gpu1"]}
    assert changes["nodes"]["n2"]["new"] == ["xid.79/0000:18:00"]
    assert changes_since(None, second) is None


def test_write_atomic_names_the_file_on_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DataError, match="cannot write .*file/out.prom"):
        write_atomic(blocker / "out.prom", "text")


def test_payload_fills_the_node_name_on_the_node(tmp_path):
    import subprocess

    args = {"node": "{node}", "level": "quick", "budget_s": 5, "kernel_log": str(tmp_path / "{node}.log"),
            "gpus": {"count": 0}, "nics": [], "mounts": [], "host": {}, "thresholds": {}}
    (tmp_path / "gpu7.log").write_text("")
    out = subprocess.run(["python3", "-", json.dumps(args)], input=payload_source(), capture_output=True,
                         text=True, timeout=30, env={"FLEETCTL_NODE": "gpu7", "PATH": "/usr/bin:/bin"})
    result = json.loads(out.stdout)
    assert result["node"] == "gpu7"
    scan = [r for r in result["results"] if r["code"] == "xid.scan"]
    assert scan and scan[0]["evidence"].get("source", "").endswith("gpu7.log"), scan


def test_concurrent_audits_keep_every_history_report(tmp_path):
    """Several processes finishing in the same millisecond: every report is kept, none half-written.
    Before, the name was the time alone and one report replaced the other."""
    import multiprocessing

    def writer(n):
        for i in range(10):
            write_history(tmp_path, {"schema": "fleetctl.audit/1", "finished": 1795967520.123,
                                     "writer": n, "i": i, "nodes": []})

    procs = [multiprocessing.get_context("fork").Process(target=writer, args=(n,)) for n in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    reports = [json.loads(p.read_text()) for p in tmp_path.glob("audit-*.json")]
    assert sorted((r["writer"], r["i"]) for r in reports) == [(n, i) for n in range(6) for i in range(10)]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
