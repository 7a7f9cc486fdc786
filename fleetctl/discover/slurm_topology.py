"""Slurm's view of the discovered fabric: topology.conf for the topology/tree and topology/block
plugins (what NVIDIA's Topograph writes), and what changed against a topology.conf in use.

tree: a leaf (a switch with a host cable) lists its nodes (`SwitchName=leaf1 Nodes=gpu[001-016]`);
a switch of a higher tier lists the switches of the tier below that it is cabled to
(`SwitchName=spine1 Switches=leaf[1-4]`). A leaf-spine fabric's leaves thus have one parent per
spine, as slurmibtopology writes them; Slurm accepts that and schedules on the leaves.

block: one block per multi-node NVLink domain (GB200 NVL72: the nodes whose GPUs share a cluster UUID
and clique id, read by the discovery from NVML or nvidia-smi), as Topograph writes them; nodes in no
such domain get one block per leaf (the nodes that share a leaf, or on a rail-optimized fabric whose
first rail shares one).

A node cabled to several leaves (one per rail) is placed under the leaf of its first fabric NIC in
name order, with a comment: Slurm's tree needs each node under one leaf to count switches right.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fleetctl.config.topology import parse_block_conf, parse_topology_conf
from fleetctl.discover.fabric import FabricSpec
from fleetctl.errors import ConfigError
from fleetctl.nodeset import fold, natural_order

PLUGINS = ("tree", "block")


@dataclass
class SlurmTopology:
    """Leaves with their nodes, higher switches with their children, and what could not be placed."""
    leaves: dict[str, list[str]] = field(default_factory=dict)  # leaf -> nodes (natural order)
    children: dict[str, list[str]] = field(default_factory=dict)  # tier >= 2 switch -> lower switches
    unplaced: list[str] = field(default_factory=list)  # nodes with no cable to a switch
    multi_leaf: dict[str, list[str]] = field(default_factory=dict)  # node -> its leaves, when several
    domains: dict[str, str] = field(default_factory=dict)  # node -> NVLink domain (uuid/clique), when in one

    def switch_of(self) -> dict[str, str]:
        return {n: leaf for leaf, nodes in self.leaves.items() for n in nodes}


def from_fabric(fabric: FabricSpec, nodes: list[str], domains: dict[str, str] | None = None) -> SlurmTopology:
    """The Slurm hierarchy of `fabric` for `nodes` (the nodes that answered the discovery);
    `domains`: node -> its multi-node NVLink domain, for the block plugin."""
    tiers = {s: int(info.get("tier") or 0) for s, info in fabric.switches.items()}
    host_leaves: dict[str, dict[str, str]] = defaultdict(dict)  # node -> {nic: leaf}
    below: dict[str, set[str]] = defaultdict(set)
    wanted = set(nodes)
    for link in fabric.links:
        a, b = link.devices()
        for node_end, other, dev in ((link.a, b, a), (link.b, a, b)):
            if dev in wanted and other in tiers:
                nic = node_end.split(":", 1)[1] if ":" in node_end else ""
                host_leaves[dev].setdefault(nic, other)
        if a in tiers and b in tiers and tiers[a] != tiers[b]:
            low, high = sorted((a, b), key=lambda s: tiers[s])
            below[high].add(low)
    topo = SlurmTopology(domains={n: d for n, d in (domains or {}).items() if d and n in wanted})
    leaves: dict[str, list[str]] = defaultdict(list)
    for node in natural_order(wanted):
        by_nic = host_leaves.get(node)
        if not by_nic:
            topo.unplaced.append(node)
            continue
        distinct = sorted(set(by_nic.values()), key=_natural)
        if len(distinct) > 1:
            topo.multi_leaf[node] = distinct
        leaves[by_nic[min(by_nic, key=_natural)]].append(node)
    topo.leaves = {leaf: leaves[leaf] for leaf in sorted(leaves, key=_natural)}
    reach = set(topo.leaves)
    for switch in sorted(below, key=lambda s: (tiers[s], _natural(s))):
        kids = [c for c in sorted(below[switch], key=_natural) if c in reach]
        if kids:
            topo.children[switch] = kids
            reach.add(switch)
    return topo


def blocks(topo: SlurmTopology) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(block name -> nodes, block name -> what it is): NVLink domains first (`nvl1`, ... in the order
    of their first node), then one block per leaf for the nodes in no domain."""
    by_domain: dict[str, list[str]] = defaultdict(list)
    for node in natural_order(topo.domains):
        by_domain[topo.domains[node]].append(node)
    out, what = {}, {}
    for i, (domain, nodes) in enumerate(by_domain.items(), 1):
        out[f"nvl{i}"], what[f"nvl{i}"] = nodes, f"NVLink domain {domain}"
    for leaf, nodes in topo.leaves.items():
        rest = [n for n in nodes if n not in topo.domains]
        if rest:
            out[leaf], what[leaf] = rest, f"the nodes under leaf {leaf}"
    return out, what


