"""build_inventory: the site view, merged with Slurm state replayed from recorded scontrol/squeue output.

Slurm itself is exercised against the lab's real slurmctld in tests/integration/test_slurm_backend.py;
here the CliBackend's parsing and the merge run on recorded 24.11-layout output, and the unreachable
case runs the real scontrol against a slurm.conf whose controller port is closed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetctl.config import parse_site
from fleetctl.inventory import build_inventory
from fleetctl.slurm.cli_backend import CliBackend

OUT = Path(__file__).parent / "slurm_outputs" / "24.11-docs"

SITE = """
[cluster]
name = "inv"
[access.ssh]
addresses = { gpu001 = "10.9.0.1" }
[[node_classes]]
name = "h100"
nodes = "gpu[001-003,005]"
[node_classes.gpus]
count = 8
model = "NVIDIA H100 80GB HBM3"
[[node_classes.nics]]
name = "mlx5_0"
kind = "infiniband"
[[node_classes.nics]]
name = "mlx5_1"
kind = "infiniband"
[[fabric.switches]]
id = "spine1"
tier = 2
[[fabric.switches]]
id = "leaf1"
tier = 1
[[fabric.switches]]
id = "lonely"
tier = 1
[[fabric.links]]
a = "gpu001:mlx5_0"
b = "leaf1:p1"
a_address = "10.1.0.1"
[[fabric.links]]
a = "gpu002"
b = "leaf1"
[[fabric.links]]
a = "leaf1"
b = "spine1"
"""


class ReplayBackend(CliBackend):
    """The CLI backend with recorded command output instead of running the commands."""

    def run(self, program, *args):
        self.calls.append((program, *args))
        if program == "scontrol" and args[:2] == ("show", "node"):
            return (OUT / "show_node.txt").read_text()
        if program == "squeue":
            return (OUT / "squeue.txt").read_text()
        raise AssertionError(f"unexpected command {program} {args}")

    calls: list = []


@pytest.fixture
def site():
    return parse_site(SITE, source="inv.toml")


def test_site_view_only(site):
    inv = build_inventory(site)
    assert list(inv.nodes) == ["gpu001", "gpu002", "gpu003", "gpu005"]
    n1 = inv.nodes["gpu001"]
    assert n1.node_class == "h100" and n1.address == "10.9.0.1" and n1.gpus.count == 8
    assert n1.nic("mlx5_0").links == ["gpu001:mlx5_0--leaf1"]
    assert n1.nic("mlx5_0").switches == ["leaf1"] and n1.nic("mlx5_0").addresses == ["10.1.0.1"]
    assert n1.nic("mlx5_1").links == [] and n1.slurm is None and n1.in_slurm is None
    assert inv.nodes["gpu002"].links == ["gpu002--leaf1"]
    assert list(inv.switches) == ["leaf1", "lonely", "spine1"]  # by tier, then id
    assert inv.switches["leaf1"].neighbours == ["gpu001", "gpu002", "spine1"]
    assert inv.warnings == [] and not inv.slurm_queried


def test_nodeset_limits_nodes_links_and_switches(site):
    inv = build_inventory(site, "gpu001,gpu009")
    assert list(inv.nodes) == ["gpu001"]
    assert list(inv.links) == ["gpu001:mlx5_0--leaf1"]
    assert list(inv.switches) == ["leaf1"]
    assert inv.warnings == ["nodes gpu009 are not in the site file"]


def test_merged_with_slurm(site):
    inv = build_inventory(site, slurm=ReplayBackend(drain_prefix="fleetctl"))
    assert list(inv.nodes) == ["gpu001", "gpu002", "gpu003", "gpu005", "gpu004"]
    n1 = inv.nodes["gpu001"].slurm
    assert (n1.state, n1.drained, n1.ours, n1.reason_user) == ("IDLE+DRAIN", True, True, "root")
    assert n1.reason == "fleetctl:xid79 gpu3 fell off the bus" and n1.partitions == ["gpu", "all"]
    assert inv.nodes["gpu002"].slurm.jobs == ["4012", "4014_3"]
    assert inv.nodes["gpu002"].slurm.available
    gpu4 = inv.nodes["gpu004"]
    assert (gpu4.in_site, gpu4.node_class, gpu4.slurm.ours, gpu4.slurm.jobs) == (False, None, False, ["4012"])
    assert inv.nodes["gpu005"].in_slurm is False and inv.nodes["gpu005"].slurm is None
    assert inv.only_in_slurm == ["gpu004"] and inv.only_in_site == ["gpu005"]
    assert inv.warnings == ["nodes gpu004 are in Slurm but not in the site file",
                            "nodes gpu005 are in the site file but not in Slurm"]
    data = inv.to_dict()
    assert data["slurm"] == {"queried": True, "error": None}
    assert data["nodes"][0]["slurm"]["state"] == "IDLE+DRAIN"


def test_merged_with_slurm_and_a_nodeset(site):
    inv = build_inventory(site, "gpu[002-004]", slurm=ReplayBackend())
    assert list(inv.nodes) == ["gpu002", "gpu003", "gpu004"]
    assert inv.warnings == ["nodes gpu004 are in Slurm but not in the site file"]


def test_slurm_unreachable_keeps_the_site_view(site, tmp_path):
    conf = tmp_path / "slurm.conf"
    # A real scontrol, told to contact a controller on a closed port.
    conf.write_text("ClusterName=dead\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\n"
                    "AuthType=auth/none\nCredType=cred/none\nMessageTimeout=2\n"
                    "NodeName=gpu001 CPUs=1\nPartitionName=p Nodes=gpu001 Default=YES\n")
    inv = build_inventory(site, slurm=CliBackend(slurm_conf=str(conf), timeout=20))
    assert list(inv.nodes) == ["gpu001", "gpu002", "gpu003", "gpu005"]
    assert all(n.slurm is None and n.in_slurm is None for n in inv.nodes.values())
    assert inv.slurm_error.startswith(f"slurmctld not reachable (SLURM_CONF={conf}): ")
    assert "Unable to contact slurm controller" in inv.slurm_error
    assert inv.warnings[0].startswith("Slurm state unavailable, showing the site file only: ")
