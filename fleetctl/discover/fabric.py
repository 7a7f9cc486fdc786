"""The fabric from whichever source the site has: LLDP neighbour tables of hosts and (Linux)
switches, an InfiniBand subnet (ibnetdiscover), and switch tiers derived from the graph.

Link ids follow the site file's form (`node3:eth1--leaf2`, `leaf1--spine2`); parallel cables between
the same two devices get `#1`, `#2`, ... in switch-port order so that every id stays unique and stable.
Tiers: 1 for a switch with a host cable, else one more than its nearest tier-1 switch (capped at 4),
which is how a leaf-spine or fat tree reads from its cabling.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from fleetctl.discover.facts import NodeFacts
from fleetctl.discover.ibnet import IbFabric
from fleetctl.discover.lldp import Neighbour

MAX_TIER = 4
_ID_OK = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass
class LinkSpec:
    a: str  # `node:nic`, `node`, `switch` or `switch:port`
    b: str
    a_address: str = ""
    b_address: str = ""
    rate_gbps: float = 0.0
    source: str = ""  # lldp | ibnetdiscover
    id: str = ""

    def devices(self) -> tuple[str, str]:
        return self.a.split(":", 1)[0], self.b.split(":", 1)[0]


@dataclass
class FabricSpec:
    switches: dict[str, dict] = field(default_factory=dict)  # id -> {tier, model, address}
    links: list[LinkSpec] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def switch_id(name: str, chassis_id: str = "") -> str:
    """A switch id from an LLDP system name (its short name) or, without one, its chassis id."""
    short = name.split(".", 1)[0] if name and not _is_ip(name) else name
    if short and _ID_OK.match(short):
        return short
    if short:
        return re.sub(r"[^A-Za-z0-9_.\-]+", "-", short).strip("-") or "switch"
    return "sw-" + re.sub(r"[^0-9A-Fa-f]", "", chassis_id).lower()[-12:]


def _is_ip(text: str) -> bool:
    return bool(re.match(r"^\d+\.\d+\.\d+\.\d+$", text))


def _host_of(nb: Neighbour, hosts: set[str]) -> str:
    name = nb.system_name.split(".", 1)[0] if nb.system_name else ""
    return name if name in hosts else ""


def from_lldp(hosts: dict[str, NodeFacts], switches: dict[str, NodeFacts], spec: FabricSpec) -> None:
    """Host cables from the hosts' LLDP tables (a host end is `node:nic`), switch-to-switch cables
    from the switches' tables; a host cable only a switch saw is added from the switch side."""
    names = set(hosts)
    seen_ports: set[tuple[str, str]] = set()  # (switch, port) already cabled
    host_nics: set[tuple[str, str]] = set()
    for node in sorted(hosts):
        f = hosts[node]
        for nb in f.lldp:
            nic = f.nic_of_netdev(nb.local_port)
            if nic is None or nic.name not in f.fabric_nics or _host_of(nb, names):
                continue
            sw = switch_id(nb.system_name, nb.chassis_id)
            _switch(spec, sw, switches)
            port = nb.port
            spec.links.append(LinkSpec(f"{node}:{nic.name}", f"{sw}:{port}" if port else sw, nic.address,
                                       _port_address(switches.get(sw), port), nic.rate_gbps, "lldp"))
            seen_ports.add((sw, port))
            host_nics.add((node, nic.name))
    pairs: set[frozenset] = set()
    for sw in sorted(switches):
        f = switches[sw]
        _switch(spec, sw, switches)
        for nb in f.lldp:
            if (sw, nb.local_port) in seen_ports:
                continue
            host = _host_of(nb, names)
            if host:
                nic = hosts[host].nic_of_netdev(nb.port)
                if nic is None or (host, nic.name) in host_nics or nic.name not in hosts[host].fabric_nics:
                    continue
                spec.links.append(LinkSpec(f"{host}:{nic.name}", f"{sw}:{nb.local_port}", nic.address,
                                           f.address_of(nb.local_port), nic.rate_gbps, "lldp"))
                host_nics.add((host, nic.name))
                continue
            other = switch_id(nb.system_name, nb.chassis_id)
            key = frozenset([(sw, nb.local_port), (other, nb.port)])
            if key in pairs:
                continue
            pairs.add(key)
            _switch(spec, other, switches)
            local = f.nic_of_netdev(nb.local_port)
            spec.links.append(LinkSpec(f"{sw}:{nb.local_port}", f"{other}:{nb.port}",
                                       f.address_of(nb.local_port), _port_address(switches.get(other), nb.port),
                                       local.rate_gbps if local else 0.0, "lldp"))
    if any(f.lldp for f in hosts.values()) or switches:
        spec.sources.append("lldp")


def _port_address(f: NodeFacts | None, port: str) -> str:
    return f.address_of(port) if f is not None and port else ""


def _switch(spec: FabricSpec, sw: str, facts: dict[str, NodeFacts]) -> None:
    if sw not in spec.switches:
        f = facts.get(sw)
        address = f.loopback[0].split("/")[0] if f is not None and f.loopback else ""
        spec.switches[sw] = {"tier": 0, "model": "", "address": address}


