"""Acting on Slurm when Slurm misbehaves: unknown nodes, a controller that goes away mid-loop.
Every action ends done, skipped with a reason, or failed with the error; none is lost."""

from __future__ import annotations

import pytest

from fleetctl.audit.actions import apply_actions, plan_actions
from fleetctl.audit.report import AuditReport
from fleetctl.audit.runner import NodeOutcome
from fleetctl.errors import SlurmError
from fleetctl.errors import SlurmUnreachable
from fleetctl.slurm.base import DrainResult, ResumeResult, SlurmBackend, SlurmNode


def failing(node):
    return NodeOutcome(node, doc={"status": "fail", "complete": True, "results": [
        {"code": "xid.79", "status": "fail", "message": "fell off the bus", "action": "reboot"}]})


class Slurm(SlurmBackend):
    """A controller holding `known` nodes; `nodes()` fails on an unknown name like scontrol does,
    and `down_after` drain calls it stops answering."""

    def __init__(self, known, down_after=None):
        super().__init__()
        self.known = {n: SlurmNode(n, "IDLE") for n in known}
        self.down_after = down_after
        self.calls = []

    def nodes(self, nodes=None):
        self.calls.append(("nodes", tuple(nodes or ())))
        missing = [n for n in nodes or () if n not in self.known]
        if missing:
            raise SlurmError(f"`scontrol show node` failed: Node {missing[0]} not found")
        return [self.known[n] for n in nodes] if nodes else list(self.known.values())

    def drain(self, nodes, code, text="", *, force=False):
        self.calls.append(("drain", tuple(nodes)))
        if self.down_after is not None and len([c for c in self.calls if c[0] == "drain"]) > self.down_after:
            raise SlurmUnreachable("slurmctld not reachable: Unable to contact slurm controller")
        return DrainResult(f"fleetctl:{code} {text}", drained=list(nodes))

    def resume(self, nodes, *, wait_s=10.0):
        return ResumeResult(resumed=list(nodes))

    def wait_responding(self, names, wait_s=10.0):
        return []

    jobs = reservations = create_reservation = update_reservation = delete_reservation = requeue = \
        ping = None


def report(*nodes):
    return AuditReport("t", "quick", 0.0, {n: failing(n) for n in nodes})


def test_default_lookup_falls_back_node_by_node():
    slurm = Slurm(["n1", "n2"])
    found = slurm.lookup(["n1", "ghost", "n2"])
    assert sorted(found.found) == ["n1", "n2"] and found.unknown == ["ghost"]


def test_unreachable_controller_is_not_retried_node_by_node():
    class Down(Slurm):
        def nodes(self, nodes=None):
            self.calls.append(("nodes", tuple(nodes or ())))
            raise SlurmUnreachable("slurmctld not reachable")

    slurm = Down([])
    with pytest.raises(SlurmUnreachable):
        slurm.lookup(["n1", "n2", "n3"])
    assert len(slurm.calls) == 1


def test_controller_lost_mid_loop_leaves_every_node_accounted_for():
    slurm = Slurm(["n1", "n2", "n3"], down_after=1)
    plan = apply_actions(plan_actions(report("n1", "n2", "n3"), slurm, drain=True, resume=False), slurm)
    assert plan.drained == ["n1"]
    assert plan.failed["n2"].startswith("drain failed: slurmctld not reachable")
    assert plan.failed["n3"].startswith("drain not attempted: slurmctld not reachable")
    assert not plan.complete
    assert [c for c in slurm.calls if c[0] == "drain"] == [("drain", ("n1",)), ("drain", ("n2",))]
    assert plan.to_dict()["failed"] == plan.failed


def test_unknown_node_is_reported_and_the_rest_drained():
    slurm = Slurm(["n1"])
    plan = apply_actions(plan_actions(report("n1", "ghost"), slurm, drain=True, resume=False), slurm)
    assert plan.drained == ["n1"] and plan.unknown == ["ghost"] and plan.complete
    assert "Slurm does not know this node" in plan.skipped["ghost"]
