"""The fabric of a routed network from TTL-traced paths: which hop addresses belong to one switch,
switch tiers, host cables (first hop of each NIC) and switch cables (consecutive hops).

Input: the fabric NICs (`node:nic` -> address, prefix length) and traces (source NIC, destination
NIC, hop addresses with None for a hop that did not answer). Routers answer time-exceeded from
their ingress port (`icmp_errors_use_inbound_ifaddr`, the usual setting of routed fabrics) or from
a loopback; either way one switch answers from several addresses, grouped here by three rules:

1. every first hop of one NIC is the same switch (a NIC is cabled to one port);
2. the last switch hop towards a NIC is the switch that NIC sends to first;
3. for consecutive hops X then Y, Y answered from its end of the cable X->Y; the other end of that
   point-to-point subnet (/31 or /30) is X's egress, which X answers from when traffic comes the
   other way: it is X's too. The host NICs' prefix length decides which subnet size is tried first.

A pair's switch count is the longest answered prefix over its flows in both directions (all ECMP
paths of a Clos are shortest paths), so a trailing unanswered hop of one flow is not mistaken for
the end of its path. Unanswered hops break only the rules that need them.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field

from fleetctl.discover.fabric import FabricSpec, LinkSpec, tiers_from_leaves

TIER_NAMES = {1: "leaf", 2: "spine", 3: "core"}
_ID_OK = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,62}$")


@dataclass
class Trace:
    src: str  # `node:nic`
    dst: str
    hops: list  # hop address or None, TTL 1 first


@dataclass
class TracedFabric:
    spec: FabricSpec = field(default_factory=FabricSpec)
    groups: dict[str, list[str]] = field(default_factory=dict)  # switch id -> addresses it answered from
    first_hop: dict[str, str] = field(default_factory=dict)  # NIC -> switch id


class _Groups:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.apart: dict[str, set[str]] = {}  # root -> roots it must never join (one path holds both)

    def add(self, x: str) -> None:
        self.parent.setdefault(x, x)

    def find(self, x: str) -> str:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> bool:
        """Join the groups of a and b unless they were set apart (false then)."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if any(self.find(x) == rb for x in self.apart.get(ra, ())):
            return False
        keep, gone = min(ra, rb), max(ra, rb)
        self.parent[gone] = keep
        self.apart.setdefault(keep, set()).update(self.apart.pop(gone, set()))
        return True

    def separate(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        self.apart.setdefault(ra, set()).add(rb)
        self.apart.setdefault(rb, set()).add(ra)


def peer(address: str, seen: set[str], prefix_hint: int = 30) -> str:
    """The other end of `address`'s point-to-point subnet, when that end answered somewhere: /31
    or /30, the hint's size tried first (a /30's network and broadcast addresses are never hops)."""
    try:
        value = int(ipaddress.IPv4Address(address))
    except ValueError:
        return ""
    cands = [value ^ 1] + ([value ^ 3] if value % 4 in (1, 2) else [])
    if prefix_hint != 31:
        cands.reverse()
    for c in cands:
        text = str(ipaddress.IPv4Address(c))
        if text in seen:
            return text
    return ""


def _switch_hops(traces: list[Trace]) -> list[tuple[Trace, list]]:
    """Each trace with its switch hops: the pair's switch count, from both directions."""
    length: dict[frozenset, int] = {}
    for t in traces:
        answered = [i for i, h in enumerate(t.hops) if h]
        if answered:
            key = frozenset((t.src, t.dst))
            length[key] = max(length.get(key, 0), answered[-1] + 1)
    out = []
    for t in traces:
        n = length.get(frozenset((t.src, t.dst)), 0)
        if n:
            out.append((t, (list(t.hops) + [None] * n)[:n]))  # a short list (hostile output) padded
    return out


def infer(nics: dict[str, tuple[str, int]], traces: list[Trace], *, names: dict[str, str] | None = None,
          taken: set[str] = frozenset()) -> TracedFabric:
    """Switches, tiers and cables from traces. `names`: NIC -> the name of the switch it is cabled to
    where LLDP (or DNS) says it; the other switches get generated names (leaf1, spine1, ...) that
    avoid `taken` (host names)."""
    names = names or {}
    paths = _switch_hops(traces)
    seen = {h for _t, hops in paths for h in hops if h}
    prefixes = Counter(p for _a, p in nics.values() if p in (30, 31))
    hint = prefixes.most_common(1)[0][0] if prefixes else 30
    firsts, lasts = _end_hops(paths)
    g, refused = _group(paths, seen, hint, firsts, lasts)
    members: dict[str, list[str]] = {}
    for h in sorted(seen, key=_ip_key):
        members.setdefault(g.find(h), []).append(h)
    host_end = _host_ends(g, firsts, lasts)
    notes: list[str] = []
    directed, loops = _directed(paths, g)
    if refused:
        notes.append(f"traced fabric: {refused} point-to-point pairings refused (both ends on one path: "
                     "routers answering from loopbacks or unnumbered ports)")
    if loops:
        notes.append(f"traced fabric: {loops} paths pass a switch twice as grouped; the grouping of "
                     "answering addresses may be wrong (answers from unexpected interfaces)")
    cables = _cables(directed, seen, hint, g, notes)
    tiers = _tiers({grp for grp, _a in host_end.values()}, members, cables)
    ids = _names(members, tiers, host_end, cables, names, set(taken), notes)
    out = _traced_fabric(members, tiers, ids, host_end, cables, nics, names)
    out.spec.notes += notes
    return out


def _end_hops(paths) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """How often each address answered first on a NIC's flows, and last on the flows towards it."""
    firsts: dict[str, Counter] = {}
    lasts: dict[str, Counter] = {}
    for t, hops in paths:
        if hops[0]:
            firsts.setdefault(t.src, Counter())[hops[0]] += 1
        if hops[-1]:
            lasts.setdefault(t.dst, Counter())[hops[-1]] += 1
    return firsts, lasts


def _group(paths, seen, hint, firsts, lasts) -> tuple[_Groups, int]:
    """The answering addresses grouped into switches by the three rules; the number of rule-3
    pairings refused."""
    g = _Groups()
    for h in sorted(seen):
        g.add(h)
    for nic in sorted(set(firsts) | set(lasts)):  # rules 1 and 2
        addrs = sorted(set(firsts.get(nic, ())) | set(lasts.get(nic, ())))
        for a in addrs[1:]:
            g.union(addrs[0], a)
    # A shortest path passes a switch once: two hops of one path are two switches. This keeps rule 3
    # from joining loopbacks that happen to be neighbours in a /30.
    for _t, hops in paths:
        answered = [h for h in hops if h]
        for i, a in enumerate(answered):
            for b in answered[i + 1:]:
                g.separate(a, b)
    refused = 0
    for _t, hops in paths:
        for a, b in zip(hops, hops[1:]):
            p = peer(b, seen, hint) if a and b else ""
            if p and not g.union(a, p):  # rule 3
                refused += 1
    return g, refused


def _host_ends(g: _Groups, firsts, lasts) -> dict[str, tuple[str, str]]:
    """Host cables: NIC -> (group, switch-end address), from the most common first hop of each NIC
    (else the last hop towards it, whose switch end is unknown)."""
    host_end: dict[str, tuple[str, str]] = {}
    for nic in sorted(set(firsts) | set(lasts), key=_natural):
        if nic in firsts:
            hop = firsts[nic].most_common(1)[0][0]
            host_end[nic] = (g.find(hop), hop)
        else:
            host_end[nic] = (g.find(lasts[nic].most_common(1)[0][0]), "")
    return host_end


def _directed(paths, g: _Groups) -> tuple[set[tuple[str, str, str]], int]:
    """Consecutive hops in different groups: (from group, to group, address the far end answered
    from); and the number of paths that pass a group twice."""
    directed: set[tuple[str, str, str]] = set()
    loops = 0
    for t, hops in paths:
        route = [g.find(h) if h else None for h in hops]
        if len([r for r in route if r]) != len({r for r in route if r}):
            loops += 1
        for (a, b), (ga, gb) in zip(zip(hops, hops[1:]), zip(route, route[1:])):
            if a and b and ga != gb:
                directed.add((ga, gb, b))
    return directed, loops


def _traced_fabric(members, tiers, ids, host_end, cables, nics, names) -> TracedFabric:
    """The switches (with the addresses they answered from), host cables and switch cables (lower
    tier first) as a TracedFabric."""
    out = TracedFabric()
    spec = out.spec
    for grp, addrs in members.items():
        sid = ids[grp]
        named = "named by LLDP" if sid in set(names.values()) else "name generated"
        spec.switches[sid] = {"tier": tiers[grp], "model": "", "address": "",
                              "comment": f"inferred from traced paths ({named}; loopback unknown: the mesh's "
                                         "switch probes need `address`); answered from "
                                         + ", ".join(addrs[:6]) + (" ..." if len(addrs) > 6 else "")}
        out.groups[sid] = addrs
    for nic, (grp, addr) in host_end.items():
        out.first_hop[nic] = ids[grp]
        spec.links.append(LinkSpec(nic, ids[grp], nics.get(nic, ("", 0))[0], addr, 0.0, "trace"))
    for x, y, x_addr, y_addr in cables:
        if tiers[x] > tiers[y]:
            x, y, x_addr, y_addr = y, x, y_addr, x_addr
        spec.links.append(LinkSpec(ids[x], ids[y], x_addr, y_addr, 0.0, "trace"))
    spec.sources.append("trace")
    return out


def _cables(directed, seen, hint, g: _Groups, notes) -> list[tuple[str, str, str, str]]:
    """Switch cables from directed hops: the two directions of one cable are joined by their
    point-to-point subnet; without one, by count between the same two switches."""
    cables: dict[frozenset, tuple[str, str, str, str]] = {}
    unpaired: dict[tuple[str, str], list[str]] = {}
    for x, y, b in sorted(directed):
        p = peer(b, seen, hint)
        if p and g.find(p) == x:
            cables.setdefault(frozenset((p, b)), (x, y, p, b) if x < y else (y, x, b, p))
        else:
            unpaired.setdefault((x, y), []).append(b)
    done: set[tuple[str, str]] = set()
    for (x, y), far in sorted(unpaired.items()):
        if (x, y) in done:
            continue
        back = unpaired.get((y, x), [])
        done |= {(x, y), (y, x)}
        if max(len(far), len(back)) > 1:
            notes.append(f"traced fabric: {max(len(far), len(back))} cables between two switches without "
                         "point-to-point subnets: their ends are paired by order, not by address")
        for i in range(max(len(far), len(back))):
            # far: addresses of y's ends (x -> y); back: addresses of x's ends (y -> x)
            x_addr = back[i] if i < len(back) else ""
            y_addr = far[i] if i < len(far) else ""
            if not any(set(c[:2]) == {x, y} and {x_addr, y_addr} & set(c[2:]) - {""} for c in cables.values()):
                cables[frozenset((x, y, i))] = (x, y, x_addr, y_addr)
    return sorted(cables.values(), key=lambda c: (c[0], c[1], _ip_key(c[2] or c[3])))


def _tiers(leaves: set[str], members, cables) -> dict[str, int]:
    adjacent: dict[str, set[str]] = {grp: set() for grp in members}
    for x, y, _a, _b in cables:
        adjacent[x].add(y)
        adjacent[y].add(x)
    tier = tiers_from_leaves(leaves, adjacent)
    return {grp: tier.get(grp, 2) for grp in members}


def _names(members, tiers, host_end, cables, names, taken, notes) -> dict[str, str]:
    """LLDP's name for a switch where its NICs' neighbours agree on one, else `leaf1`, `spine1`, ...
    in order of the first host cabled to it (leaves) or of its lowest address (others)."""
    out: dict[str, str] = {}
    votes: dict[str, Counter] = {}
    for nic, (grp, _addr) in host_end.items():
        if names.get(nic):
            votes.setdefault(grp, Counter())[names[nic]] += 1
    for grp, counter in sorted(votes.items()):
        name, _n = counter.most_common(1)[0]
        if _ID_OK.match(name) and name not in out.values():
            out[grp] = name
    used = set(taken) | set(out.values())
    first_host = {}
    for nic in sorted(host_end, key=_natural):
        first_host.setdefault(host_end[nic][0], nic)
    order = sorted(members, key=lambda grp: (tiers[grp], 0 if grp in first_host else 1,
                                             _natural(first_host.get(grp, "")), [_ip_key(a) for a in members[grp]]))
    counters: Counter = Counter()
    for grp in order:
        if grp in out:
            continue
        base = TIER_NAMES.get(tiers[grp], f"tier{tiers[grp]}-")
        while True:
            counters[base] += 1
            name = f"{base}{counters[base]}"
            if name not in used:
                break
        out[grp] = name
        used.add(name)
    generated = [out[grp] for grp in order if out[grp] not in set(names.values())]
    if generated:
        notes.append(f"traced fabric: {len(generated)} switch names generated ({', '.join(generated[:8])}"
                     f"{' ...' if len(generated) > 8 else ''}): rename them to the real ones")
    return out


def _natural(text: str) -> list:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text)]


def _ip_key(address: str):
    try:
        return (0, int(ipaddress.IPv4Address(address)))
    except ValueError:
        return (1, address)


def merge(spec: FabricSpec, traced: TracedFabric) -> None:
    """Add a traced fabric to one read from LLDP: LLDP's host cables (with their ports) stay, the
    traces fill in their switch-end addresses and add the switches and switch cables LLDP lacks."""
    have = {l.a: l for l in spec.links  # host cables (LLDP writes them host end first)
            if l.devices()[1] in spec.switches and l.devices()[0] not in spec.switches}
    pairs = {frozenset(l.devices()) for l in spec.links
             if l.devices()[0] in spec.switches and l.devices()[1] in spec.switches}
    for sid, info in traced.spec.switches.items():
        spec.switches.setdefault(sid, dict(info))
    for link in traced.spec.links:
        a, b = link.devices()
        if ":" in link.a and a not in traced.spec.switches:  # a host cable
            known = have.get(link.a)
            if known is not None:
                known.b_address = known.b_address or link.b_address
                continue
        elif frozenset((a, b)) in pairs:
            continue
        spec.links.append(link)
    spec.sources.append("trace")
    spec.notes += traced.spec.notes
