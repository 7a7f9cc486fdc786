"""The Site model: a validated site file with its node classes, switches and links resolved.

Beyond the schema, this checks what a schema cannot: a node in two classes, duplicate switch or link
ids, a link naming a switch, node or NIC that does not exist.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.config.schema import validate
from fleetctl.errors import ConfigError, UsageError
from fleetctl.nodeset import (MAX_NODES, NodeSet, check_node_name, contains, empty, is_node_name,
                             parse_nodeset)


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
class Site:
    name: str
    source: str
    data: dict
    node_classes: list[NodeClass] = field(default_factory=list)
    switches: dict[str, Switch] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)

    # Sections as validated dicts (defaults filled in): site.access["ssh"]["user"].
    @property
    def access(self) -> dict:
        return self.data["access"]

    @property
    def slurm(self) -> dict:
        return self.data["slurm"]

    @property
    def checks(self) -> dict:
        return self.data["checks"]

    @property
    def thresholds(self) -> dict:
        return self.data["thresholds"]

    @property
    def lab(self) -> dict:
        return self.data["lab"]

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

    def links_of(self, device: str) -> list[Link]:
        return [l for l in self.links.values() if device in (l.a.device, l.b.device)]


MAX_SITE_BYTES = 32 * 1024 * 1024  # room for explicit links of a 10,000-node cluster, and a bound
MAX_KEY_DEPTH = 64  # parts of one dotted key (a.b.c): tomllib's cost grows with the square of it
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_DOTTED_KEY = re.compile(_KEY_PART + r"(?:[ \t]*\.[ \t]*" + _KEY_PART + ")*")


def load_site(path: str | os.PathLike) -> Site:
    """Read, validate and resolve a site file."""
    path = Path(path).expanduser()
    return parse_site(read_bounded(path, "site file"), source=str(path))


def read_bounded(path: Path, what: str, *, where: str = "", limit: int = MAX_SITE_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes, or ConfigError (never a FIFO or device that
    would block or never end)."""
    try:
        with open(path, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"{what} is not a regular file", path=str(path))
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ConfigError(f"{what} larger than {limit // 2**20} MiB", path=str(path))
        return data.decode()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found{where}", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what}: {exc}", path=str(path)) from None


def parse_site(text: str, source: str = "<site>") -> Site:
    if len(text) > MAX_SITE_BYTES:
        raise ConfigError(f"site file larger than {MAX_SITE_BYTES // 2**20} MiB", path=source)
    _check_key_depth(text, source)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=source) from None
    except RecursionError:
        raise ConfigError("not valid TOML: arrays or tables nested too deeply", path=source) from None
    data = validate(document, source)
    site = Site(name=data["cluster"]["name"], source=source, data=data)
    _resolve_node_classes(site)
    _resolve_switches(site)
    _check_addresses(site)
    _check_slurm(site)
    if data["slurm"]["topology_conf"]:
        from fleetctl.config.topology import merge_topology_conf

        merge_topology_conf(site, _relative_to(source, data["slurm"]["topology_conf"]))
    _resolve_links(site)
    return site


def _check_key_depth(text: str, source: str) -> None:
    """Refuse dotted keys of more than MAX_KEY_DEPTH parts before tomllib sees them. The scan matches
    every part TOML allows in a key (bare, "basic", 'literal') and may over-count a dotted run inside
    a string value; no real site key comes close to the limit."""
    for match in _DOTTED_KEY.finditer(text):
        run = match.group()
        if run.count(".") >= MAX_KEY_DEPTH and len(re.findall(_KEY_PART, run)) > MAX_KEY_DEPTH:
            line = text.count("\n", 0, match.start()) + 1
            raise ConfigError(f"line {line}: a key of more than {MAX_KEY_DEPTH} dotted parts", path=source)


def _relative_to(source: str, path: str) -> str:
    p = Path(path).expanduser()
    if not p.is_absolute() and source and not source.startswith("<"):
        p = Path(source).parent / p
    return str(p)


