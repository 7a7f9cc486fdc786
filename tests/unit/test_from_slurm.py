"""The cluster built from Slurm alone: GRES, classes, partition, topology.conf, and the checks' data
paths from the environment. Slurm's answers here are recorded text (scontrol --oneliner); the lab
test (tests/integration/test_discover_lab.py) asks a real slurmctld."""

from __future__ import annotations

import sys

import pytest

from fleetctl.inventory.from_slurm import cluster_from_slurm, gpu_gres, inferred

NODES = """NodeName=gpu01 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 Gres=gpu:h100:8(S:0-1) NodeAddr=gpu01 RealMemory=2048000 State=IDLE Partitions=gpu
NodeName=gpu02 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 Gres=gpu:h100:8(S:0-1) NodeAddr=gpu02 RealMemory=2048000 State=IDLE Partitions=gpu
NodeName=cpu01 Arch=x86_64 CPUTot=64 Gres=(null) NodeAddr=cpu01 RealMemory=257000 State=IDLE Partitions=cpu
"""
PARTITIONS = """PartitionName=gpu Default=YES Nodes=gpu[01-02] State=UP
PartitionName=cpu Default=NO Nodes=cpu01 State=UP
"""


class RecordedSlurm:
    """Answers the three questions cluster_from_slurm asks, from recorded output."""

    def __init__(self, conf, config_text):
        self.slurm_conf, self.config_text = conf, config_text

    def run(self, program, *args):
        assert program == "scontrol"
        return {"config": self.config_text, "node": NODES, "partition": PARTITIONS}[args[1]]


@pytest.mark.parametrize("gres, expected", [
    ("gpu:h100:8(S:0-1)", ("h100", 8)), ("gpu:4", ("", 4)), ("(null)", ("", 0)),
    ("gpu:a100:4,gpu:a100:4(S:1)", ("a100", 8)), ("mps:100,gpu:2", ("", 2)), ("", ("", 0)),
])
def test_gpu_gres(gres, expected):
    assert gpu_gres(gres) == expected


def test_cluster_from_slurm(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text("# recorded\n")
    (tmp_path / "topology.conf").write_text("SwitchName=leaf1 Nodes=gpu[01-02],cpu01\n")
    monkeypatch.setenv("FLEETCTL_CHECKS_KERNEL_LOG", "/lab/{node}/kern.log")
    site = cluster_from_slurm(RecordedSlurm(str(conf), "ClusterName = dgx1\nTopologyPlugin = topology/tree\n"))
    assert site.name == "dgx1" and site.access["transport"] == "srun" and site.slurm["partition"] == "gpu"
    assert [(c.name, str(c.nodes), c.gpus.count, c.cpus, c.memory_gb) for c in site.node_classes] == [
        ("slurm-cpu64", "cpu01", 0, 64, 250), ("slurm-h100x8", "gpu[01-02]", 8, 224, 2000)]
    assert site.checks["kernel_log"] == "/lab/{node}/kern.log"
    assert sorted(site.links) == ["cpu01--leaf1", "gpu01--leaf1", "gpu02--leaf1"]  # from topology.conf
    notes = inferred(site)
    assert any("3 nodes" in n for n in notes) and any("topology.conf" in n for n in notes)
    # Without topology/tree, no fabric.
    site = cluster_from_slurm(RecordedSlurm(str(conf), "ClusterName = (null)\n"))
    assert not site.links and site.name == "slurm"


def test_numbers_slurm_cannot_mean_are_a_slurm_error_not_a_traceback(tmp_path, monkeypatch):
    from fleetctl.errors import SlurmError

    assert gpu_gres("gpu:h100:" + "9" * 5000) == ("", 0)  # int() of 5,000 digits is a ValueError
    conf = tmp_path / "slurm.conf"
    conf.write_text("# recorded\n")
    for bad in ("CPUTot=N/A", "RealMemory=" + "9" * 5000):
        monkeypatch.setattr(sys.modules[__name__], "NODES", f"NodeName=gpu01 {bad} State=IDLE\n")
        with pytest.raises(SlurmError, match="gpu01: (CPUTot|RealMemory)=.* is not a number"):
            cluster_from_slurm(RecordedSlurm(str(conf), "ClusterName = x\n"))
