"""act's memory and guards on an in-memory Slurm: the incident history (bounded, hostile lines
skipped, compacted), a node failing twice in the window -> suspect -> service request and never
resumed, the circuit breaker in a storm, a policy in shadow mode, `spares replenish` holding
suspects, `explain NODE` showing the history. The lab test runs the same on real Slurm
(tests/integration/test_act_lab.py)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from fleetctl.act import detections, incidents
from fleetctl.act.actionlog import ActionLog
from fleetctl.act.config import ActConfig
from fleetctl.act.engine import Engine
from fleetctl.act.explain import Context, explain
from fleetctl.act.incidents import IncidentLog, holds
from fleetctl.act.policies import parse_policies
from fleetctl.errors import DataError
from fleetctl.spares import SparePool, SparesConfig
from fleetctl.spares.replenish import replenish

sys.path.insert(0, os.path.dirname(__file__))
from actfixtures import MemSlurm, audit_report  # noqa: E402

DAY = 86400.0
XID = {"name": "xid", "source": "audit", "codes": ["xid.79"], "actions": ["drain", "resume"], "cooldown_s": 0}


class Clock:
    def __init__(self, t=1_800_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


def make(tmp_path, policies=(XID,), nodes=10, dry_run=False, clock=None, **cfg):
    policies = (policies,) if isinstance(policies, dict) else policies
    slurm = MemSlurm([f"node{i}" for i in range(1, nodes + 1)])
    config = ActConfig(enabled=True, state_dir=str(tmp_path / "act"), **{"max_drain_pct": 100.0,
                                                                        "max_drains_per_hour": 100, **cfg})
    engine = Engine(slurm, parse_policies(list(policies)), config, dry_run=dry_run, clock=clock or Clock())
    return slurm, engine


def fail(engine, *nodes, remedy="reset-gpu"):
    """An Xid on each node, the check catalogue's action `remedy` (docs/checks.md)."""
    out = []
    for det in detections.from_audit_report(audit_report({n: "xid.79" for n in nodes}, action=remedy)):
        out += engine.handle(det)
    return out


def phases(decisions):
    return [(d["action"], d["phase"]) for d in decisions]


# ---------------------------------------------------------------- the incident log
def test_history_suspect_and_mtbi(tmp_path):
    log = IncidentLog(tmp_path, suspect_after=2, suspect_window_s=7 * DAY)
    t0 = 1_800_000_000.0
    log.record(time=t0 - 10 * DAY, node="n1", code="xid.79", action="drain", action_id="a1")
    log.record(time=t0 - 2 * DAY, node="n1", code="xid.79", action="drain", action_id="a2", gpu="gpu3")
    h = log.history("n1", t0)
    assert len(h.incidents) == 2 and h.in_window == 1 and not h.suspect  # the first is out of the window
    assert h.mtbi_s == pytest.approx(8 * DAY)
    log.record(time=t0 - DAY, node="n1", code="xid.48", action="swap", action_id="a3")
    h = log.history("n1", t0)
    assert h.suspect and h.in_window == 2 and h.to_dict()["mtbi_s"] == pytest.approx(4.5 * DAY)
    assert set(log.suspects(t0)) == {"n1"} and log.history("n2", t0).mtbi_s is None


def test_hostile_lines_are_skipped_and_counted(tmp_path):
    log = IncidentLog(tmp_path)
    log.record(time=100.0, node="n1", code="xid.79", action="drain", action_id="a1")
    with open(log.path, "ab") as fh:
        fh.write(b"not json\n")
        fh.write(json.dumps({"time": 5, "node": "n1;rm -rf /", "action": "drain"}).encode() + b"\n")
        fh.write(json.dumps({"time": float("nan"), "node": "n1", "action": "drain"}).encode() + b"\n")
        fh.write(json.dumps({"time": 5, "node": "n1", "action": "format-disk"}).encode() + b"\n")
        fh.write(b'{"time": 5, "node": "n1", "action": "drain", "code": "' + b"x" * 5000 + b'"}\n')
        fh.write(b"[" * 100_000 + b"\n")
        fh.write(b'{"time": 7, "node": "n1", "action": "drain"')  # a crashed writer's half line
    log.record(time=200.0, node="n1", code="xid.79", action="drain", action_id="a2")
    recs = log.records()
    assert [r["action_id"] for r in recs] == ["a1", "a2"] and log.skipped == 7


