"""What one node's (or switch's) discovery document says, checked and typed, and which of its NICs
are fabric NICs.

The document comes from the node (untrusted): every field is type-checked and bounded here, and a
document that does not fit is a DataError for that node only.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field

from fleetctl.discover.lldp import Neighbour, parse_neighbours
from fleetctl.errors import DataError

SCHEMA = "fleetctl.discover.node/1"
MAX_NICS = 256
# Interfaces that are never fabric NICs: container and VM plumbing, tunnels, bridges.
DEFAULT_EXCLUDE = ("lo", "docker*", "virbr*", "br-*", "cni*", "flannel*", "cali*", "vxlan*", "tun*",
                   "tap*", "veth*", "kube-*", "cilium*", "tailscale*", "wg*", "bond*-slave")


@dataclass
class NicFact:
    name: str  # site NIC name: RDMA device (mlx5_0) or netdev (eth0)
    kind: str  # ethernet | infiniband | roce
    netdev: str = ""  # an RDMA device's netdev
    rate_gbps: float = 0.0
    mtu: int = 0
    addresses: list[str] = field(default_factory=list)  # CIDRs
    firmware: str = ""
    pci: str = ""
    numa_node: int | None = None
    guids: list[str] = field(default_factory=list)  # node and port GUIDs (InfiniBand)
    lids: list[int] = field(default_factory=list)
    up: bool = True
    virtual: bool = False  # a netdev without a device behind it (veth, bridge, dummy)

    @property
    def address(self) -> str:
        """The first IPv4 address (else any), without its prefix length: a link end's address."""
        plain = [a.split("/")[0] for a in self.addresses]
        return next((a for a in plain if ":" not in a), plain[0] if plain else "")


@dataclass
class NodeFacts:
    node: str
    cpus: int = 0
    memory_gb: float = 0.0
    kernel: str = ""
    gpus: dict = field(default_factory=dict)
    nics: list[NicFact] = field(default_factory=list)  # every candidate NIC, fabric ones marked below
    fabric_nics: list[str] = field(default_factory=list)
    lldp: list[Neighbour] = field(default_factory=list)
    loopback: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nvlink_domain: str = ""  # `cluster UUID/clique id` of a multi-node NVLink domain (GB200 NVL72)

    def nic(self, name: str) -> NicFact | None:
        return next((n for n in self.nics if n.name == name), None)

    def nic_of_netdev(self, netdev: str) -> NicFact | None:
        return next((n for n in self.nics if n.name == netdev or (n.netdev and n.netdev == netdev)), None)

    def address_of(self, port: str) -> str:
        nic = self.nic_of_netdev(port)
        return nic.address if nic else ""


def _str(value, what: str, limit: int = 256) -> str:
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or len(str(value)) > limit:
        raise DataError(f"{what}: not a short text")
    text = str(value)
    try:  # JSON's "\ud800" decodes to a lone surrogate: no UTF-8, and no TOML escape either
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{what}: not valid Unicode") from None
    return text


_NIC_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@\-]{0,63}$")


def _nic_name(value, what: str) -> str:
    """A NIC name goes into the site file and from there into sysfs paths on every node of its class:
    only the characters of real netdev and RDMA device names, never a path."""
    name = _str(value, what, 64)
    if not _NIC_NAME.match(name) or ".." in name:
        raise DataError(f"{what}: {name[:40]!r} is not a NIC name")
    return name


