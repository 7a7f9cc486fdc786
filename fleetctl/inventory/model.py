"""The inventory records: the cluster model (fleetctl.model.cluster) flattened per node and switch,
with each element's links and neighbours, for `fleetctl inventory`.

Plain dataclasses with `to_dict()` (the JSON of `fleetctl inventory --format json`; field names are
part of the documented output, do not rename). Other packages plan against the cluster model itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from fleetctl.model.cluster import NicSpec, SlurmInfo


@dataclass
class NicInfo:
    """One NIC of the cluster model (its NicSpec) with what the fabric says about it."""

    spec: NicSpec
    links: list[str] = field(default_factory=list)  # link ids ending on this NIC
    switches: list[str] = field(default_factory=list)  # switches at the other end
    addresses: list[str] = field(default_factory=list)  # this NIC's address on each of its links

    @property
    def name(self) -> str:
        return self.spec.name

    def to_dict(self) -> dict:
        return {**asdict(self.spec), "links": list(self.links), "switches": list(self.switches),
                "addresses": list(self.addresses)}


@dataclass
class GpuInfo:
    """What the site file says each node should have (not a measurement)."""

    count: int = 0
    model: str = ""
    driver_version: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Node:
    name: str
    node_class: str | None  # None: the node is in Slurm but not in the site file
    in_site: bool = True
    in_slurm: bool | None = None  # None: Slurm was not asked or not reachable
    address: str = ""  # where fleetctl connects to it (access.ssh.addresses), empty = its name
    gpus: GpuInfo = field(default_factory=GpuInfo)
    nics: list[NicInfo] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # every link with the node on one end
    slurm: SlurmInfo | None = None

    def nic(self, name: str) -> NicInfo | None:
        return next((n for n in self.nics if n.name == name), None)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["nics"] = [n.to_dict() for n in self.nics]
        out["slurm"] = self.slurm.to_dict() if self.slurm else None
        return out


@dataclass
class Switch:
    id: str
    tier: int
    model: str = ""
    address: str = ""
    links: list[str] = field(default_factory=list)
    neighbours: list[str] = field(default_factory=list)  # devices at the other end of its links

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Link:
    id: str
    a: str  # `node:nic`, `node`, `switch` or `switch:port`
    b: str
    a_kind: str  # nic | host | switch
    b_kind: str
    a_address: str = ""
    b_address: str = ""
    rate_gbps: float = 0.0

    @property
    def devices(self) -> tuple[str, str]:
        return self.a.partition(":")[0], self.b.partition(":")[0]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Inventory:
    cluster: str
    site_file: str
    nodes: dict[str, Node] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)
    slurm_queried: bool = False
    slurm_error: str = ""  # why Slurm state is missing, when it was asked for and failed
    warnings: list[str] = field(default_factory=list)

    @property
    def only_in_site(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.in_slurm is False]

    @property
    def only_in_slurm(self) -> list[str]:
        return [n.name for n in self.nodes.values() if not n.in_site]

    def to_dict(self) -> dict:
        return {
            "cluster": self.cluster, "site_file": self.site_file,
            "slurm": {"queried": self.slurm_queried, "error": self.slurm_error or None},
            "warnings": list(self.warnings),
            "only_in_site": self.only_in_site, "only_in_slurm": self.only_in_slurm,
            "nodes": [n.to_dict() for n in self.nodes.values()],
            "switches": [s.to_dict() for s in self.switches.values()],
            "links": [l.to_dict() for l in self.links.values()],
        }