def test_a_record_that_is_not_valid_is_refused(tmp_path):
    log = IncidentLog(tmp_path)
    with pytest.raises(DataError, match="not a node name"):
        log.record(time=1.0, node="../etc", code="x", action="drain", action_id="a")
    with pytest.raises(DataError, match="not a remediation"):
        log.record(time=1.0, node="n1", code="x", action="notify", action_id="a")
    assert not log.path.exists()


def test_compaction_bounds_the_file_and_keeps_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(incidents, "MAX_BYTES", 20_000)
    monkeypatch.setattr(incidents, "MAX_RECORDS", 50)
    log = IncidentLog(tmp_path)
    for i in range(400):
        log.record(time=float(i), node=f"n{i % 7}", code="xid.79", action="drain", action_id=f"a{i}")
    assert log.path.stat().st_size <= 20_000 + 200
    recs = log.records()
    assert len(recs) <= 400 and recs[-1]["action_id"] == "a399"
    assert [r["time"] for r in recs] == sorted(r["time"] for r in recs)


# ---------------------------------------------------------------- the engine
def test_every_remediation_is_remembered(tmp_path):
    slurm, engine = make(tmp_path)
    assert phases(fail(engine, "node2")) == [("drain", "done"), ("resume", "done")]
    [rec] = engine.incidents.records()
    assert rec["node"] == "node2" and rec["action"] == "drain" and rec["code"] == "xid.79"
    assert rec["gpu"] == "0000:1b:00" and rec["source"] == "audit"


def test_the_same_node_failing_twice_is_suspect_gets_a_ticket_and_is_not_resumed(tmp_path):
    clock = Clock()
    slurm, engine = make(tmp_path, clock=clock)
    assert phases(fail(engine, "node3")) == [("drain", "done"), ("resume", "done")]  # first incident
    assert not slurm.node_map["node3"].flags
    clock.t += 8 * DAY  # out of the 7-day window: not suspect
    assert phases(fail(engine, "node3")) == [("drain", "done"), ("resume", "done")]
    clock.t += DAY
    decisions = fail(engine, "node3")  # the second within 7 days: suspect -> service request, no resume
    assert phases(decisions) == [("drain", "done"), ("resume", "refused"), ("service-request", "done")]
    assert "suspect" in decisions[1]["why"] and slurm.node_map["node3"].flags == ["DRAIN"]
    ticket = json.loads(open(decisions[2]["result"]["ticket"]).read())
    assert ticket["schema"] == "fleetctl.ticket/1" and ticket["node"] == "node3"
    assert ticket["history"]["suspect"] and ticket["history"]["count"] == 3
    assert ticket["history"]["mtbi_s"] == pytest.approx(4.5 * DAY, abs=1)
    assert ticket["detection"]["code"] == "xid.79" and len(ticket["decisions"]) >= 4
    # the same incident in a later pass (cool-down 0): still drained, no second ticket
    clock.t += 60
    assert phases(fail(engine, "node3")) == [("drain", "refused")]
    assert len(os.listdir(tmp_path / "act" / "tickets")) == 1
    # back in service by hand, then failing again: a new incident, a new ticket
    slurm.node_map["node3"].flags = []
    clock.t += 60
    assert phases(fail(engine, "node3")) == [("drain", "done"), ("service-request", "done")]
    assert len(os.listdir(tmp_path / "act" / "tickets")) == 2
    # an other node is judged on its own history
    assert phases(fail(engine, "node4")) == [("drain", "done"), ("resume", "done")]


def test_a_storm_opens_the_breaker_fleet_wide(tmp_path):
    slurm, engine = make(tmp_path, {**XID, "actions": ["drain", "notify"], "webhook": "http://127.0.0.1:9/x"},
                         breaker_pct=10.0)
    out = fail(engine, "node1", "node2", "node3")  # 3 of 10: the third decision sees 2 drained
    assert [d["phase"] for d in out if d["action"] == "drain"] == ["done", "done", "done"]
    out = fail(engine, "node4")  # 3 of 10 (30 %) in remediation: paused
    [drain] = [d for d in out if d["action"] == "drain"]
    assert drain["phase"] == "refused" and drain["why"].startswith("circuit breaker open: 3 of 10 nodes")
    assert not slurm.node_map["node4"].flags
    assert [d["phase"] for d in out if d["action"] == "notify"] == ["failed"]  # notices go on (no server)
    slurm.resume(["node1", "node2"])  # repaired: 1 of 10 left, the breaker closes
    assert phases([d for d in fail(engine, "node4") if d["action"] == "drain"]) == [("drain", "done")]


