"""What changed between a site file and what discovery sees now: nodes that came or went, NICs
whose rate or MTU differs from their class, GPUs, and cables that are gone, new or moved.

A cable of the file is judged only where discovery could see it: a host end whose host answered
with an LLDP table, or a switch that answered itself (or an InfiniBand subnet, which sees all).
"""

from __future__ import annotations

from collections import Counter

from fleetctl.discover.run import Discovery
from fleetctl.model.cluster import Cluster


def _key(a: str, b: str, switches) -> tuple[str, str]:
    ends = []
    for end in (a, b):
        device = end.split(":", 1)[0]
        ends.append(device if device in switches else end)
    return tuple(sorted(ends))


def diff_site(cluster: Cluster, d: Discovery, scope: list[str]) -> dict:
    out = {"against": cluster.source, "new_nodes": [], "missing_nodes": [], "nics": [], "gpus": [],
           "missing_links": [], "new_links": [], "moved": []}
    for node in scope:
        if node in d.facts and cluster.node_class(node) is None:
            out["new_nodes"].append(node)
        elif node not in d.facts and cluster.node_class(node) is not None:
            out["missing_nodes"].append({"node": node, "why": d.failed.get(node, "did not answer")})
    for node, f in d.facts.items():
        cls = cluster.node_class(node)
        if cls is None:
            continue
        if cls.gpus.count and f.gpus.get("count", 0) != cls.gpus.count:
            out["gpus"].append({"node": node, "what": "count", "expected": cls.gpus.count,
                                "value": f.gpus.get("count", 0)})
        for spec in cls.nics:
            nic = f.nic(spec.name)
            if nic is None:
                out["nics"].append({"node": node, "nic": spec.name, "what": "missing"})
                continue
            if spec.rate_gbps and nic.rate_gbps and nic.rate_gbps != spec.rate_gbps:
                out["nics"].append({"node": node, "nic": spec.name, "what": "rate_gbps",
                                    "expected": spec.rate_gbps, "value": nic.rate_gbps})
            if spec.mtu and nic.mtu != spec.mtu:
                out["nics"].append({"node": node, "nic": spec.name, "what": "mtu", "expected": spec.mtu,
                                    "value": nic.mtu})
    _links(cluster, d, out)
    out["changes"] = sum(len(v) for k, v in out.items() if isinstance(v, list))
    return out


def _observed(cluster: Cluster, d: Discovery):
    hosts = {n for n, f in d.facts.items() if f.lldp or "lldp" not in d.fabric.sources}
    switches = set(d.switch_facts)
    everything = "ibnetdiscover" in d.fabric.sources

    def seen(link) -> bool:
        if everything:
            return True
        for ep in (link.a, link.b):
            if ep.kind == "switch" and ep.device in switches:
                return True
            if ep.kind != "switch" and ep.device in hosts and "lldp" in d.fabric.sources:
                return True
        return False
    return seen


def _links(cluster: Cluster, d: Discovery, out: dict) -> None:
    switches = set(cluster.switches) | set(d.fabric.switches)
    seen = _observed(cluster, d)
    file_links = {lid: _key(str(l.a) if l.a.kind != "nic" else l.a.element_id,
                            str(l.b) if l.b.kind != "nic" else l.b.element_id, switches)
                  for lid, l in cluster.links.items() if seen(l)}
    found = {l.id: _key(l.a, l.b, switches) for l in d.fabric.links}
    have, want = Counter(found.values()), Counter(file_links.values())
    missing, new = _surplus(file_links, want - have), _surplus(found, have - want)
    # A NIC whose cable is gone from one switch and new on another has moved.
    gone = {_nic_end(file_links[lid]): lid for lid in missing if _nic_end(file_links[lid])}
    for lid in list(new):
        nic = _nic_end(found[lid])
        if nic and nic in gone:
            out["moved"].append({"nic": nic, "from": gone[nic], "to": lid})
            missing.remove(gone.pop(nic))
            new.remove(lid)
    out["missing_links"], out["new_links"] = sorted(missing), sorted(new)


def _surplus(links: dict[str, tuple], surplus: Counter) -> list[str]:
    """Ids of the links whose ends are in `surplus` (as many per pair of ends as the surplus says:
    of parallel cables, only the count can differ)."""
    out = []
    for lid in sorted(links):
        if surplus[links[lid]] > 0:
            surplus[links[lid]] -= 1
            out.append(lid)
    return out


def _nic_end(key: tuple[str, str]) -> str:
    return next((e for e in key if ":" in e), "")
