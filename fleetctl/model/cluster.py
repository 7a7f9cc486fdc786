"""The cluster model: nodes, node classes, NICs, GPUs, switches and links, typed; live Slurm state.

The ground every package plans against. The site file is its source (`fleetctl.config` loads and
validates it into a `Cluster`); Slurm's live view attaches to it (`fleetctl.inventory`); the fabric
view that probing and analysis need (elements, link directions, paths) derives from it
(`fleetctl.model.fabric.Topology.from_site`). No I/O here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from fleetctl.nodeset import NodeSet, contains, empty, is_node_name


@dataclass(frozen=True)
class NicSpec:
    name: str
    kind: str = "ethernet"
    netdev: str = ""
    rate_gbps: float = 0.0
    mtu: int = 0
    firmware: str = ""


@dataclass(frozen=True)
class GpuSpec:
    count: int = 0
    model: str = ""
    driver_version: str = ""
    vbios_version: str = ""
    pcie_gen: int = 0
    pcie_width: int = 0
    nvlinks: int = 0


@dataclass(frozen=True)
class NodeClass:
    name: str
    nodes: NodeSet
    cpus: int = 0
    memory_gb: float = 0.0
    kernel_version: str = ""
    mounts: tuple[str, ...] = ()
    gpus: GpuSpec = GpuSpec()
    nics: tuple[NicSpec, ...] = ()

    def nic(self, name: str) -> NicSpec | None:
        return next((n for n in self.nics if n.name == name), None)


@dataclass(frozen=True)
class Switch:
    id: str
    tier: int
    model: str = ""
    address: str = ""


@dataclass(frozen=True)
class Endpoint:
    """One end of a link. kind: `nic` (node:nic), `host` (a node, NIC unknown), `switch`."""

    kind: str
    device: str
    port: str = ""
    address: str = ""

    @property
    def element_id(self) -> str:
        """The id used in link ids: switch ports are left out, NICs are kept."""
        return f"{self.device}:{self.port}" if self.kind == "nic" else self.device

    def __str__(self) -> str:
        return f"{self.device}:{self.port}" if self.port else self.device


@dataclass(frozen=True)
class Link:
    id: str
    a: Endpoint
    b: Endpoint
    rate_gbps: float = 0.0


@dataclass
class SlurmInfo:
    """Live Slurm state of one node (field names are part of `fleetctl inventory`'s JSON)."""

    state: str = ""  # Slurm's combined form, IDLE+DRAIN
    drained: bool = False
    available: bool = False
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""
    ours: bool = False  # reason written by fleetctl (carries the drain prefix)
    partitions: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)  # ids of jobs running on the node

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Cluster:
    """One cluster as the site file declares it (validated, resolved), plus live state once attached.

    `data` keeps the validated sections with their defaults filled in, for the settings that are
    plain values (access, slurm, checks, thresholds); the structure (nodes, NICs, switches, links)
    is typed. Loaded by `fleetctl.config.load_site` from a site file; held in parameters named `cluster`.
    """

    name: str
    source: str
    data: dict
    node_classes: list[NodeClass] = field(default_factory=list)
    switches: dict[str, Switch] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)
    # Live Slurm state by node, attached by `fleetctl.inventory.attach_slurm`; None: not asked.
    slurm_state: dict[str, SlurmInfo] | None = None

    # Sections as validated dicts (defaults filled in): site.access["ssh"]["user"].
    access = property(lambda self: self.data["access"], doc="The [access] section.")
    slurm = property(lambda self: self.data["slurm"], doc="The [slurm] section.")
    checks = property(lambda self: self.data["checks"], doc="The [checks] section.")
    thresholds = property(lambda self: self.data["thresholds"], doc="The [thresholds] section.")

    @property
    def mesh(self) -> dict:
        """The probe mesh settings (budget, coverage, false-discovery rate); {} when the site has none."""
        return self.data.get("mesh") or {}

    @property
    def nodes(self) -> NodeSet:
        out = empty()
        for cls in self.node_classes:
            out.update(cls.nodes)
        return out

    def node_class(self, node: str) -> NodeClass | None:
        if not is_node_name(node):  # `in` would parse `node` as a node set: gpu[1-4] is no node
            return None
        return next((c for c in self.node_classes if contains(c.nodes, node)), None)

    def select(self, nodeset: str | None) -> list[str]:
        """The nodes of NODESET (default: every node of the cluster), each of which must be known
        (UsageError naming the unknown ones)."""
        from fleetctl.errors import UsageError
        from fleetctl.nodeset import parse_nodeset

        nodes = list(parse_nodeset(nodeset)) if nodeset else list(self.nodes)
        unknown = [n for n in nodes if self.node_class(n) is None]
        if unknown:
            raise UsageError(f"nodes not in the site file {self.source}: {','.join(unknown[:5])}")
        return nodes


def link_id(a: Endpoint, b: Endpoint, cluster: Cluster | None = None) -> str:
    """Derived link id: the node end first, else the lower-tier switch first (leaf1--spine2), so the
    id does not depend on which end the file names first."""
    if a.kind == "switch" and b.kind != "switch":
        a, b = b, a
    elif a.kind == b.kind == "switch" and cluster is not None:
        if cluster.switches[b.device].tier < cluster.switches[a.device].tier:
            a, b = b, a
    return f"{a.element_id}--{b.element_id}"