def _num(value, what: str, kind=float, high: float = 1e9):
    if value is None or value == "":
        return kind(0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
        raise DataError(f"{what}: not a number in 0..{high:g}")
    return kind(value)


def _list(value, what: str, limit: int) -> list:
    """A node's list field: absent is empty, anything but a list is the node's error; at most `limit`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DataError(f"{what}: not a list")
    return value[:limit]


def _small_int(value, high: int) -> int | None:
    """numa_node, lid: an int in 0..high, else unknown (None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high else None


def _cidrs(values, what: str) -> list[str]:
    out = []
    for v in _list(values, what, 64):
        try:
            out.append(str(ipaddress.ip_interface(_str(v, what, 64))))
        except ValueError:
            raise DataError(f"{what}: {str(v)[:40]!r} is not an address") from None
    return out


def parse_facts(doc: object, node: str) -> NodeFacts:
    """Check and type one discovery document (DataError names the node and the field)."""
    where = f"node {node}"
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise DataError(f"{where}: not a discovery document")
    if "error" in doc:
        raise DataError(f"{where}: {_str(doc['error'], where, 300)}")
    facts = NodeFacts(node=node, cpus=_num(doc.get("cpus"), f"{where}: cpus", int, 65536),
                      memory_gb=_num(doc.get("memory_gb"), f"{where}: memory_gb", float, 1e6),
                      kernel=_str(doc.get("kernel"), f"{where}: kernel"))
    facts.gpus = _gpus(doc.get("gpus") or {}, where)
    facts.nvlink_domain = _nvlink_domain((doc.get("gpus") or {}).get("nvlink_domain"), where)
    _add_nics(facts, doc.get("rdma") or [], doc.get("netdevs") or [], where)
    facts.loopback = _cidrs(doc.get("loopback"), f"{where}: loopback")
    lldp = doc.get("lldp") or {}
    if isinstance(lldp, dict) and isinstance(lldp.get("text"), str):
        facts.lldp = parse_neighbours(lldp["text"], f"{where}: lldpcli")
    elif isinstance(lldp, dict) and lldp.get("error"):
        facts.notes.append(f"no LLDP table ({_str(lldp['error'], where, 300)})")
    return facts


def _gpus(gpus, where: str) -> dict:
    if not isinstance(gpus, dict):
        raise DataError(f"{where}: gpus is not an object")
    return {"count": _num(gpus.get("count"), f"{where}: gpus.count", int, 64),
            "model": _str(gpus.get("model"), f"{where}: gpus.model"),
            "driver_version": _str(gpus.get("driver_version"), f"{where}: gpus.driver_version"),
            "vbios_version": _str(gpus.get("vbios_version"), f"{where}: gpus.vbios_version"),
            "pcie_gen": _num(gpus.get("pcie_gen"), f"{where}: gpus.pcie_gen", int, 16),
            "pcie_width": _num(gpus.get("pcie_width"), f"{where}: gpus.pcie_width", int, 32),
            "nvlinks": _num(gpus.get("nvlinks"), f"{where}: gpus.nvlinks", int, 64)}


_DOMAIN = re.compile(r"^[0-9a-fA-F-]{36}/\d{1,10}$")


def _nvlink_domain(value, where: str) -> str:
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or not _DOMAIN.match(value):
        raise DataError(f"{where}: gpus.nvlink_domain is not `cluster UUID/clique id`: {str(value)[:80]!r}")
    return value.lower()


def _add_nics(facts: NodeFacts, rdma, nets, where: str) -> None:
    """The RDMA devices, then the netdevs (a netdev behind an RDMA device gives that device its
    addresses and MTU instead); NIC names unique."""
    if not isinstance(rdma, list) or not isinstance(nets, list) or len(rdma) + len(nets) > MAX_NICS:
        raise DataError(f"{where}: rdma/netdevs are not lists of at most {MAX_NICS}")
    for r in rdma:
        facts.nics.append(_rdma_nic(r, where))
    rdma_netdevs = {n.netdev for n in facts.nics}
    for n in nets:
        if not isinstance(n, dict):
            raise DataError(f"{where}: a netdev entry is not an object")
        w = f"{where}: netdev {str(n.get('name'))[:40]!r}"
        name = _nic_name(n.get("name"), w)
        if name in rdma_netdevs:  # the RDMA device stands for it; its addresses go there
            rd = facts.nic_of_netdev(name)
            rd.addresses = _cidrs(n.get("addresses"), w)
            rd.mtu = _num(n.get("mtu"), w, int, 65536)
            continue
        facts.nics.append(NicFact(name=name, kind="ethernet", rate_gbps=_num(n.get("rate_gbps"), w, float, 1e5),
                                  mtu=_num(n.get("mtu"), w, int, 65536), addresses=_cidrs(n.get("addresses"), w),
                                  pci=_str(n.get("pci"), w, 64),
                                  numa_node=_small_int(n.get("numa_node"), 4096),
                                  up=_str(n.get("operstate"), w) in ("up", "unknown"),
                                  virtual=n.get("virtual") is True))
    names = [n.name for n in facts.nics]
    if len(set(names)) != len(names):  # a site file keys NICs by name: two of one name cannot both go in
        dup = next(n for n in names if names.count(n) > 1)
        raise DataError(f"{where}: NIC {dup!r} listed twice")


def _rdma_nic(r, where: str) -> NicFact:
    if not isinstance(r, dict):
        raise DataError(f"{where}: an RDMA entry is not an object")
    w = f"{where}: rdma {str(r.get('name'))[:40]!r}"
    ports = [p for p in _list(r.get("ports"), f"{w}: ports", 8) if isinstance(p, dict)]
    return NicFact(name=_nic_name(r.get("name"), w), kind="roce" if r.get("kind") == "roce" else "infiniband",
                   netdev=_nic_name(r.get("netdev"), w) if r.get("netdev") else "",
                   rate_gbps=_num(r.get("rate_gbps"), w, float, 1e5),
                   firmware=_str(r.get("firmware"), w), pci=_str(r.get("pci"), w, 64),
                   numa_node=_small_int(r.get("numa_node"), 4096),
                   guids=[g for g in [_str(r.get("node_guid"), w, 32)] + [_str(p.get("port_guid"), w, 32)
                                                                        for p in ports] if g],
                   lids=[p["lid"] for p in ports if _small_int(p.get("lid"), 0xFFFF)],
                   up=any("ACTIVE" in _str(p.get("state"), w) for p in ports))


def choose_fabric_nics(facts: NodeFacts, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> None:
    """Mark the fabric NICs: with `include` globs, exactly those; else RDMA devices, and the netdevs
    that are up and not plumbing (DEFAULT_EXCLUDE, `exclude`); when some of those netdevs have an
    LLDP neighbour, only those (the others reach no switch of the fabric: management, storage), and
    none when the node has RDMA devices and no LLDP at all."""
    if include:
        facts.fabric_nics = [n.name for n in facts.nics if any(fnmatch.fnmatchcase(n.name, g) for g in include)]
        return
    skip = DEFAULT_EXCLUDE + tuple(exclude)
    rdma = [n.name for n in facts.nics if n.kind != "ethernet" and not _matches(n.name, exclude)]
    nets = [n for n in facts.nics if n.kind == "ethernet" and n.up and not _matches(n.name, skip)]
    with_lldp = {nb.local_port for nb in facts.lldp}
    seen = [n for n in nets if n.name in with_lldp]
    if not seen:  # without LLDP, virtual netdevs (veths, bridges) are plumbing, not fabric
        nets = [n for n in nets if not n.virtual]
    # A node with RDMA devices and no LLDP anywhere: its plain netdevs are management or storage.
    facts.fabric_nics = rdma + [n.name for n in (seen or ([] if rdma else nets))]
    if seen and len(seen) < len(nets):
        facts.notes.append("NICs without an LLDP neighbour left out: "
                           + ", ".join(n.name for n in nets if n not in seen))


def _matches(name: str, globs) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)