def render(topo: SlurmTopology, plugin: str, *, cluster: str = "", sources: list[str] = ()) -> str:
    """topology.conf text for `plugin` (tree or block)."""
    if plugin not in PLUGINS:
        raise ValueError(f"unknown topology plugin {plugin!r}")
    if not topo.leaves and not topo.domains:
        raise ConfigError("the discovered fabric cables no node to a switch: there is no topology to write "
                          "(give --ibnetdiscover FILE, run lldpd on the hosts, or --source trace)")
    lines = [f"# topology.conf for TopologyPlugin=topology/{plugin}, written by `fleetctl site discover`"
             + (f" for cluster {cluster}" if cluster else ""),
             f"# from: {', '.join(sources) or 'the discovered fabric'}; "
             f"{sum(len(n) for n in topo.leaves.values())} nodes under {len(topo.leaves)} leaves"]
    if topo.multi_leaf:
        lines.append(f"# {len(topo.multi_leaf)} nodes are cabled to several leaves (one per rail): each is "
                     "placed under the leaf of its first fabric NIC")
    if topo.unplaced:
        lines.append(f"# no switch cable seen for {fold(topo.unplaced)}: not in this file (Slurm will not "
                     "schedule a node that is in no switch)")
    if plugin == "tree":
        lines += [f"SwitchName={leaf} Nodes={fold(nodes)}" for leaf, nodes in topo.leaves.items()]
        lines += [f"SwitchName={s} Switches={fold(kids)}" for s, kids in topo.children.items()]
    else:
        found, what = blocks(topo)
        for name, nodes in found.items():
            lines += [f"# {what[name]}", f"BlockName={name} Nodes={fold(nodes)}"]
    return "\n".join(lines) + "\n"


def read(text: str, source: str) -> tuple[str, dict[str, list[str]], dict[str, list[str]]]:
    """(plugin, leaves or blocks -> nodes, switch -> child switches) of a topology.conf."""
    if any(line.split("=", 1)[0].strip().lower() == "blockname" for line in text.splitlines()):
        blocks, _sizes = parse_block_conf(text, source)
        return "block", {b.name: list(b.nodes) for b in blocks.values()}, {}
    switches = parse_topology_conf(text, source)
    leaves = {s.name: list(s.nodes) for s in switches.values() if s.nodes}
    children = {s.name: list(s.children) for s in switches.values() if s.children}
    return "tree", leaves, children


def diff(text: str, source: str, topo: SlurmTopology, plugin: str) -> dict:
    """What changed between the topology.conf `text` and the discovered topology: nodes that moved
    to another leaf (or block), nodes new or gone, switches new or gone, switch parents changed."""
    have_plugin, leaves, children = read(text, source)
    if have_plugin != plugin:
        raise ConfigError(f"{source} is a topology/{have_plugin} file; compare it with "
                          f"--slurm-topology {have_plugin}")
    was = {n: leaf for leaf, nodes in leaves.items() for n in nodes}
    now = topo.switch_of() if plugin == "tree" else {n: b for b, ns in blocks(topo)[0].items() for n in ns}
    above = topo.children if plugin == "tree" else {}  # a block file has no switches above the blocks
    before = set(leaves) | set(children)
    after = set(topo.leaves) | set(above) if plugin == "tree" else set(blocks(topo)[0])
    out = {"against": source, "plugin": plugin,
           "moved": [{"node": n, "from": was[n], "to": now[n]} for n in natural_order(set(was) & set(now))
                     if was[n] != now[n]],
           "new_nodes": natural_order(set(now) - set(was)), "missing_nodes": natural_order(set(was) - set(now)),
           "new_switches": sorted(after - before, key=_natural),
           "missing_switches": sorted(before - after, key=_natural),
           "children": [{"switch": s, "from": children[s], "to": above[s]}
                        for s in sorted(set(children) & set(above), key=_natural)
                        if sorted(children[s]) != sorted(above[s])]}
    out["changes"] = sum(len(v) for v in out.values() if isinstance(v, list))
    return out


def _natural(text: str):
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]