def test_one_node_of_a_small_partition_is_not_a_storm(tmp_path):
    slurm, engine = make(tmp_path, nodes=4, breaker_pct=10.0)
    fail(engine, "node1")
    assert phases(fail(engine, "node2"))[0] == ("drain", "done")


def test_a_shadow_policy_logs_what_it_would_do_while_the_others_act(tmp_path):
    shadow = {"name": "try-reboot", "source": "audit", "codes": ["xid.*"], "actions": ["drain"], "shadow": True}
    slurm, engine = make(tmp_path, (shadow, {**XID, "actions": ["drain"]}))
    out = fail(engine, "node5")
    by_policy = {d["policy"]: d for d in out}
    assert by_policy["try-reboot"]["phase"] == "dry-run"
    assert "shadow: policy try-reboot is in shadow mode" in by_policy["try-reboot"]["why"]
    assert by_policy["xid"]["phase"] == "done" and slurm.node_map["node5"].flags == ["DRAIN"]
    assert [r["action_id"] for r in engine.incidents.records()] == [by_policy["xid"]["id"]]


# ---------------------------------------------------------------- replenish and explain
def test_replenish_holds_suspects_whatever_the_audit_says(tmp_path):
    clock = Clock()
    slurm, engine = make(tmp_path, {**XID, "actions": ["drain"]}, clock=clock)
    fail(engine, "node1", "node2")
    slurm.resume(["node1", "node2"])
    clock.t += 3600
    fail(engine, "node1", "node2", "node3")  # node1, node2: the second (suspect); node3's first
    assert all(slurm.node_map[n].flags == ["DRAIN"] for n in ("node1", "node2", "node3"))
    hold = holds(engine.config, clock.t)
    assert set(hold) == {"node1", "node2"} and "held for its service request" in hold["node1"]
    pool = SparePool(slurm, SparesConfig(floor=0, state_dir=str(tmp_path / "spares")))
    audited = []
    out = replenish(pool, slurm, lambda nodes: audited.extend(nodes) or audit_report({}, ok=nodes),
                    hold=hold)
    assert out.held.keys() == {"node1", "node2"} and audited == ["node3"] and out.resumed == ["node3"]
    assert slurm.node_map["node2"].flags == ["DRAIN"] and slurm.node_map["node3"].flags == []


def test_explain_node_shows_the_history(tmp_path):
    clock = Clock()
    slurm, engine = make(tmp_path, {**XID, "actions": ["drain"]}, clock=clock)
    fail(engine, "node7")
    slurm.resume(["node7"])
    clock.t += 7200
    fail(engine, "node7")
    ctx = Context(backend=slurm, log=ActionLog(tmp_path / "act"),
                  incidents=IncidentLog(tmp_path / "act", suspect_window_s=30 * 365 * DAY))
    out = explain("node7", ctx)
    assert out["history"]["count"] == 2 and out["history"]["suspect"]
    assert out["history"]["mtbi_s"] == pytest.approx(7200, abs=1)
    assert any("mean time between incidents 2.0 h" in line for line in out["why"])
    assert "suspect" in out["text"]


def test_an_unreadable_history_remediates_but_resumes_nothing(tmp_path):
    slurm, engine = make(tmp_path)
    engine.incidents.path.parent.mkdir(parents=True)
    engine.incidents.path.mkdir()  # a directory where the log should be
    decisions = fail(engine, "node6")
    assert phases(decisions) == [("drain", "done"), ("resume", "refused")]
    assert "incident history not read" in decisions[1]["why"] and slurm.node_map["node6"].flags == ["DRAIN"]


# ---------------------------------------------------------------- the ladder
LADDER = {"name": "xid-ladder", "source": "audit", "codes": ["xid.79"], "cooldown_s": 0,
          "actions": ["drain", "reset-gpu", "reboot", "resume", "service-request"]}


def ladder(tmp_path, *, busy=(), reset=("true",), reaudit_fails=(), **kw):
    """An engine whose ladder runs real commands through the local transport (this machine stands in
    for the node) and re-audits from a report of the nodes named failing."""
    from fleetctl.act.remedy import Remediator
    from fleetctl.fanout.base import FanoutOptions
    from fleetctl.fanout.registry import get_transport

    slurm, engine = make(tmp_path, LADDER, **kw)
    seen = []

    def audit(node, since):
        seen.append((node, since))
        return audit_report({node: "xid.79"} if node in reaudit_fails else {}, ok=() if node in reaudit_fails else (node,))

    busy_cmd = ("echo", *busy) if busy else ("true", "{gpu}")
    engine.remediator = Remediator(lambda: get_transport("local", FanoutOptions()), audit, busy_cmd,
                                   tuple(reset), 30.0)
    return slurm, engine, seen


