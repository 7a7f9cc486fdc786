"""One way each: the status ranking (payload and controller), "what got worse" (epilog and audit
history), and the payload builder (node checks, probe agent, path tracer)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleetctl.audit.export import changes_since
from fleetctl.audit.report import build_report
from fleetctl.audit.runner import NodeOutcome
from fleetctl.checks import changes, compare
from fleetctl.checks.payload.common import RANK, STATUSES, worst_status
from fleetctl.fanout.payload import NODE_FILL, bundle, with_config, with_node_fill


def r(code, status, subject="", message="m"):
    return {"code": code, "status": status, "subject": subject, "message": message, "action": "none",
            "evidence": {}}


def test_one_ranking_skipped_no_worse_than_ok():
    assert RANK == {"ok": 0, "skipped": 0, "warn": 1, "error": 2, "fail": 3}
    assert list(RANK) == list(STATUSES)
    assert worst_status(["ok", "warn", "error"]) == "error" and worst_status([]) == "ok"


def test_compare_keys_gpu_results_by_code_and_others_by_subject():
    before = {"results": [r("gpu.ecc", "fail", "gpu1"), r("nic.link", "ok", "eth0"), r("host.disk", "warn")]}
    after = {"results": [r("gpu.ecc", "fail", "gpu1,gpu3"), r("nic.link", "fail", "eth0"),
                         r("nic.link", "fail", "eth1"), r("host.disk", "ok")]}
    worse, resolved = compare(before, after)
    assert [(p and p["status"], n["code"], n["subject"]) for p, n in worse] == [
        ("ok", "nic.link", "eth0"), (None, "nic.link", "eth1")]  # gpu.ecc: still fail, not worse
    assert [x["code"] for x in resolved] == ["host.disk"]


def test_skipped_to_ok_is_neither_worse_nor_resolved():
    worse, resolved = compare({"results": [r("a", "skipped")]}, {"results": [r("a", "ok")]})
    assert worse == [] and resolved == []
    assert compare({"results": [r("a", "ok")]}, {"results": [r("a", "skipped")]}) == ([], [])


def test_epilog_changes_and_history_agree(tmp_path):
    before = {"results": [r("host.disk", "warn"), r("nic.link", "ok", "eth0")]}
    after_results = [r("host.disk", "fail"), r("nic.link", "warn", "eth0"), r("xid.79", "fail")]
    epilog = changes(before, {"results": after_results})
    assert sorted(c["code"] for c in epilog) == ["change.host.disk", "change.nic.link", "change.xid.79"]

    doc = {"status": "fail", "action": "none", "level": "quick", "complete": True, "results": after_results}
    report = build_report(_Site(), {"n1": NodeOutcome("n1", doc=doc)}, level="quick", started=0.0)
    previous = {"schema": "fleetctl.audit/1", "nodes": [{"node": "n1", "status": "warn",
                                                           "results": before["results"]}]}
    ch = changes_since(previous, report)["nodes"]["n1"]
    # history lists what did not pass then and does not pass now ("new"), so a warn -> fail is a
    # status move, not a new finding
    assert ch == {"status": ["warn", "fail"], "new": ["nic.link/eth0", "xid.79"], "resolved": []}


class _Site:
    name = "t"
    source = "<test>"

    def node_class(self, _node):
        return None

    checks: dict = {}
    thresholds: dict = {}


def test_bundle_joins_modules_without_their_local_lines(tmp_path, monkeypatch):
    pkg = tmp_path / "h9pay"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from __future__ import annotations\nA = 1\n")
    (pkg / "b.py").write_text("from __future__ import annotations\n"
                              "from h9pay.a import A  # payload-local\nB = A + 1\n"
                              "_EMBEDDED_CONFIG = None\nimport json, sys\n"
                              "print(json.dumps({'b': B, 'cfg': json.loads(_EMBEDDED_CONFIG), 'argv': sys.argv[1:]}))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    source = with_config(bundle("h9pay", ("a", "b"), "test payload"), {"key": "s3cret"})
    assert source.count("from __future__ import annotations") == 1 and "payload-local" not in source
    filled = with_node_fill(source)
    assert filled.index(NODE_FILL) > filled.index("from __future__")
    out = subprocess.run([sys.executable, "-", '{"node": "{node}"}'], input=filled, text=True,
                         capture_output=True, env={"FLEETCTL_NODE": "gpu7"}, check=True)
    assert json.loads(out.stdout) == {"b": 2, "cfg": {"key": "s3cret"}, "argv": ['{"node": "gpu7"}']}


def test_bundle_refuses_a_payload_that_imports_fleetctl(tmp_path, monkeypatch):
    pkg = tmp_path / "h9bad"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from fleetctl.errors import UsageError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AssertionError, match="imports fleetctl"):
        bundle("h9bad", ("a",), "test payload")
    with pytest.raises(AssertionError, match="_EMBEDDED_CONFIG"):
        with_config("print(1)\n", {})


def test_the_three_payloads_are_built_one_way():
    from fleetctl.audit.runner import payload_source
    from fleetctl.mesh import agent, trace_agent
    from fleetctl.meshrun.setup import payload as _payload

    for text in (payload_source(), _payload(agent, {"x": 1}), _payload(trace_agent, {"x": 1})):
        compile(text, "payload", "exec")
        assert text.startswith("# fleetctl ") and "generated, do not edit" in text.splitlines()[0]
