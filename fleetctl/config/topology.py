"""Import the switch hierarchy of a Slurm topology.conf (topology/tree) into a site's fabric.

    SwitchName=leaf1 Nodes=gpu[001-016]
    SwitchName=spine1 Switches=leaf[1-4] LinkSpeed=400

Switches not declared in the site file are added with a tier derived from the hierarchy (1 for a
switch with Nodes=, 1 + the highest child tier for Switches=). Links are appended as raw link dicts
to site.data["fabric"]["links"] and resolved by config/site.py like declared ones: child--parent for
switches, `node:nic--switch` when the node's class has exactly one NIC (the cable is then known),
else `node--switch` (a host endpoint: the NIC on that cable is unknown). Links the site file
already declares between the same two devices are not added again.

LinkSpeed is accepted and ignored: Slurm defines it as a relative weight without a unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.config.files import read_bounded
from fleetctl.errors import ConfigError, UsageError
from fleetctl.model.cluster import Cluster, Switch
from fleetctl.nodeset import parse_nodeset

KEYS = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes", "linkspeed": "LinkSpeed"}
MAX_TIER = 4  # the schema's limit on fabric.switches[].tier
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass
class TopoSwitch:
    name: str
    line: int
    nodes: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


def _logical_lines(text: str):
    """Yield (first line number, text) with comments removed and `\\` continuations joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            yield start, pending.strip()
        pending = ""
    if pending.strip():
        yield start, pending.strip()


def parse_topology_conf(text: str, source: str) -> dict[str, TopoSwitch]:
    """Parse topology.conf text into switches by name (file order kept)."""
    switches: dict[str, TopoSwitch] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            canonical = KEYS.get(key.lower())
            if not sep or canonical is None:
                if key.lower() == "blockname":
                    raise ConfigError("BlockName= (topology/block) is not supported; only the "
                                      "SwitchName= tree form is", path=where)
                raise ConfigError(f"unexpected {token!r}; expected SwitchName=, Switches=, Nodes= "
                                  "or LinkSpeed=", path=where)
            if canonical in fields:
                raise ConfigError(f"{canonical}= given twice", path=where)
            if not value:
                raise ConfigError(f"{canonical}= has no value", path=where)
            fields[canonical] = value
        name = fields.get("SwitchName")
        if name is None:
            raise ConfigError("line has no SwitchName=", path=where)
        if not _NAME.match(name):
            raise ConfigError(f"invalid switch name {name!r} (one name, no ranges)", path=where)
        if name in switches:
            raise ConfigError(f"switch {name!r} defined twice (first on line "
                              f"{switches[name].line})", path=where)
        switch = TopoSwitch(name, number)
        for key, target in (("Nodes", switch.nodes), ("Switches", switch.children)):
            if key in fields:
                try:
                    target.extend(parse_nodeset(fields[key], what=f"{key}="))
                except UsageError as exc:
                    raise ConfigError(exc.message, path=where) from None
        switches[name] = switch
    return switches


@dataclass
class TopoBlock:
    name: str
    line: int
    nodes: list[str] = field(default_factory=list)


def parse_block_conf(text: str, source: str) -> tuple[dict[str, TopoBlock], list[int]]:
    """Parse a topology/block topology.conf: (blocks by name in file order, BlockSizes)."""
    blocks: dict[str, TopoBlock] = {}
    sizes: list[int] = []
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            canonical = {"blockname": "BlockName", "nodes": "Nodes", "blocksizes": "BlockSizes"}.get(key.lower())
            if not sep or canonical is None or not value:
                raise ConfigError(f"unexpected {token[:80]!r}; expected BlockName=, Nodes= or BlockSizes=",
                                  path=where)
            if canonical in fields:
                raise ConfigError(f"{canonical}= given twice", path=where)
            fields[canonical] = value
        if "BlockSizes" in fields:
            try:
                sizes = [int(x) for x in fields["BlockSizes"].split(",")]
            except ValueError:
                raise ConfigError(f"BlockSizes={fields['BlockSizes'][:80]} is not a list of numbers",
                                  path=where) from None
            continue
        name = fields.get("BlockName")
        if name is None or not _NAME.match(name):
            raise ConfigError("line has no valid BlockName=", path=where)
        if name in blocks:
            raise ConfigError(f"block {name!r} defined twice (first on line {blocks[name].line})", path=where)
        block = TopoBlock(name, number)
        try:
            block.nodes.extend(parse_nodeset(fields.get("Nodes", ""), what="Nodes="))
        except UsageError as exc:
            raise ConfigError(exc.message, path=where) from None
        blocks[name] = block
    return blocks, sizes


def switch_tiers(switches: dict[str, TopoSwitch], source: str) -> dict[str, int]:
    """Tier of each switch: 1 with Nodes= (or nothing below), 1 + the highest child tier."""
    tiers: dict[str, int] = {}

    def tier(name: str, path: tuple[str, ...]) -> int:
        if name in tiers:
            return tiers[name]
        sw = switches[name]
        if name in path:
            cycle = " -> ".join(path[path.index(name):] + (name,))
            raise ConfigError(f"switch hierarchy has a cycle: {cycle}", path=f"{source}:{sw.line}")
        if len(path) >= MAX_TIER:  # before recursing deeper: a long chain must not exhaust the stack
            raise ConfigError(f"switch {path[0]!r} has more than {MAX_TIER} tiers below it",
                              path=f"{source}:{switches[path[0]].line}")
        for child in sw.children:
            if child not in switches:
                raise ConfigError(f"switch {name!r} lists unknown switch {child!r} in Switches=",
                                  path=f"{source}:{sw.line}")
        value = max([1] + [1 + tier(c, path + (name,)) for c in sw.children])
        if value > MAX_TIER:
            raise ConfigError(f"switch {name!r} would be tier {value}; at most {MAX_TIER} tiers "
                              "are supported", path=f"{source}:{sw.line}")
        tiers[name] = value
        return value

    for name in switches:
        tier(name, ())
    return tiers


def merge_topology_conf(cluster: Cluster, path: str) -> None:
    """Add the switches and links of topology.conf at `path` to `cluster` (before links are resolved)."""
    text = read_bounded(Path(path), "topology.conf", where=" (slurm.topology_conf)")
    switches = parse_topology_conf(text, path)
    tiers = switch_tiers(switches, path)

    for name, sw in switches.items():
        if name in cluster.switches:
            continue
        if cluster.node_class(name) is not None:
            raise ConfigError(f"switch {name!r} has the name of a node of the site file",
                              path=f"{path}:{sw.line}")
        raw = {"id": name, "tier": tiers[name], "model": "", "address": ""}
        cluster.data["fabric"]["switches"].append(raw)
        cluster.switches[name] = Switch(**raw)

    links = cluster.data["fabric"]["links"]
    connected = {frozenset((_device(l["a"]), _device(l["b"]))) for l in links}

    def add(a: str, b: str) -> None:
        pair = frozenset((_device(a), _device(b)))
        if pair in connected:
            return
        connected.add(pair)
        links.append({"id": "", "a": a, "b": b, "a_address": "", "b_address": "", "rate_gbps": 0.0})

    for name, sw in switches.items():
        for child in sw.children:
            add(child, name)
        for node in sw.nodes:
            cls = cluster.node_class(node)
            if cls is None:
                raise ConfigError(f"node {node!r} (switch {name!r}) is in no node class of the "
                                  f"site file {cluster.source}", path=f"{path}:{sw.line}")
            add(f"{node}:{cls.nics[0].name}" if len(cls.nics) == 1 else node, name)


def _device(end: str) -> str:
    return end.partition(":")[0]