def test_a_gpu_reset_that_heals_resumes_the_node(tmp_path):
    slurm, engine, seen = ladder(tmp_path)
    decisions = fail(engine, "node2")
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "done"), ("resume", "done")]
    reset = decisions[1]["result"]
    assert reset["gpu"] == "0000:1b:00.0" and reset["reaudit"]["status"] == "ok"
    assert seen == [("node2", reset["reset_at"])]  # the re-audit counts what came after the reset
    assert not slurm.node_map["node2"].flags
    assert len(engine.incidents.records()) == 1  # one incident for the detection, not one per rung


def test_a_busy_gpu_is_not_reset_the_node_is_rebooted_through_slurm(tmp_path):
    slurm, engine, _ = ladder(tmp_path, busy=("4242",))
    decisions = fail(engine, "node2")
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "failed"), ("reboot", "done"),
                                 ("resume", "refused")]
    assert "runs 1 process(es) (4242): not reset" in decisions[1]["why"]
    assert "Slurm resumes it after its reboot" in decisions[3]["why"]
    assert ("reboot", ("node2",)) in slurm.calls and "REBOOT_REQUESTED" in slurm.node_map["node2"].flags
    assert slurm.node_map["node2"].reason.startswith(f"fleetctl:xid.79 {decisions[2]['id']} reboot")
    # undo withdraws the reboot Slurm has not issued yet
    from fleetctl.act.undo import undo

    assert undo(engine.log, decisions[2]["id"], slurm)["phase"] == "undone"
    assert "REBOOT_REQUESTED" not in slurm.node_map["node2"].flags


def test_a_reset_whose_reaudit_fails_climbs_to_the_reboot(tmp_path):
    slurm, engine, _ = ladder(tmp_path, reaudit_fails=("node2",))
    decisions = fail(engine, "node2")
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "done"), ("reboot", "done"),
                                 ("resume", "refused")]
    assert decisions[1]["result"]["reaudit"] == {"status": "fail", "failing": ["xid.79"]}


def test_a_failed_reset_without_a_reboot_rung_goes_to_a_service_request(tmp_path):
    slurm, engine, _ = ladder(tmp_path, reset=("false",))
    engine.policies = parse_policies([{**LADDER, "actions": ["drain", "reset-gpu", "resume", "service-request"]}])
    decisions = fail(engine, "node2")
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "failed"), ("resume", "refused"),
                                 ("service-request", "done")]
    assert "the GPU reset on node2 (false) did not succeed" in decisions[1]["why"]
    assert slurm.node_map["node2"].flags == ["DRAIN"]


def test_the_ladder_waits_for_jobs_and_skips_straight_to_a_ticket_for_a_suspect(tmp_path):
    clock = Clock()
    slurm, engine, _ = ladder(tmp_path, clock=clock)
    slurm.run_job("7", ["node2"])  # no swap in this policy: the job stays
    decisions = fail(engine, "node2")
    assert phases(decisions)[:2] == [("drain", "done"), ("reset-gpu", "refused")]
    assert "still runs job(s) 7" in decisions[1]["why"]
    slurm.job_map.clear()
    slurm.node_map["node2"].state, slurm.node_map["node2"].flags = "IDLE", []
    clock.t += 60
    decisions = fail(engine, "node2")  # the second incident: suspect -> no rungs, a ticket
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "refused"), ("reboot", "refused"),
                                 ("resume", "refused"), ("service-request", "done")]
    assert all(d["why"].startswith("suspect: node2") for d in decisions[1:4])


def test_the_gpu_argument_is_checked_before_any_argv(tmp_path):
    from fleetctl.act.remedy import gpu_argument
    from fleetctl.errors import RemediationError

    assert gpu_argument("gpu3") == "3" and gpu_argument("0000:1B:00") == "0000:1B:00.0"
    assert gpu_argument("00000000:1b:00.0") == "00000000:1b:00.0"
    for bad in ("", "gpu1,gpu2", "-i 0; reboot", "mlx5_0", "gpu1234", "$(id)"):
        with pytest.raises(RemediationError, match="names no single GPU"):
            gpu_argument(bad)


