"""Properties over the hostile inputs of act and snapshot (issue 20), not only "no exception":

- any registry entry, manifest, STATUS, LATEST or REQUEST: the readers answer or raise
  SnapshotError, never another exception;
- retention never removes the newest snapshot that verifies, nor the one LATEST names;
- any audit report: act drains only nodes with a valid failing result, and raises nothing but
  DataError on a malformed report;
- whatever goes wrong with a job's snapshot, the drain that follows still happens;
- any bytes in the action log: later records stay readable and every record read is well formed.

Bounded for CI by tests/support/fuzz.py (FLEETCTL_FUZZ=N runs N times as many examples).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetctl.act import detections
from fleetctl.act.actionlog import ActionLog, well_formed
from fleetctl.errors import DataError
from fleetctl.snapshot import SnapshotError, catalog, layout, manifest, registry
from tests.support.fuzz import fuzz_settings

sys.path.insert(0, os.path.dirname(__file__))
from actfixtures import audit_report  # noqa: E402
from snapfixtures import flip_byte, make_snapshot  # noqa: E402
from test_act_engine import XID, make  # noqa: E402

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=30),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=5),
                    max_leaves=30)
TEXT = st.one_of(st.binary(max_size=300), JSON.map(lambda v: json.dumps(v).encode()),
                 st.sampled_from([b"[" * 70_000, b"{" * 3000, b"step_1\n", b"step_99999999999999999", b"\xff"]))


@fuzz_settings(150)
@given(entry=TEXT, manifest_text=TEXT, status=TEXT, latest=TEXT, request=TEXT)
def test_any_snapshot_file_is_read_or_refused(entry, manifest_text, status, latest, request):
    with tempfile.TemporaryDirectory() as tmp:
        reg, root = Path(tmp) / "reg", Path(tmp) / "snaps"
        reg.mkdir()
        path = make_snapshot(root, 1, world=1, size=16)
        (reg / "9.json").write_bytes(entry)
        (path / manifest.MANIFEST).write_bytes(manifest_text)
        (root / layout.STATUS).write_bytes(status)
        (root / layout.LATEST).write_bytes(latest)
        (root / layout.REQUEST).write_bytes(request)
        for read in (lambda: registry.lookup("9", str(reg)), lambda: registry.entries(str(reg)),
                     lambda: layout.read_status(root), lambda: layout.read_latest(root),
                     lambda: catalog.describe(root), lambda: catalog.choose(root)):
            try:
                read()
            except SnapshotError:
                pass
        assert not manifest.verify(path).ok or manifest_text  # verify never raises
        assert layout.take_request(root)["reason"] in layout.REQUEST_REASONS


@fuzz_settings(60, deadline_s=5.0)
@given(steps=st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True),
       corrupt=st.sets(st.integers(0, 5)), latest=st.one_of(st.none(), st.integers(0, 30), st.just(-1)),
       keep=st.integers(1, 3))
def test_retention_never_removes_the_newest_good_snapshot_or_latest(steps, corrupt, latest, keep):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, step in enumerate(sorted(steps)):
            path = make_snapshot(root, step, world=1, size=16, latest=False)
            if i in corrupt:
                flip_byte(path / "__0_0.distcp")
        if latest == -1:
            (root / layout.LATEST).write_text("garbage")
        elif latest is not None:
            layout.write_latest(root, latest)
        good = catalog.choose(root).step
        doomed = {e.step for e in catalog.prune_plan(root, keep)}
        assert good is None or good not in doomed
        assert latest is None or latest not in doomed
        catalog.prune(root, keep)
        assert catalog.choose(root).step == good


STATUSES = st.sampled_from(["fail", "warn", "ok", "error", "skipped", "FAIL", None, 3])
RESULT = st.fixed_dictionaries({"code": st.sampled_from(["xid.79", "xid.48", "gpu.count", None, 7]),
                                "status": STATUSES}, optional={"message": st.text(max_size=20),
                                                              "subject": JSON, "evidence": JSON})
NODE = st.fixed_dictionaries({"node": st.sampled_from(["node1", "node2", "node3", "../x", "", None, 5])},
                             optional={"results": st.one_of(st.lists(RESULT | JSON, max_size=3), JSON),
                                       "transport": st.sampled_from(["ok", "timeout", None, 1]),
                                       "error": st.one_of(st.sampled_from(["", None]), JSON),
                                       "status": STATUSES})


def _deserves_a_drain(entry) -> bool:
    return (isinstance(entry, dict) and entry.get("node") in ("node1", "node2", "node3")
            and entry.get("transport", "ok") == "ok" and not entry.get("error")
            and isinstance(entry.get("results"), list)
            and any(isinstance(r, dict) and r.get("status") == "fail" and r.get("code") in ("xid.79", "xid.48")
                    for r in entry["results"]))


@fuzz_settings(150, deadline_s=5.0)
@given(nodes=st.one_of(st.lists(NODE | JSON, max_size=4), JSON), fleet=st.one_of(st.lists(JSON, max_size=2), JSON))
def test_act_drains_only_nodes_with_a_valid_failing_result(nodes, fleet):
    report = {"schema": "fleetctl.audit/1", "nodes": nodes, "fleet": fleet}
    try:
        detections.check_report(report)
    except DataError:
        return  # refused whole, with the field named: nothing decided on it
    with tempfile.TemporaryDirectory() as tmp:
        slurm, engine = make(Path(tmp), policies=({**XID, "actions": ["drain"]},), max_drain_pct=100.0,
                             max_drains_per_hour=100)
        for det in detections.from_audit_report(report):
            engine.handle(det)
        drained = {n for n, s in slurm.node_map.items() if s.flags == ["DRAIN"]}
        allowed = {e["node"] for e in nodes if _deserves_a_drain(e)}
        assert drained <= allowed


SNAPSHOT_TROUBLE = st.sampled_from(["no-entry", "garbage-entry", "deep-entry", "missing-dir", "file-dir",
                                    "request-is-dir", "deep-manifest", "garbage-latest", "timeout"])


@fuzz_settings(40, deadline_s=10.0)
@given(trouble=st.lists(SNAPSHOT_TROUBLE, min_size=1, max_size=3))
def test_whatever_goes_wrong_with_snapshots_the_drain_happens(trouble):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        slurm, engine = make(tmp, policies=({**XID, "actions": ["snapshot", "drain"]},),
                             snapshot_timeout_s=0.2)
        reg = tmp / "registry"
        reg.mkdir()
        for i, kind in enumerate(trouble):
            job = str(100 + i)
            slurm.run_job(job, ["node2"])
            root = tmp / f"s{i}"
            make_snapshot(root, 1, world=1, size=16)
            entry = {"job_id": job, "directory": str(root), "world_size": 1}
            if kind == "missing-dir":
                shutil.rmtree(root)
            elif kind == "file-dir":
                shutil.rmtree(root)
                root.write_text("x")
            elif kind == "request-is-dir":
                (root / layout.REQUEST).mkdir()
            elif kind == "deep-manifest":
                (root / "step_1" / manifest.MANIFEST).write_text("[" * 70_000)
            elif kind == "garbage-latest":
                (root / layout.LATEST).write_bytes(b"\xff\x00")
            text = {"no-entry": None, "garbage-entry": "\x00{", "deep-entry": "[" * 70_000}.get(kind, json.dumps(entry))
            if text is not None:
                (reg / f"{job}.json").write_text(text)
        decisions = engine.handle(detections.from_audit_report(audit_report({"node2": "xid.79"}))[0])
        assert [d["phase"] for d in decisions if d["action"] == "drain"] == ["done"]
        assert slurm.node_map["node2"].flags == ["DRAIN"]


@fuzz_settings(100)
@given(junk=st.lists(st.binary(max_size=200), max_size=5))
def test_junk_in_the_action_log_never_hides_later_records(junk):
    with tempfile.TemporaryDirectory() as tmp:
        log = ActionLog(tmp)
        log.append({"id": "a1", "policy": "p", "action": "drain", "phase": "pending"})
        for chunk in junk:
            with open(log.path, "ab") as fh:
                fh.write(chunk)
            log.append({"id": "a2", "policy": "p", "action": "drain", "phase": "done"})
        current = log.current()
        assert current["a1"]["phase"] == "pending"
        assert all(well_formed(r) for r in log.records())
        if junk:
            assert current["a2"]["history"] == ["done"] * len(junk)