def _resolve_node_classes(site: Site) -> None:
    seen = empty()
    names: set[str] = set()
    for i, raw in enumerate(site.data["node_classes"]):
        key = f"node_classes[{i}]"
        if raw["name"] in names:
            raise ConfigError(f"duplicate node class name {raw['name']!r}", path=site.source,
                              key=f"{key}.name")
        names.add(raw["name"])
        nodes = parse_nodeset(raw["nodes"])  # valid: the schema parsed it
        if len(seen) + len(nodes) > MAX_NODES:
            raise ConfigError(f"the site file has more than {MAX_NODES:,} nodes", path=site.source,
                              key=f"{key}.nodes")
        overlap = nodes.intersection(seen)
        if overlap:
            raise ConfigError(f"nodes {overlap} are already in another node class",
                              path=site.source, key=f"{key}.nodes")
        seen.update(nodes)
        nic_names = [n["name"] for n in raw["nics"]]
        dup = {n for n in nic_names if nic_names.count(n) > 1}
        if dup:
            raise ConfigError(f"duplicate NIC name {sorted(dup)[0]!r}", path=site.source,
                              key=f"{key}.nics")
        site.node_classes.append(NodeClass(
            name=raw["name"], nodes=nodes, cpus=raw["cpus"], memory_gb=raw["memory_gb"],
            kernel_version=raw["kernel_version"], mounts=tuple(raw["mounts"]),
            gpus=GpuSpec(**raw["gpus"]), nics=tuple(NicSpec(**n) for n in raw["nics"])))


def _resolve_switches(site: Site) -> None:
    for i, raw in enumerate(site.data["fabric"]["switches"]):
        if raw["id"] in site.switches:
            raise ConfigError(f"duplicate switch id {raw['id']!r}", path=site.source,
                              key=f"fabric.switches[{i}].id")
        if site.node_class(raw["id"]) is not None:
            raise ConfigError(f"switch id {raw['id']!r} is also the name of a node", path=site.source,
                              key=f"fabric.switches[{i}].id")
        site.switches[raw["id"]] = Switch(**raw)


def _check_addresses(site: Site) -> None:
    for node in site.access["ssh"]["addresses"]:
        try:
            check_node_name(node)
        except UsageError as exc:
            raise ConfigError(exc.message, path=site.source, key="access.ssh.addresses") from None


def _check_slurm(site: Site) -> None:
    # The prefix marks fleetctl's own drains; a space or ':' in it would make that test ambiguous.
    prefix = site.slurm["drain_prefix"]
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", prefix):
        raise ConfigError(f"invalid drain prefix {prefix!r}: letters, digits, '_', '.', '-' only",
                          path=site.source, key="slurm.drain_prefix")


def parse_endpoint(site: Site, text: str, address: str = "", *, key: str = "") -> Endpoint:
    device, _, port = text.partition(":")
    if not device:
        raise ConfigError(f"empty link end {text!r}", path=site.source, key=key)
    if device in site.switches:
        return Endpoint("switch", device, port, address)
    cls = site.node_class(device)
    if cls is None:
        raise ConfigError(f"link end {text!r} names neither a switch of fabric.switches nor a node "
                          "of node_classes", path=site.source, key=key)
    if not port:
        return Endpoint("host", device, "", address)
    if cls.nic(port) is None:
        known = ", ".join(n.name for n in cls.nics) or "none"
        raise ConfigError(f"link end {text!r}: node class {cls.name!r} has no NIC {port!r} "
                          f"(its NICs: {known})", path=site.source, key=key)
    return Endpoint("nic", device, port, address)


def link_id(a: Endpoint, b: Endpoint, site: Site | None = None) -> str:
    """Derived link id: the node end first, else the lower-tier switch first (leaf1--spine2), so the
    id does not depend on which end the file names first."""
    if a.kind == "switch" and b.kind != "switch":
        a, b = b, a
    elif a.kind == b.kind == "switch" and site is not None:
        if site.switches[b.device].tier < site.switches[a.device].tier:
            a, b = b, a
    return f"{a.element_id}--{b.element_id}"


def _resolve_links(site: Site) -> None:
    for i, raw in enumerate(site.data["fabric"]["links"]):
        key = f"fabric.links[{i}]"
        a = parse_endpoint(site, raw["a"], raw["a_address"], key=f"{key}.a")
        b = parse_endpoint(site, raw["b"], raw["b_address"], key=f"{key}.b")
        if a.device == b.device:
            raise ConfigError(f"link connects {a.device!r} to itself", path=site.source, key=key)
        if a.kind != "switch" and b.kind != "switch":
            raise ConfigError("a link must have a switch on at least one end", path=site.source, key=key)
        lid = raw["id"] or link_id(a, b, site)
        if "->" in lid or any(ch.isspace() for ch in lid):
            raise ConfigError(f"link id {lid!r} must not contain '->' or spaces", path=site.source,
                              key=f"{key}.id")
        if lid in site.links:
            raise ConfigError(f"duplicate link id {lid!r} (give parallel links explicit ids)",
                              path=site.source, key=f"{key}.id" if raw["id"] else key)
        site.links[lid] = Link(lid, a, b, raw["rate_gbps"])
