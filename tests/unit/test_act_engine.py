"""The act engine on an in-memory Slurm: policies, refusals (trouble, confidence, cool-down, an
operator's drain, the budget), the pending -> done order of the action log, a crash between the two,
recovery, undo, and the whole Xid -> drain -> swap path with a spare pool."""

from __future__ import annotations

import json
import os
import sys

import pytest

from fleetctl.act import detections
from fleetctl.act.actionlog import ActionLog
from fleetctl.act.config import ActConfig
from fleetctl.act.engine import Engine
from fleetctl.act.policies import parse_policies
from fleetctl.act.undo import undo
from fleetctl.errors import ConfigError, UsageError
from fleetctl.spares import SparePool, SparesConfig
from tests.support.crash import CRASH_EXIT, crash_at

sys.path.insert(0, os.path.dirname(__file__))
from actfixtures import MemSlurm, audit_report, lens_event  # noqa: E402

XID = {"name": "xid", "source": "audit", "codes": ["xid.79", "xid.48"], "actions": ["swap", "drain", "snapshot"],
       "cooldown_s": 600}


def make(tmp_path, policies=(XID,), nodes=("node1", "node2", "node3", "node4"), dry_run=False, spares=(),
         **cfg):
    slurm = MemSlurm(list(nodes), drain_file=tmp_path / "drains")
    config = ActConfig(enabled=True, state_dir=str(tmp_path / "act"), **{"max_drain_pct": 50.0, **cfg})
    pool = SparePool(slurm, SparesConfig(floor=1, state_dir=str(tmp_path / "spares")))
    if spares:
        slurm.res["fleetctl-spares"] = list(spares)
    engine = Engine(slurm, parse_policies(list(policies)), config, pool=pool, dry_run=dry_run,
                    registry=str(tmp_path / "registry"))
    return slurm, engine


def handle_report(engine, report):
    out = []
    for det in detections.from_audit_report(report):
        out += engine.handle(det)
    return out


def phases(decisions):
    return [(d["action"], d["phase"]) for d in decisions]


def test_xid_drains_and_swaps_the_job_onto_a_spare(tmp_path):
    slurm, engine = make(tmp_path, spares=("node3", "node4"))
    slurm.run_job("12", ["node1", "node2"])
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    # Canonical order whatever the policy lists: snapshot (refused: no snapshot library), drain, swap.
    assert phases(decisions) == [("snapshot", "refused"), ("drain", "done"), ("swap", "done")]
    assert "does not use the snapshot library" in decisions[0]["why"]
    assert slurm.node_map["node2"].flags == ["DRAIN"]
    assert decisions[1]["id"] in slurm.node_map["node2"].reason  # the reason names the action
    assert slurm.node_map["node2"].reason.startswith("fleetctl:xid.79 ")
    assert slurm.job_map["12"]["state"] == "RUNNING"
    assert "node2" not in slurm.job_map["12"]["nodes"] and "node1" in slurm.job_map["12"]["nodes"]
    assert slurm.job_map["12"]["exc"] == ["node2"]
    assert slurm.res["fleetctl-spares"] == ["node4"]  # one spare released, the other kept
    assert decisions[2]["result"]["spare"] == "node3"
    # The log holds pending before done for every action taken.
    history = {r["id"]: r["history"] for r in ActionLog(tmp_path / "act").current().values()}
    assert history[decisions[1]["id"]] == ["pending", "done"]
    # a swap records each step it did (the released spare, before the requeue) as `pending`
    assert history[decisions[2]["id"]] == ["pending", "pending", "pending", "done"]


def test_dry_run_changes_nothing_and_says_what_it_would_do(tmp_path):
    slurm, engine = make(tmp_path, spares=("node3", "node4"), dry_run=True)
    slurm.run_job("12", ["node1", "node2"])
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert phases(decisions)[1:] == [("drain", "dry-run"), ("swap", "dry-run")]
    assert decisions[1]["why"].startswith("would drain node2")
    assert not slurm.node_map["node2"].flags and slurm.res["fleetctl-spares"] == ["node3", "node4"]
    assert slurm.job_map["12"]["nodes"] == ["node1", "node2"]