def from_ibnetdiscover(ib: IbFabric, hosts: dict[str, NodeFacts], spec: FabricSpec,
                       names: dict[str, str] | None = None) -> None:
    """Switches and cables of an InfiniBand subnet. A channel adapter is a host's NIC when one of its
    GUIDs matches a NIC the host reported, else the host is named by the node-name map or by the
    first word of its description (`gpu001 HCA-1`, `node7 mlx5_0`)."""
    names = names or {}
    by_guid = {}
    for node, f in hosts.items():
        for nic in f.nics:
            for g in nic.guids:
                by_guid[g.lower().zfill(16)[-16:]] = (node, nic)
    descs = [d.description for d in ib.switches]
    ends: dict[str, tuple[str, bool]] = {}  # guid -> (element, is switch)
    for dev in ib.switches:
        label = names.get(dev.guid) or (dev.description if descs.count(dev.description) == 1 else "")
        sid = label if label and _ID_OK.match(label) else dev.token
        ends[dev.guid] = (sid, True)
        spec.switches.setdefault(sid, {"tier": 0, "model": dev.description if label != dev.description else "",
                                       "address": ""})
    for dev in ib.cas:
        ends[dev.guid] = (_ca_element(dev, names, by_guid, hosts), False)
    for c in ib.cables:
        (a, a_sw), (b, b_sw) = ends[c.a_guid], ends[c.b_guid]
        if not a_sw and not b_sw:
            continue  # back-to-back HCAs: no switch on the cable, not a fabric link
        a_end = f"{a}:{c.a_port}" if a_sw else a
        b_end = f"{b}:{c.b_port}" if b_sw else b
        spec.links.append(LinkSpec(a_end, b_end, rate_gbps=c.rate_gbps, source="ibnetdiscover"))
    spec.sources.append("ibnetdiscover")


def _ca_element(dev, names, by_guid, hosts) -> str:
    for g in [dev.guid, *dev.port_guids.values()]:
        if g in by_guid:
            node, nic = by_guid[g]
            return f"{node}:{nic.name}"
    name = names.get(dev.guid, "")
    words = dev.description.split()
    if not name and len(words) >= 2 and re.match(r"^(HCA-\d+|[a-z]+\d*_\d+)$", words[1]):
        name = words[0]
    if not name or not _ID_OK.match(name):
        return dev.token
    if name in hosts and len(words) >= 2 and hosts[name].nic(words[1]):
        return f"{name}:{words[1]}"
    return name


def tiers_from_leaves(leaves: set[str], adjacent: dict[str, set[str]]) -> dict[str, int]:
    """Switch -> tier: leaves (a host cable) are 1, each switch one more than the nearest switch of
    a lower tier (breadth first), at most MAX_TIER; switches no leaf reaches are left out."""
    tier = {s: 1 for s in leaves}
    queue = deque(sorted(leaves))
    while queue:
        s = queue.popleft()
        for t in sorted(adjacent[s]):
            if t not in tier:
                tier[t] = min(MAX_TIER, tier[s] + 1)
                queue.append(t)
    return tier


def assign_tiers(spec: FabricSpec) -> None:
    adjacent: dict[str, set[str]] = {s: set() for s in spec.switches}
    leaves = set()
    for link in spec.links:
        a, b = link.devices()
        a_sw, b_sw = a in spec.switches, b in spec.switches
        if a_sw and b_sw:
            adjacent[a].add(b)
            adjacent[b].add(a)
        elif a_sw or b_sw:
            leaves.add(a if a_sw else b)
    tier = tiers_from_leaves(leaves, adjacent)
    for s, info in spec.switches.items():
        info["tier"] = tier.get(s, 2 if adjacent[s] else 1)
        if s not in tier:
            spec.notes.append(f"switch {s}: no path to a host cable; tier guessed as {info['tier']}")


def assign_ids(spec: FabricSpec) -> None:
    """`node:nic--switch` or lower-tier switch first; parallel cables numbered in port order."""
    groups: dict[str, list[LinkSpec]] = {}
    for link in spec.links:
        a, b = link.a, link.b
        a_dev, b_dev = link.devices()
        a_sw, b_sw = a_dev in spec.switches, b_dev in spec.switches
        if (a_sw and not b_sw) or (a_sw and b_sw and spec.switches[b_dev]["tier"] < spec.switches[a_dev]["tier"]):
            link.a, link.b, link.a_address, link.b_address = b, a, link.b_address, link.a_address
        base = f"{_element(link.a, spec)}--{_element(link.b, spec)}"
        groups.setdefault(base, []).append(link)
    for base, links in groups.items():
        if len(links) == 1:
            links[0].id = base
            continue
        links.sort(key=lambda l: (_port_key(l.a), _port_key(l.b)))
        for i, link in enumerate(links, 1):
            link.id = f"{base}#{i}"


def _element(end: str, spec: FabricSpec) -> str:
    device = end.split(":", 1)[0]
    return device if device in spec.switches else end


def _port_key(end: str):
    port = end.split(":", 1)[1] if ":" in end else ""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", port)]
