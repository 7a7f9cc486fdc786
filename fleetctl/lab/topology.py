"""The lab's layout: names, addresses and links of an emulated cluster, computed from its size alone.

Pure data, no side effects: the builder, the site-file writer, the fault injector and the tests all read
the same layout, so an address or a link id is decided in exactly one place.

Layout ("rack style"): hosts are spread over the leaves in contiguous blocks (node1..node2 on leaf1,
node3..node4 on leaf2 for 4 hosts and 2 leaves); every NIC of a host goes to the host's leaf, every leaf
has one uplink to every spine. Two hosts on different leaves are therefore joined by
NICs x NICs x spines paths, which ECMP spreads by the UDP 5-tuple.

Addresses (all private ranges nobody on this machine uses; checked at `up`):
  10.250.0.0/24   management bridge `fl-mgmt` in the root namespace (.1) and node i at .(10+i)
  10.252.L.0/24   host links of leaf L: link j is a /30, leaf .4j+1, host .4j+2; leaf loopback .254
  10.253.L.0/24   uplinks of leaf L: to spine S a /30, leaf .4S+1, spine .4S+2
  10.253.0.S/32   loopback of spine S
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from fleetctl.errors import UsageError

NETNS_PREFIX = "fl-"  # every namespace, bridge and root-side link of the lab starts with this
BRIDGE = "fl-mgmt"
MGMT_NET = "10.250.0.0/24"
MGMT_GATEWAY = "10.250.0.1"
FABRIC_SUPERNET = "10.252.0.0/15"
MGMT_DEV = "mgmt0"
HOST_TABLE_BASE = 100  # policy-routing table of NIC k is 100 + k
NIC_MTU = 1500
NIC_RATE_GBPS = 10.0  # nominal: veths have no rate, the site file needs one for its checks
MAX_LINKS_PER_LEAF = 62


@dataclass(frozen=True)
class LabParams:
    hosts: int = 4
    nics_per_host: int = 2
    leaves: int = 2
    spines: int = 2
    gpus_per_host: int = 0
    clock_skew: bool = False
    slurm: bool = True
    ssh: bool = True
    # Whose Slurm: "system" (this machine's) or a Debian root's ("trixie": 24.11, "sid": the newest).
    slurm_from: str = "system"

    def validate(self) -> None:
        for name, (lo, hi) in SIZE_LIMITS.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                flag = "--" + name.replace("_", "-")
                raise UsageError(f"{flag} {value}: must be between {lo} and {hi}")
        from fleetctl.lab.slurmroot import CHOICES

        if self.slurm_from not in CHOICES:
            raise UsageError(f"--slurm {self.slurm_from}: choose one of {', '.join(CHOICES)}")
        if self.leaves > self.hosts:
            raise UsageError(f"--leaves {self.leaves}: more leaves than hosts ({self.hosts})")
        per_leaf = -(-self.hosts // self.leaves) * self.nics_per_host
        if per_leaf > MAX_LINKS_PER_LEAF:
            raise UsageError(f"{per_leaf} host links per leaf: at most {MAX_LINKS_PER_LEAF} "
                             "(add leaves or use fewer NICs)")

    def to_dict(self) -> dict:
        return asdict(self)


SIZE_LIMITS = {"hosts": (1, 200), "nics_per_host": (1, 8), "leaves": (1, 16), "spines": (1, 16),
               "gpus_per_host": (0, 16)}


@dataclass(frozen=True)
class End:
    """One end of a cable: the element (`node3:eth1`, `leaf2`), its namespace, netdev and address."""

    element: str
    netns: str
    dev: str
    address: str


@dataclass(frozen=True)
class CableLink:
    id: str
    a: End
    b: End
    prefix: int = 30

    def end(self, element: str) -> End:
        if element == self.a.element:
            return self.a
        if element == self.b.element:
            return self.b
        raise KeyError(element)


@dataclass(frozen=True)
class HostNic:
    name: str
    address: str
    gateway: str
    table: int


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    leaf: str
    mgmt_address: str
    mgmt_root_dev: str
    nics: tuple[HostNic, ...]


@dataclass(frozen=True)
class Router:
    id: str
    tier: int
    index: int
    netns: str
    loopback: str


@dataclass
class LabLayout:
    params: LabParams
    hosts: list[Host] = field(default_factory=list)
    routers: list[Router] = field(default_factory=list)
    links: dict[str, CableLink] = field(default_factory=dict)

    @property
    def leaves(self) -> list[Router]:
        return [r for r in self.routers if r.tier == 1]

    @property
    def spines(self) -> list[Router]:
        return [r for r in self.routers if r.tier == 2]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def router(self, rid: str) -> Router:
        for r in self.routers:
            if r.id == rid:
                return r
        raise KeyError(rid)

    def netns_names(self) -> list[str]:
        return [h.netns for h in self.hosts] + [r.netns for r in self.routers]

    def uplink(self, leaf: str, spine: str) -> CableLink:
        return self.links[f"{leaf}--{spine}"]


def host_netns(name: str) -> str:
    return NETNS_PREFIX + name


def leaf_of(host_index: int, params: LabParams) -> int:
    """1-based leaf of 1-based host: contiguous blocks, as even as possible."""
    return (host_index - 1) * params.leaves // params.hosts + 1


def build_layout(params: LabParams) -> LabLayout:
    params.validate()
    layout = LabLayout(params)
    for s in range(1, params.spines + 1):
        layout.routers.append(Router(f"spine{s}", 2, s, NETNS_PREFIX + f"spine{s}", f"10.253.0.{s}"))
    for leaf in range(1, params.leaves + 1):
        layout.routers.append(Router(f"leaf{leaf}", 1, leaf, NETNS_PREFIX + f"leaf{leaf}",
                                     f"10.252.{leaf}.254"))
        for s in range(1, params.spines + 1):
            lid = f"leaf{leaf}--spine{s}"
            layout.links[lid] = CableLink(
                lid,
                End(f"leaf{leaf}", NETNS_PREFIX + f"leaf{leaf}", f"spine{s}", f"10.253.{leaf}.{4 * s + 1}"),
                End(f"spine{s}", NETNS_PREFIX + f"spine{s}", f"leaf{leaf}", f"10.253.{leaf}.{4 * s + 2}"))
    next_link = {leaf: 0 for leaf in range(1, params.leaves + 1)}
    for i in range(1, params.hosts + 1):
        name, leaf = f"node{i}", leaf_of(i, params)
        nics = []
        for k in range(params.nics_per_host):
            j = next_link[leaf]
            next_link[leaf] += 1
            leaf_addr, host_addr = f"10.252.{leaf}.{4 * j + 1}", f"10.252.{leaf}.{4 * j + 2}"
            nics.append(HostNic(f"eth{k}", host_addr, leaf_addr, HOST_TABLE_BASE + k))
            lid = f"{name}:eth{k}--leaf{leaf}"
            layout.links[lid] = CableLink(
                lid,
                End(f"{name}:eth{k}", host_netns(name), f"eth{k}", host_addr),
                End(f"leaf{leaf}", NETNS_PREFIX + f"leaf{leaf}", f"n{i}e{k}", leaf_addr))
        layout.hosts.append(Host(name, host_netns(name), f"leaf{leaf}", f"10.250.0.{10 + i}",
                                 f"fl-m{i}", tuple(nics)))
    return layout


def leaf_prefixes(leaf_index: int) -> list[str]:
    """What a leaf announces: its host links (and loopback) and its uplink addresses."""
    return [f"10.252.{leaf_index}.0/24", f"10.253.{leaf_index}.0/24"]


def router_routes(layout: LabLayout, down: set[str]) -> dict[str, list[tuple[str, list[tuple[str, str]]]]]:
    """Static routes of every router given the set of links that are down: {netns: [(prefix,
    [(gateway, dev), ...])]}, an empty next-hop list meaning "no route". Recomputing this on every link
    event is how the lab emulates an instantly converged routing protocol."""
    out: dict[str, list] = {}
    for leaf in layout.leaves:
        routes = []
        for other in layout.leaves:
            if other is leaf:
                continue
            hops = [(layout.uplink(leaf.id, sp.id).b.address, sp.id) for sp in layout.spines
                    if f"{leaf.id}--{sp.id}" not in down and f"{other.id}--{sp.id}" not in down]
            routes += [(prefix, hops) for prefix in leaf_prefixes(other.index)]
        for sp in layout.spines:
            link = layout.uplink(leaf.id, sp.id)
            hops = [] if link.id in down else [(link.b.address, sp.id)]
            routes.append((f"{sp.loopback}/32", hops))
        out[leaf.netns] = routes
    for sp in layout.spines:
        routes = []
        for leaf in layout.leaves:
            link = layout.uplink(leaf.id, sp.id)
            hops = [] if link.id in down else [(link.a.address, leaf.id)]
            routes += [(prefix, hops) for prefix in leaf_prefixes(leaf.index)]
        out[sp.netns] = routes
    return out