def test_budget_refuses_a_storm_of_drains_and_says_so(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},),
                         nodes=[f"node{i}" for i in range(1, 11)], max_drain_pct=100.0, max_drains_per_hour=2)
    decisions = handle_report(engine, audit_report({f"node{i}": "xid.79" for i in range(1, 7)}))
    assert [d["phase"] for d in decisions] == ["done", "done"] + ["refused"] * 4
    assert all("budget: 2 drain(s) in the last hour already, the limit is 2 per hour" in d["why"]
               for d in decisions[2:])
    assert sum(1 for n in slurm.node_map.values() if n.flags) == 2


def test_budget_share_of_a_partition_counts_operators_drains(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},), max_drain_pct=25.0)
    slurm.operator_drain("node4", "cable swap by alice")
    decisions = handle_report(engine, audit_report({"node1": "xid.79"}))
    assert decisions[0]["phase"] == "refused"
    assert "2 of 4 nodes of partition batch drained (50 %), the limit is 25 %" in decisions[0]["why"]


def test_operators_drain_is_never_touched(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},))
    slurm.operator_drain("node2", "cable swap by alice")
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert decisions[0]["phase"] == "refused" and "drained by someone else" in decisions[0]["why"]
    assert slurm.node_map["node2"].reason == "cable swap by alice"
    assert slurm.calls == []


def test_nothing_on_fleetctls_own_errors_or_measurement_trouble(tmp_path):
    everything = {"name": "all", "source": "audit", "codes": ["*"], "severities": ["critical", "warning", "info"],
                  "min_confidence": 0.0, "actions": ["drain"]}
    slurm, engine = make(tmp_path, policies=(everything,))
    report = audit_report({}, error=["node3"])
    report["nodes"].append({"node": "node4", "status": "error", "transport": "timeout", "error": "ssh timed out",
                            "results": []})
    decisions = handle_report(engine, report)
    assert decisions and all(d["phase"] == "refused" for d in decisions)
    assert any("measurement trouble" in d["why"] for d in decisions)
    assert any("its own failure" in d["why"] for d in decisions)
    lens_policy = {"name": "l", "source": "lens", "element_types": ["nic"], "min_confidence": 0.0,
                   "actions": ["drain"]}
    slurm2, engine2 = make(tmp_path / "2", policies=(lens_policy,))
    det = detections.from_lens_event(lens_event(etype="nic", eid="node1:eth0",
                                                evidence={"measurement_trouble": True}))
    assert engine2.handle(det)[0]["phase"] == "refused"
    assert not any(n.flags for n in slurm.node_map.values()) and not any(n.flags for n in slurm2.node_map.values())


def test_confidence_below_the_floor_is_refused(tmp_path):
    policy = {"name": "nic", "source": "lens", "element_types": ["nic"], "min_confidence": 0.9, "actions": ["drain"]}
    slurm, engine = make(tmp_path, policies=(policy,))
    out = engine.handle(detections.from_lens_event(lens_event(etype="nic", eid="node2:eth1", confidence=0.6)))
    assert out[0]["phase"] == "refused" and "confidence 0.60 is below the policy's floor of 0.90" in out[0]["why"]
    out = engine.handle(detections.from_lens_event(lens_event("ev-20261201T070000-0002", etype="nic",
                                                              eid="node2:eth1", confidence=0.95)))
    assert out[0]["phase"] == "done" and slurm.node_map["node2"].flags == ["DRAIN"]


def test_cool_down_and_undo(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},))
    first = handle_report(engine, audit_report({"node2": "xid.79"}))[0]
    assert first["phase"] == "done"
    log = ActionLog(tmp_path / "act")
    undone = undo(log, first["id"], slurm)
    assert undone["phase"] == "undone" and not slurm.node_map["node2"].flags
    again = handle_report(engine, audit_report({"node2": "xid.79"}))[0]
    assert again["phase"] == "refused" and again["why"].startswith("cool-down: policy xid acted on this")
    with pytest.raises(UsageError, match="only a done action"):
        undo(log, first["id"], slurm)


def test_undo_leaves_a_node_whose_reason_changed(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},))
    first = handle_report(engine, audit_report({"node2": "xid.79"}))[0]
    slurm.node_map["node2"].reason = "replaced by alice"
    with pytest.raises(UsageError, match="not this action's: left alone"):
        undo(ActionLog(tmp_path / "act"), first["id"], slurm)
    assert slurm.node_map["node2"].flags == ["DRAIN"]


