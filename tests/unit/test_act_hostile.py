"""act against hostile and failing inputs (issue 20): nested JSON in a job's snapshot files, many jobs
on a failing node, records over a line's size, a crash in the middle of a swap, malformed audit
reports. The rule behind all of them: fleetctl's own failure or a job's bad file never stops the
drain that follows, and a decision is never lost from the log that later decisions read."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import time

import pytest

from fleetctl.act import detections
from fleetctl.act.actionlog import MAX_LINE_BYTES, ActionLog
from fleetctl.act.run import read_report
from fleetctl.act.undo import undo
from fleetctl.errors import DataError
from fleetctl.snapshot import registry
from tests.support.crash import CRASH_EXIT, crash_at

sys.path.insert(0, os.path.dirname(__file__))
from actfixtures import audit_report  # noqa: E402
from snapfixtures import make_snapshot  # noqa: E402
from test_act_engine import XID, handle_report, make, phases  # noqa: E402

DEEP = "[" * 60_000
SNAP_DRAIN = {**XID, "actions": ["snapshot", "drain"]}


def _job_with_entry(tmp_path, slurm, job_id: str, nodes) -> "os.PathLike":
    reg = tmp_path / "registry"
    reg.mkdir(exist_ok=True)
    snaps = tmp_path / f"snaps-{job_id}"
    snaps.mkdir()
    registry.register(job_id, snaps, 1, str(reg))
    slurm.run_job(job_id, list(nodes))
    return snaps


# ---------------------------------------------------------------- defect 1
def test_a_nested_registry_entry_never_stops_the_drain(tmp_path):
    slurm, engine = make(tmp_path, policies=(SNAP_DRAIN,), snapshot_timeout_s=0.2)
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "12.json").write_text(DEEP)
    slurm.run_job("12", ["node2"])
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert phases(decisions) == [("snapshot", "refused"), ("drain", "done")]
    assert "nested deeper" in decisions[0]["why"]
    assert slurm.node_map["node2"].flags == ["DRAIN"]


def test_a_nested_manifest_of_the_job_never_stops_the_drain(tmp_path):
    slurm, engine = make(tmp_path, policies=(SNAP_DRAIN,), snapshot_timeout_s=0.3)
    snaps = _job_with_entry(tmp_path, slurm, "12", ["node2"])
    make_snapshot(snaps, 4)
    (snaps / "step_4" / "MANIFEST.json").write_text(DEEP)
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert phases(decisions) == [("snapshot", "failed"), ("drain", "done")]


def test_an_internal_failure_of_an_action_is_logged_and_the_next_action_runs(tmp_path, monkeypatch):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain", "notify"],
                                              "webhook": "http://127.0.0.1:9/"},))
    monkeypatch.setattr(type(slurm), "drain", lambda *a, **k: (_ for _ in ()).throw(TypeError("boom")))
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert [d["phase"] for d in decisions] == ["failed", "failed"]  # notify ran (and found no receiver)
    assert "internal error (TypeError: boom)" in decisions[0]["why"]


# ---------------------------------------------------------------- defect 11
def test_many_jobs_on_a_failing_node_cost_one_snapshot_timeout(tmp_path):
    timeout = 0.5
    slurm, engine = make(tmp_path, policies=(SNAP_DRAIN,), snapshot_timeout_s=timeout,
                         nodes=tuple(f"node{i}" for i in range(1, 5)))
    for j in range(64):
        _job_with_entry(tmp_path, slurm, str(100 + j), ["node2"])
    started = time.monotonic()
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    elapsed = time.monotonic() - started
    snaps = [d for d in decisions if d["action"] == "snapshot"]
    assert len(snaps) == 64 and all(d["phase"] == "failed" for d in snaps)
    assert all((tmp_path / f"snaps-{100 + j}" / "REQUEST").exists() for j in range(64))  # all asked
    assert decisions[-1]["action"] == "drain" and decisions[-1]["phase"] == "done"
    assert elapsed < 8 * timeout, f"{elapsed:.1f} s: the jobs were waited for one after another"


# ---------------------------------------------------------------- defect 12
class _Receiver(http.server.BaseHTTPRequestHandler):
    posts: list = []

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).posts.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.posts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_a_record_over_a_line_still_starts_its_cool_down(tmp_path, receiver):
    """A fleet finding on 1,500 long-named nodes: its record was over 64 KiB and was cut into invalid
    JSON, so the cool-down never saw it and the webhook was posted at every pass."""
    policy = {"name": "fleet", "source": "audit", "codes": ["fleet.*"], "severities": ["critical"],
              "actions": ["notify"], "webhook": receiver, "cooldown_s": 3600}
    slurm, engine = make(tmp_path, policies=(policy,))
    name = "a-rather-long-node-name-of-a-large-site-rack-row-and-pos-x"
    report = audit_report({})
    report["fleet"] = [{"code": "fleet.driver", "status": "fail", "subject": "driver",
                        "nodes": f"{name}[0001-1500]", "message": "driver differs", "evidence": {}}]
    outcomes = [[d["phase"] for d in handle_report(engine, report)] for _ in range(3)]
    assert outcomes == [["done"], ["refused"], []] and len(_Receiver.posts) == 1  # a refusal is logged once
    lines = (tmp_path / "act" / "actions.jsonl").read_bytes().splitlines()
    assert all(len(line) < MAX_LINE_BYTES and json.loads(line) for line in lines)


def test_a_partial_last_line_never_swallows_the_next_record(tmp_path):
    log = ActionLog(tmp_path)
    log.append({"id": "a1", "policy": "p", "action": "drain", "phase": "pending"})
    with open(log.path, "ab") as fh:
        fh.write(b'{"id": "crashed-mid-write", "pha')
    log.append({"id": "a1", "policy": "p", "action": "drain", "phase": "done"})
    assert log.current()["a1"]["history"] == ["pending", "done"]


# ---------------------------------------------------------------- defect 19
def test_a_crash_after_the_spare_left_the_pool_can_be_undone(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["swap"]},), spares=("node3", "node4"))
    slurm.run_job("12", ["node1", "node2"])
    pid = os.fork()
    if pid == 0:
        engine.on_point = crash_at("swap", "after-release")
        try:
            handle_report(engine, audit_report({"node2": "xid.79"}))
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == CRASH_EXIT
    slurm.res["fleetctl-spares"] = ["node4"]  # the child's Slurm died with it: node3 had left the pool
    recovered = engine.recover()
    assert [r["phase"] for r in recovered] == ["abandoned"] and "spare node3 was released" in recovered[0]["why"]
    undone = undo(ActionLog(tmp_path / "act"), recovered[0]["id"], slurm, engine.pool)
    assert undone["phase"] == "undone" and sorted(slurm.res["fleetctl-spares"]) == ["node3", "node4"]


# ---------------------------------------------------------------- defect 20
@pytest.mark.parametrize("doc, field", [
    ({"nodes": [1]}, "nodes[0]"),
    ({"nodes": {"node1": {}}}, "nodes"),
    ({"nodes": [{"node": "n1", "results": [7]}]}, "nodes[0].results[0]"),
    ({"nodes": [{"node": "n1", "results": "x"}]}, "nodes[0].results"),
    ({"nodes": [{"node": ["n1"]}]}, "nodes[0].node"),
    ({"nodes": [], "fleet": [None]}, "fleet[0]"),
    ({"nodes": [{"node": "n1", "results": [{"code": {"a": 1}, "status": "fail"}]}]}, "code"),
])
def test_a_malformed_audit_report_is_a_data_error_naming_the_field(tmp_path, doc, field):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema": "fleetctl.audit/1", **doc}))
    with pytest.raises(DataError, match=field.replace("[", r"\[").replace("]", r"\]")):
        read_report(str(path))


def test_report_commands_say_which_field_is_wrong(tmp_path, capsys, monkeypatch):
    from fleetctl.cli import run

    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema": "fleetctl.audit/1", "nodes": [1]}))
    site = tmp_path / "site.toml"
    site.write_text('[cluster]\nname = "t"\n[[node_classes]]\nname = "c"\nnodes = "node[1-2]"\n'
                    f'[act]\nstate_dir = "{tmp_path / "act"}"\n')
    for argv in (["act", "run", "--once", "--report", str(path)], ["explain", "node1:xid.79", "--report",
                                                                      str(path), "--no-slurm"]):
        code = run([*argv, "--site", str(site)])
        err = capsys.readouterr().err
        assert code == 3 and "nodes[0]" in err and "Traceback" not in err, (argv, err)


def test_detections_of_a_valid_report_are_unchanged():
    report = audit_report({"node2": "xid.79"}, ok=["node1"], error=["node3"])
    dets = detections.from_audit_report(report)
    assert [(d.code, d.nodes, bool(d.trouble)) for d in dets] == [("xid.79", ["node2"], False),
                                                                  ("xid.scan", ["node3"], True)]


@pytest.mark.parametrize("act, key", [
    ('service_webhook = "file:///etc/passwd"', "act.service_webhook"),
    (f'service_webhook = "https://{"a" * 3000}"', "act.service_webhook"),
    ("gpu_reset_command = []", "act.gpu_reset_command"),
    ('gpu_reset_command = ["nvidia-smi", ""]', "act.gpu_reset_command"),
    ('gpu_busy_command = ["sh", "-c\\nreboot"]', "act.gpu_busy_command"),
    (f'gpu_busy_command = [{", ".join(chr(34) + "w" + chr(34) for _ in range(65))}]', "act.gpu_busy_command"),
    (f'gpu_reset_command = ["{"x" * 1025}"]', "act.gpu_reset_command"),
])
def test_hostile_ladder_settings_are_refused_by_name(tmp_path, capsys, act, key):
    """The ladder's settings reach argv and a POST: each bounded, refused with its key, nothing run."""
    from fleetctl.cli import run

    site = tmp_path / "site.toml"
    site.write_text('[cluster]\nname = "t"\n[[node_classes]]\nname = "c"\nnodes = "node[1-2]"\n'
                    f'[act]\nstate_dir = "{tmp_path / "act"}"\n{act}\n')
    for argv in (["act", "run", "--once"], ["config", "check"]):
        code = run([*argv, "--site", str(site)])
        err = capsys.readouterr().err
        assert code == 3 and key in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "act" / "actions.jsonl").exists()
