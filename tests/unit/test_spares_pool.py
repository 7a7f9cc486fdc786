"""The spare pool on an in-memory Slurm: audited joins, floor warnings, release, concurrent changes
serialized by the pool lock, the swap plan and its dry run, replenish; verdicts as hostile input."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from fleetctl.errors import DataError, SlurmError, UsageError
from fleetctl.spares import SparePool, SparesConfig, plan_swap, run_swap
from fleetctl.spares.replenish import replenish

sys.path.insert(0, os.path.dirname(__file__))
from actfixtures import MemSlurm, audit_report  # noqa: E402

NODES = [f"node{i}" for i in range(1, 7)]


def make(tmp_path, delay=0.0, floor=1, max_age=3600.0):
    slurm = MemSlurm(NODES, write_delay=delay)
    pool = SparePool(slurm, SparesConfig(floor=floor, max_audit_age_s=max_age, state_dir=str(tmp_path)))
    return slurm, pool


def test_only_recently_passing_nodes_join(tmp_path):
    slurm, pool = make(tmp_path, max_age=60)
    pool.verdicts.record_report(audit_report({"node2": "xid.79"}, ok=["node1", "node3"], error=["node4"]))
    old = audit_report({}, ok=["node5"], finished=time.time() - 3600)
    pool.verdicts.record_report(old)
    change = pool.add(["node1", "node2", "node3", "node4", "node5", "node6"])
    assert change.changed == ["node1", "node3"]
    assert "last audit fail (xid.79)" in change.refused["node2"]
    assert "last audit error" in change.refused["node4"]
    assert "old (limit 60 s)" in change.refused["node5"]
    assert change.refused["node6"] == "no audit recorded"
    assert slurm.res["fleetctl-spares"] == ["node1", "node3"]
    st = pool.status()
    assert st.free == ["node1", "node3"] and [m["verdict"] for m in st.members] == ["ok", "ok"]


def test_drained_node_does_not_join_even_with_a_passing_audit(tmp_path):
    slurm, pool = make(tmp_path)
    pool.verdicts.record_report(audit_report({}, ok=["node1"]))
    slurm.operator_drain("node1", "maintenance")
    assert "resume or replenish it first" in pool.add(["node1"]).refused["node1"]


def test_a_node_a_job_runs_on_does_not_join(tmp_path):
    """The pool's reservation on it would keep that job from starting there after a requeue."""
    slurm, pool = make(tmp_path)
    pool.verdicts.record_report(audit_report({}, ok=["node1", "node2"]))
    slurm.run_job("41", ["node2"])
    change = pool.add(["node1", "node2"])
    assert change.changed == ["node1"]
    assert change.refused["node2"] == "state ALLOCATED: a job runs there; add it once the job has ended"


def test_remove_release_and_floor_warnings(tmp_path):
    slurm, pool = make(tmp_path, floor=2)
    pool.verdicts.record_report(audit_report({}, ok=["node1", "node2"]))
    pool.add(["node1", "node2"])
    node, change = pool.release_one(exclude=["node1"])
    assert node == "node2" and slurm.res["fleetctl-spares"] == ["node1"]
    assert "below its floor of 2" in change.warnings[0]
    assert pool.status().warnings  # 1 free < floor 2
    change = pool.remove(["node1", "node9"])
    assert change.refused == {"node9": "not in the pool"} and "fleetctl-spares" not in slurm.res
    with pytest.raises(SlurmError, match="no free spare"):
        pool.release_one()


