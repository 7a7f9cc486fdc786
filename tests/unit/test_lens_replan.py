"""Which nodes lens probes: the chosen ones minus those Slurm has drained or down; Slurm out of
reach keeps the current plan (fleetctl.lens.coordinator.Coordinator.usable_nodes)."""

from __future__ import annotations

from types import SimpleNamespace

from fleetctl.errors import SlurmError
from fleetctl.lens.coordinator import Coordinator
from fleetctl.lens.options import LensOptions
from fleetctl.slurm.base import SlurmNode


class FakeSlurm:
    def __init__(self, nodes=None, fail=False):
        self.list, self.fail = nodes or [], fail

    def nodes(self, names=None):
        if self.fail:
            raise SlurmError("slurmctld not reachable")
        return [n for n in self.list if names is None or n.name in names]


def coordinator(slurm):
    c = Coordinator(SimpleNamespace(name="lab"), ["node1", "node2", "node3", "node4"], None,
                    LensOptions(state_dir="/nonexistent"), outputs=None, log=lambda _m: None,
                    slurm=slurm)
    c.plan = SimpleNamespace(hosts=["node1", "node2", "node3"])
    return c


def test_drained_and_down_nodes_leave_the_plan():
    slurm = FakeSlurm([SlurmNode("node1", "IDLE"), SlurmNode("node2", "IDLE", ["DRAIN"]),
                       SlurmNode("node3", "DOWN"), SlurmNode("node4", "ALLOCATED")])
    assert coordinator(slurm).usable_nodes() == ["node1", "node4"]


def test_nodes_slurm_does_not_know_stay():
    slurm = FakeSlurm([SlurmNode("node1", "MIXED")])
    assert coordinator(slurm).usable_nodes() == ["node1", "node2", "node3", "node4"]


def test_slurm_unreachable_keeps_the_plan():
    assert coordinator(FakeSlurm(fail=True)).usable_nodes() == ["node1", "node2", "node3"]
    assert coordinator(None).usable_nodes() == ["node1", "node2", "node3", "node4"]