def test_the_catalogue_chooses_the_first_rung(tmp_path):
    slurm, engine, _ = ladder(tmp_path)
    decisions = fail(engine, "node2", remedy="reboot")  # Xid 79: a reset would not clear it
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "refused"), ("reboot", "done"),
                                 ("resume", "refused")]
    assert "the check catalogue's action for xid.79 is reboot: reset-gpu would not clear it" in decisions[1]["why"]
    slurm, engine, _ = ladder(tmp_path / "hw")
    decisions = fail(engine, "node3", remedy="inspect-hardware")  # a person's, or a vendor's
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "refused"), ("reboot", "refused"),
                                 ("resume", "refused"), ("service-request", "done")]


def test_a_dry_runs_planned_drains_count_for_the_breaker(tmp_path):
    slurm, engine = make(tmp_path, {**XID, "actions": ["drain"]}, dry_run=True, breaker_pct=10.0)
    out = fail(engine, "node1", "node2", "node3", "node4")
    assert [d["phase"] for d in out] == ["dry-run", "dry-run", "dry-run", "refused"]
    assert out[3]["why"].startswith("circuit breaker open: 3 of 10 nodes") and not slurm.calls


def test_fleetctls_own_trouble_stops_the_ladder_and_escalates_nothing(tmp_path):
    """A GPU check that does not end, or a re-audit that cannot reach the node, is fleetctl's trouble:
    no reboot, no resume, no ticket; the node stays drained for a person."""
    from fleetctl.act.remedy import Remediator
    from fleetctl.fanout.base import FanoutOptions
    from fleetctl.fanout.registry import get_transport

    slurm, engine, _ = ladder(tmp_path)
    engine.remediator = Remediator(lambda: get_transport("local", FanoutOptions()), None, ("sleep", "5"),
                                   ("true",), 0.5)
    decisions = fail(engine, "node2")
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "failed"), ("reboot", "refused"),
                                 ("resume", "refused")]
    assert "could not be run (timeout)" in decisions[1]["why"]
    assert all(d["why"].startswith("the ladder stopped: fleetctl could not run") for d in decisions[2:])
    assert slurm.node_map["node2"].flags == ["DRAIN"] and ("reboot", ("node2",)) not in slurm.calls

    slurm, engine, _ = ladder(tmp_path / "unreached")
    engine.remediator.audit = lambda node, since: {"nodes": [{"node": node, "transport": "unreachable",
                                                              "error": "ssh: connect timed out"}]}
    decisions = fail(engine, "node3")
    assert phases(decisions) == [("drain", "done"), ("reset-gpu", "failed"), ("reboot", "refused"),
                                 ("resume", "refused")]
    assert "the re-audit could not check node3" in decisions[1]["why"]


def test_the_history_is_read_again_only_when_the_file_changed(tmp_path, monkeypatch):
    log = IncidentLog(tmp_path)
    log.record(time=1.0, node="n1", code="xid.79", action="drain", action_id="a1")
    reads = []
    real = log._read
    monkeypatch.setattr(log, "_read", lambda: reads.append(1) or real())
    assert len(log.records()) == 1 and len(log.records()) == 1 and len(reads) == 1
    other = IncidentLog(tmp_path)  # another writer (act run) appends
    other.record(time=2.0, node="n2", code="xid.48", action="drain", action_id="a2")
    assert [r["action_id"] for r in log.records()] == ["a1", "a2"] and len(reads) == 2


def test_one_pass_reads_node_states_once_plus_once_per_change(tmp_path):
    slurm, engine = make(tmp_path, {**XID, "actions": ["drain", "notify"], "webhook": "http://127.0.0.1:9/x"},
                         nodes=40, breaker_pct=10.0)
    reads = []
    real = slurm.nodes
    slurm.nodes = lambda nodes=None: (reads.append(nodes), real(nodes))[1]
    with engine.one_pass():
        out = fail(engine, *[f"node{i}" for i in range(1, 21)])  # a storm: 20 of 40 nodes
    drains = [d for d in out if d["action"] == "drain"]
    assert [d["phase"] for d in drains].count("done") == 5  # the breaker opens past 10 % (5 of 40)
    whole = [r for r in reads if r is None]
    assert len(whole) == 5 + 1, len(whole)  # one read, then one after each drain (it changed them)
    reads.clear()
    fail(engine, "node30")  # outside a pass: read anew
    assert [r for r in reads if r is None]