def test_concurrent_adds_are_serialized_and_none_is_lost(tmp_path):
    """update_reservation replaces the whole node list: without the lock, two adds that read the
    same members would each write their own list and one node would be lost."""
    slurm, pool = make(tmp_path, delay=0.05)
    pool.verdicts.record_report(audit_report({}, ok=NODES))
    pool.add(["node1"])
    pools = [SparePool(slurm, pool.config) for _ in range(5)]
    threads = [threading.Thread(target=p.add, args=([n],)) for p, n in zip(pools, NODES[1:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(slurm.res["fleetctl-spares"]) == NODES


def test_swap_plan_dry_run_then_run(tmp_path):
    slurm, pool = make(tmp_path)
    pool.verdicts.record_report(audit_report({}, ok=["node5", "node6"]))
    pool.add(["node5", "node6"])
    slurm.run_job("7", ["node1", "node2"])
    plan = run_swap(plan_swap(slurm, pool, "7", "node2", dry_run=True), slurm, pool)
    assert [s.step for s in plan.steps] == ["check", "drain", "release", "requeue", "restore"]
    assert [s.status for s in plan.steps] == ["done", "planned", "planned", "planned", "planned"]
    assert slurm.job_map["7"]["nodes"] == ["node1", "node2"] and not slurm.node_map["node2"].flags
    plan = run_swap(plan_swap(slurm, pool, "7", "node2"), slurm, pool)
    assert plan.ok and plan.spare == "node5"
    assert slurm.node_map["node2"].reason.startswith("fleetctl:spares.swap")
    assert slurm.job_map["7"]["state"] == "RUNNING" and "node2" not in slurm.job_map["7"]["nodes"]
    assert slurm.res["fleetctl-spares"] == ["node6"]


def test_swap_refuses_what_cannot_be_moved(tmp_path):
    slurm, pool = make(tmp_path)
    slurm.run_job("7", ["node1", "node2"])
    slurm.run_job("8", ["node3"], requeue=False)
    with pytest.raises(UsageError, match="does not run on node4"):
        plan_swap(slurm, pool, "7", "node4")
    with pytest.raises(UsageError, match="--no-requeue"):
        plan_swap(slurm, pool, "8", "node3")
    with pytest.raises(UsageError, match="Slurm does not know it"):
        plan_swap(slurm, pool, "99", "node3")
    with pytest.raises(SlurmError, match="no free spare"):
        plan_swap(slurm, pool, "7", "node2")


def test_replenish_resumes_only_our_drains_that_pass(tmp_path):
    slurm, pool = make(tmp_path)
    slurm.drain(["node1", "node2"], "xid.79", "test")
    slurm.operator_drain("node3", "alice: fan")
    seen = []

    def audit(nodes):
        seen.append(list(nodes))
        return audit_report({"node2": "xid.79"}, ok=["node1"])

    out = replenish(pool, slurm, audit)
    assert seen == [["node1", "node2"]]  # the operator's node is not even audited
    assert out.resumed == ["node1"] and out.added == ["node1"] and out.failed == {"node2": "audit fail"}
    assert slurm.node_map["node3"].reason == "alice: fan"
    assert slurm.res["fleetctl-spares"] == ["node1"]


def test_verdict_file_is_hostile_input(tmp_path):
    slurm, pool = make(tmp_path)
    (tmp_path / "audits.json").write_text('{"node1": {"status": "ok", "time": 1}, "../x": {}, "node2": 5}')
    assert list(pool.verdicts.load()) == ["node1"]
    (tmp_path / "audits.json").write_text("not json")
    with pytest.raises(DataError, match="not valid JSON"):
        pool.verdicts.load()


def test_a_second_swap_can_use_a_repaired_node_the_first_swap_excluded(tmp_path):
    """Swap 1 moves the job off node2 (ExcNodeList=node2); node2 is repaired and rejoins the pool;
    swap 2 moves the job off node5 and releases node2: it must not stay excluded."""
    slurm, pool = make(tmp_path)
    pool.verdicts.record_report(audit_report({}, ok=["node5"]))
    pool.add(["node5"])
    slurm.run_job("7", ["node1", "node2"])
    for n in ("node3", "node4", "node6"):  # busy elsewhere: the spares are the only free nodes
        slurm.node_map[n].state = "ALLOCATED"
    assert run_swap(plan_swap(slurm, pool, "7", "node2"), slurm, pool).ok
    assert slurm.job_map["7"]["nodes"] == ["node1", "node5"]
    slurm.resume(["node2"])
    pool.verdicts.record_report(audit_report({}, ok=["node2"]))
    pool.add(["node2"])
    plan = run_swap(plan_swap(slurm, pool, "7", "node5"), slurm, pool)
    assert plan.ok and plan.spare == "node2"
    assert slurm.job_map["7"]["state"] == "RUNNING" and slurm.job_map["7"]["nodes"] == ["node1", "node2"]
    assert slurm.job_map["7"]["exc"] == ["node5"]