def test_swap_undo_returns_the_spare_once_free(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["swap"]},), spares=("node3", "node4"))
    slurm.run_job("12", ["node1", "node2"])
    swap = handle_report(engine, audit_report({"node2": "xid.79"}))[0]
    assert swap["phase"] == "done" and swap["undo"]["return_spare"] == "node3"
    with pytest.raises(UsageError, match="runs job"):
        undo(ActionLog(tmp_path / "act"), swap["id"], slurm, engine.pool)
    slurm.job_map["12"]["state"] = "COMPLETED"
    for n in slurm.node_map.values():
        n.state = "IDLE"
    undo(ActionLog(tmp_path / "act"), swap["id"], slurm, engine.pool)
    assert slurm.res["fleetctl-spares"] == ["node3", "node4"]


def test_no_free_spare_is_a_logged_refusal(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain", "swap"]},))
    slurm.run_job("12", ["node1", "node2"])
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert phases(decisions) == [("drain", "done"), ("swap", "refused")]
    assert "no free spare" in decisions[1]["why"]


def test_lens_link_event_snapshots_the_jobs_crossing_it(tmp_path):
    from fleetctl.snapshot import registry

    policy = {"name": "link", "source": "lens", "element_types": ["link"], "metrics": ["loss"],
              "actions": ["snapshot"]}
    slurm, engine = make(tmp_path, policies=(policy,), snapshot_timeout_s=0.3)
    snapdir = tmp_path / "snaps"
    snapdir.mkdir()
    (tmp_path / "registry").mkdir()
    registry.register("12", snapdir, 2, str(tmp_path / "registry"))
    event = lens_event(eid="leaf1--spine2", jobs=[{"job_id": "12", "nodes": "node[1-2]"},
                                                  {"job_id": "13", "nodes": "node3"}])
    decisions = engine.handle(detections.from_lens_event(event))
    by_job = {d["targets"]["jobs"][0]: d for d in decisions}
    # Job 12 uses the library: asked (REQUEST written), it did not answer in time here (no job runs).
    assert by_job["12"]["phase"] == "failed" and "no snapshot answered request" in by_job["12"]["why"]
    assert (snapdir / "REQUEST").exists() and json.loads((snapdir / "REQUEST").read_text())["reason"] == "drain"
    assert by_job["13"]["phase"] == "refused"
    assert not detections.from_lens_event(event).nodes  # a switch link names no node: nothing to drain


def test_a_crash_between_pending_and_the_drain_drains_nothing_and_recovery_says_so(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},))
    pid = os.fork()
    if pid == 0:  # the child: its engine crashes after the pending record
        engine.on_point = crash_at("drain", "after-pending")
        try:
            handle_report(engine, audit_report({"node2": "xid.79"}))
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == CRASH_EXIT
    assert not (tmp_path / "drains").exists()  # no drain reached Slurm
    pending = [r for r in ActionLog(tmp_path / "act").current().values() if r["phase"] == "pending"]
    assert len(pending) == 1 and pending[0]["action"] == "drain"
    recovered = engine.recover()
    assert [r["phase"] for r in recovered] == ["abandoned"]
    # The next pass acts on the finding again (the abandoned action started no cool-down).
    assert handle_report(engine, audit_report({"node2": "xid.79"}))[0]["phase"] == "done"


def test_a_crash_after_the_drain_is_recovered_as_done(tmp_path):
    slurm, engine = make(tmp_path, policies=({**XID, "actions": ["drain"]},))
    pid = os.fork()
    if pid == 0:
        engine.on_point = crash_at("drain", "after-action")
        try:
            handle_report(engine, audit_report({"node2": "xid.79"}))
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == CRASH_EXIT
    pending = [r for r in ActionLog(tmp_path / "act").current().values() if r["phase"] == "pending"]
    # The child's Slurm state died with it: show the parent's Slurm the drain the child made.
    slurm.drain(["node2"], "xid.79", f"{pending[0]['id']} GPU has fallen off the bus")
    assert [r["phase"] for r in engine.recover()] == ["done"]


