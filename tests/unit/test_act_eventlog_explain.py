"""The lens event reader (bounded, bad lines skipped, resumable offsets) and `explain` accounts of an
Xid finding, a link event and a drained node, built from the evidence and the action log."""

from __future__ import annotations

import json
import os
import sys

import pytest

from fleetctl.act import detections, eventlog
from fleetctl.act.actionlog import ActionLog
from fleetctl.act.config import ActConfig
from fleetctl.act.engine import Engine
from fleetctl.act.explain import Context, explain
from fleetctl.act.policies import parse_policies
from fleetctl.errors import UsageError

sys.path.insert(0, os.path.dirname(__file__))
from actfixtures import MemSlurm, audit_report, lens_event  # noqa: E402


def test_reader_skips_bad_lines_and_resumes(tmp_path):
    path = tmp_path / "events.jsonl"
    good = lens_event()
    lines = [json.dumps(good), "not json", json.dumps({"id": "x"}), "x" * (eventlog.MAX_LINE_BYTES + 5),
             json.dumps({**good, "confidence": 7}), json.dumps({**good, "state": "closed", "kind": "close"})]
    path.write_text("\n".join(lines) + "\n" + json.dumps(lens_event("ev-20261201T070001-0002"))[:40])
    got = eventlog.read_from(path)
    assert [r["state"] for r in got.records] == ["open", "closed"] and got.skipped == 4
    with open(path, "a") as fh:  # the partial last line is completed later
        fh.write(json.dumps(lens_event("ev-20261201T070001-0002"))[40:] + "\n")
    more = eventlog.read_from(path, got.offset)
    assert [r["id"] for r in more.records] == ["ev-20261201T070001-0002"]
    view, skipped = eventlog.current(path)
    assert view[good["id"]]["state"] == "closed" and skipped == 4
    assert eventlog.read_from(tmp_path / "missing").records == []


@pytest.fixture
def world(tmp_path):
    slurm = MemSlurm(["node1", "node2", "node3", "node4"])
    slurm.run_job("12", ["node1", "node2"])
    config = ActConfig(enabled=True, state_dir=str(tmp_path / "act"), max_drain_pct=50.0)
    policies = parse_policies([
        {"name": "xid", "codes": ["xid.79"], "actions": ["drain"]},
        {"name": "link", "source": "lens", "element_types": ["link"], "actions": ["snapshot"]}])
    engine = Engine(slurm, policies, config, dry_run=False, registry=str(tmp_path / "reg"))
    report = audit_report({"node2": "xid.79"})
    for det in detections.from_audit_report(report):
        engine.handle(det)
    events = tmp_path / "events.jsonl"
    ev = lens_event(eid="leaf1--spine2", jobs=[{"job_id": "12", "user": "alice", "nodes": "node[1-2]"}])
    events.write_text(json.dumps(ev) + "\n")
    engine.handle(detections.from_lens_event(ev))
    return Context(backend=slurm, log=ActionLog(config.state_dir), events_path=str(events), audit=report)


def test_explain_an_xid_finding(world):
    out = explain("node2:xid.79", world)
    assert out["what"].startswith("GPU error Xid 79: GPU has fallen off the bus")
    assert out["where"] == "node2, 0000:1b:00"
    assert out["how_sure"].startswith("certain")
    assert any("NVRM: Xid (PCI:0000:1b:00): 79" in line for line in out["why"])
    assert [a["action"] + " " + a["phase"] for a in out["fleetctl"]] == ["drain done"]
    assert out["next"].startswith("reboot the node; if the same Xid returns")
    assert "What: GPU error Xid 79" in out["text"] and "Next: reboot the node" in out["text"]


def test_explain_a_link_event(world):
    out = explain("ev-20261201T070000-0001", world)
    assert out["what"] == "packet loss of 4.8 % on link leaf1--spine2"
    assert out["since"].startswith("since 2026-12-01T07:00:00Z") and "still open" in out["since"]
    assert out["how_sure"] == "critical, confidence 0.97"
    assert out["jobs"] == [{"job_id": "12", "user": "alice", "nodes": "node[1-2]"}]
    assert out["fleetctl"][0]["action"] == "snapshot" and out["fleetctl"][0]["phase"] == "refused"
    assert "leaf1--spine2" in out["next"] and "transceivers" in out["next"]


def test_explain_a_drained_node(world):
    out = explain("node2", world)
    drain = [a for a in out["fleetctl"] if a["action"] == "drain"][0]
    assert out["what"] == f"node2 is drained by fleetctl for xid.79 (action {drain['id']})"
    assert out["jobs"][0]["job_id"] == "12"
    assert "last audit: fail" in out["why"] and "spares replenish" in out["next"]
    world.backend.operator_drain("node4", "psu swap")
    other = explain("node4", world)
    assert other["what"] == "node4 is drained by someone else: 'psu swap'"


def test_explain_a_job_and_bad_targets(world):
    out = explain("12", world)
    assert "xid.79" in out["what"] or "link.loss" in out["what"]
    assert "node2" in " ".join(out["why"])
    with pytest.raises(UsageError, match="no finding gpu.count on node2"):
        explain("node2:gpu.count", world)
    with pytest.raises(UsageError, match="neither a finding"):
        explain("../etc", world)
    with pytest.raises(UsageError, match="no event"):
        explain("ev-20261201T000000-9999", world)


def test_reader_follows_the_log_across_a_rotation(tmp_path):
    """lens rotates events.jsonl to events.jsonl.1: the records appended to the old file after
    act's last pass are still read, once, before the new file's."""
    from fleetctl.lens.eventlog import EventLog

    path = tmp_path / "events.jsonl"
    log = EventLog(path, max_bytes=1 << 20)
    log.append(lens_event("ev-20261201T070001-0001"))
    first = eventlog.read_from(path)
    assert [r["id"] for r in first.records] == ["ev-20261201T070001-0001"] and first.ident
    log.append(lens_event("ev-20261201T070001-0002"))  # after act's pass, before the rotation
    os.replace(path, tmp_path / "events.jsonl.1")
    log.append(lens_event("ev-20261201T070001-0003"))
    got = eventlog.read_from(path, first.offset, first.ident)
    assert [r["id"] for r in got.records] == ["ev-20261201T070001-0002", "ev-20261201T070001-0003"]
    again = eventlog.read_from(path, got.offset, got.ident)
    assert again.records == [] and again.skipped == 0


def test_since_is_an_iso_time_whatever_the_evidence_holds():
    from fleetctl.act.explain import _since_evidence

    assert _since_evidence({"evidence": {"first_seen": 1796253900.48}}) == "since 2026-12-02T23:25:00Z"
    assert _since_evidence({"evidence": {"since": "2026-12-01T07:00:01Z"}}) == "since 2026-12-01T07:00:01Z"
    assert _since_evidence({"evidence": {"time": True, "first": 3}}) == "since 3"  # not an epoch: as it is
