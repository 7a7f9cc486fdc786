"""The cluster inventory: nodes, NICs, GPUs, switches and links from the site file plus Slurm state."""

from fleetctl.inventory.build import attach_slurm, build_inventory
from fleetctl.inventory.model import GpuInfo, Inventory, Link, NicInfo, Node, SlurmInfo, Switch

__all__ = ["GpuInfo", "Inventory", "Link", "NicInfo", "Node", "SlurmInfo", "Switch", "attach_slurm",
           "build_inventory"]