def test_policy_parsing_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"act.policies\[0\].actions"):
        parse_policies([{"name": "a", "actions": ["format-disk"]}])
    with pytest.raises(ConfigError, match="need drain in the same policy"):
        parse_policies([{"name": "a", "actions": ["reset-gpu", "resume"]}])
    with pytest.raises(ConfigError, match="needs a webhook"):
        parse_policies([{"name": "a", "actions": ["notify"]}])
    with pytest.raises(ConfigError, match="used twice"):
        parse_policies([{"name": "a", "actions": ["drain"]}, {"name": "a", "actions": ["drain"]}])
    with pytest.raises(ConfigError, match="http"):
        parse_policies([{"name": "a", "actions": ["notify"], "webhook": "file:///etc/passwd"}])


def test_policy_matching():
    p = parse_policies([{"name": "x", "codes": ["xid.*"], "severities": ["critical"], "actions": ["drain"]}])[0]
    dets = detections.from_audit_report(audit_report({"node1": "xid.79", "node2": "nic.link"}))
    assert [p.matches(d) for d in dets] == [True, False]
    lp = parse_policies([{"name": "l", "source": "lens", "element_types": ["link"], "metrics": ["down"],
                          "actions": ["snapshot"]}])[0]
    assert lp.matches(detections.from_lens_event(lens_event(metric="down")))
    assert not lp.matches(detections.from_lens_event(lens_event(metric="loss")))
    assert not lp.matches(detections.from_lens_event(lens_event(metric="down", severity="warning")))


def test_lens_element_nodes():
    assert detections.from_lens_event(lens_event(eid="node1:eth0--leaf1")).nodes == ["node1"]
    assert detections.from_lens_event(lens_event(eid="leaf1--spine2")).nodes == []
    assert detections.from_lens_event(lens_event(etype="host", eid="node3")).nodes == ["node3"]


def test_migrate_is_refused_for_a_job_without_a_control_store_and_the_swap_goes_on(tmp_path):
    slurm, engine = make(tmp_path, spares=("node3", "node4"),
                         policies=({**XID, "actions": ["migrate", "drain", "swap"]},), migrate_connect_s=0.2)
    slurm.run_job("12", ["node1", "node2"])
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert phases(decisions) == [("migrate", "refused"), ("drain", "done"), ("swap", "done")]
    assert decisions[0]["why"].startswith("cannot migrate: control store node1:")  # not a `fleetctl run` job


def test_a_rank_the_job_already_replaced_needs_no_migrate_nor_swap(tmp_path):
    """The job's own controller gave the rank lost on node2 to its standby within seconds (a hung
    or dead process); act's audit finds the Xid after: nothing to move, and swapping the job would
    requeue it for nothing. The node is still drained. (A real TCPStore, where act looks for it.)"""
    import datetime

    import torch.distributed as dist

    from fleetctl.recovery import control
    from fleetctl.recovery.launch import BASE_PORT

    slurm, engine = make(tmp_path, spares=("node4",), nodes=("node1", "node2", "node3", "node4", "node5"),
                         policies=({**XID, "actions": ["migrate", "drain", "swap"]},), migrate_connect_s=2)
    job = "7341"
    slurm.run_job(job, ["node1", "node2", "node3"])
    slurm.node_map["node1"].address = "127.0.0.1"
    try:
        store = dist.TCPStore("127.0.0.1", BASE_PORT + int(job) % 20000, None, True,
                              datetime.timedelta(seconds=5), wait_for_workers=False)
    except Exception as exc:  # the port is taken on this machine: a real conflict, said plainly
        pytest.fail(f"cannot serve a store on port {BASE_PORT + int(job) % 20000}: {exc}")
    store.set("slots", "3")
    for slot, node in enumerate(("node1", "node2", "node3")):
        store.set(control.hello_key(slot), control.encode({"node": node, "address": "127.0.0.1", "port": 1}))
    control.post_exit(store, 1, -9)  # its launcher killed the hung process
    plan = control.Plan(1, 2, {0: 0, 2: 1}, {0: 2, 1: 0}, resume=40, lost={1: 1}, sources={1: 0})
    store.set(control.plan_key(1), control.encode(plan.to_doc()))
    store.set("gen", "1")
    decisions = handle_report(engine, audit_report({"node2": "xid.79"}))
    assert phases(decisions) == [("migrate", "done"), ("drain", "done"), ("swap", "refused")], decisions
    assert decisions[0]["result"] == {"node": "node2", "moved": {}}
    assert "not needed" in decisions[2]["why"]
    assert slurm.job_map[job]["state"] == "RUNNING" and slurm.node_map["node2"].flags == ["DRAIN"]
