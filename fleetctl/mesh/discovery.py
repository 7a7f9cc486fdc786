"""Path discovery, collector side: which flows to trace, and traced hops -> site elements.

Flows: every probe pair (src NIC, dst NIC) gets one flow per source port; flow id =
pair index * len(sports) + j. A flow's probes take (src, sport) -> (dst, port); its echoes take
(dst, port) -> (src, sport), a 5-tuple of its own, traced from the responder's node.

Hops: with `icmp_errors_use_inbound_ifaddr`, a router answers from its ingress port, whose address
is the switch end's `a_address`/`b_address` of a link in the site file: the hop names the link
direction (previous element -> switch). A router answering from its loopback (`switches.address`)
names the switch; the link is then the only one between the previous element and it. A flow
whose trace is incomplete or inconsistent with the site file gets the topology's candidate row
(`Topology.expected_row`) instead.

Two checks find dead links that routing has already withdrawn (no probe crosses them, so probes
alone see nothing):
- switch probes: from every NIC, a datagram to each neighbouring switch's address with a TTL that
  expires just past it; the answer must come from that switch itself. When no NIC under a switch
  reaches a neighbour that other switches reach, their link is down (routes to a switch's
  loopback use its direct links in a Clos fabric);
- coverage: a switch-to-switch link direction that the traced flows should cross often (expected
  count >= COVERAGE_MIN under uniform ECMP) but none does, and that no switch probe checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleetctl.errors import ConfigError
from fleetctl.model.cluster import Cluster
from fleetctl.model.fabric import FLOW_DTYPE, Element, PathTable, Topology
from fleetctl.model.findings import Finding

COVERAGE_MIN = 12.0  # expected crossings below which an unused link direction proves nothing
TRACE_DPORT = 33434  # destination port of switch probes (nothing listens there)


@dataclass
class NicAddress:
    """A NIC as the probes address it: its topology index, node, IP address and netdev, taken from
    the NIC ends of the cluster model's links."""

    index: int  # NIC index in the topology
    node: str
    address: str
    device: str


def nic_table(cluster: Cluster, topo: Topology) -> dict[str, NicAddress]:
    """NIC id -> address and netdev, from the NIC ends of the site file's links."""
    out: dict[str, NicAddress] = {}
    for link in cluster.links.values():
        for ep in (link.a, link.b):
            if ep.kind != "nic" or not ep.address:
                continue
            nic_id = ep.element_id
            spec = cluster.node_class(ep.device).nic(ep.port)
            out[nic_id] = NicAddress(topo.nic_index(nic_id), ep.device, ep.address,
                                  (spec.netdev or spec.name) if spec else ep.port)
    return out


def hop_table(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """Address -> ("port", link id NUL switch) for switch ports, ("switch", id) for loopbacks."""
    out: dict[str, tuple[str, str]] = {}
    for sw in cluster.switches.values():
        if sw.address:
            out[sw.address] = ("switch", sw.id)
    for link in cluster.links.values():
        for ep in (link.a, link.b):
            if ep.kind == "switch" and ep.address:
                out[ep.address] = ("port", f"{link.id}\0{ep.device}")
    return out


@dataclass
class FlowPlan:
    pairs: list[tuple[int, int]]  # NIC index pairs
    sports: list[int]
    port: int
    flows: np.ndarray = field(default=None)  # FLOW_DTYPE, paths filled in by `resolve`

    def __post_init__(self) -> None:
        n = len(self.sports)
        rows = [(p * n + j, s, d, self.sports[j], -1, -1)
                for p, (s, d) in enumerate(self.pairs) for j in range(n)]
        self.flows = np.array(rows, dtype=FLOW_DTYPE)


def trace_config(topo: Topology, plan: FlowPlan, nics: dict[str, NicAddress], cluster: Cluster,
                 timeout: float = 0.3, retries: int = 1) -> dict:
    """Per node: the forward flows it sends, the echo flows it answers, its switch probes."""
    nodes: dict[str, list] = {}
    for f in plan.flows:
        s, d = topo.nics[f["src_nic"]], topo.nics[f["dst_nic"]]
        hops = int(topo.switch_distance(s, d)) + 1
        a, b = nics[s], nics[d]
        nodes.setdefault(a.node, []).append(
            [f"f{f['flow']}", a.address, int(f["sport"]), b.address, plan.port, hops, a.device])
        nodes.setdefault(b.node, []).append(
            [f"r{f['flow']}", b.address, plan.port, a.address, int(f["sport"]), hops, b.device])
    for key, info, sw, _addr in switch_probes(topo, nics, cluster):
        nodes.setdefault(info.node, []).append(
            [key, info.address, plan.port + 1, cluster.switches[sw].address, TRACE_DPORT, 2,
             info.device])
    return {"nodes": nodes, "timeout": timeout, "retries": retries}


def switch_probes(topo: Topology, nics: dict[str, NicAddress], cluster: Cluster):
    """(key, NIC, neighbour switch, link id) for every NIC and every switch next to its own."""
    out = []
    for nic_id, info in sorted(nics.items()):
        if not topo.attached(nic_id):
            continue
        own = switch_name(topo, nic_id)
        for lid, (a, b) in topo.links.items():
            if own not in (a, b):
                continue
            other = b if a == own else a
            if other in topo.switch_tier and cluster.switches[other].address:
                out.append((f"s{info.index}:{lid}", info, other, lid))
    return out


def switch_name(topo: Topology, nic: str) -> str:
    """The id of the switch a NIC is cabled to."""
    return list(topo.switch_tier)[topo.switch_of(nic)]


def hops_to_path(topo: Topology, hops_by_addr: dict, src: str, dst: str,
                 hops: list) -> list[int] | None:
    """Element indices of a traced path, or None when the trace is incomplete or inconsistent."""
    path = [topo.index("nic", src)]
    prev = src
    for hop in hops:
        kind = hops_by_addr.get(hop) if hop else None
        if kind is None:
            return None
        if kind[0] == "port":
            lid, _, sw = kind[1].partition("\0")
            ends = topo.links.get(lid)
            if ends is None or prev not in ends or sw not in ends or prev == sw:
                return None
        else:
            sw = kind[1]
            between = topo.links_between(prev, sw)
            if len(between) != 1:
                return None
            lid = between[0]
        path += [topo.link_dir(lid, prev, sw), topo.index("switch", sw)]
        prev = sw
    last = topo.links_between(prev, dst)
    if len(last) != 1:
        return None
    return path + [topo.link_dir(last[0], prev, dst), topo.index("nic", dst)]


@dataclass
class Discovery:
    paths: PathTable
    flows: np.ndarray  # FLOW_DTYPE with fwd_path / rev_path
    traced_flows: int  # directions traced (forward + echo)
    total_flows: int
    switch_results: dict[str, bool]  # switch probe key -> reached
    errors: list[str] = field(default_factory=list)

    def summary(self, topo: Topology | None = None) -> dict:
        out = {"traced": self.traced_flows, "directions": self.total_flows,
               "paths": len(self.paths), "switch_probes": len(self.switch_results),
               "switch_probes_reached": int(sum(self.switch_results.values())),
               "errors": self.errors[:10]}
        if topo is not None:
            out.update(ecmp_coverage(topo, self))
        return out


def ecmp_coverage(topo: Topology, disc: Discovery) -> dict:
    """How well the source ports spread each pair over its ECMP paths: per directed pair with
    every flow traced, distinct forward paths seen / shortest paths the fabric offers."""
    dist = topo.switch_distances()
    nxt: dict[int, list[int]] = {}
    for u, v, _e in topo.switch_edges():
        nxt.setdefault(u, []).append(v)
    memo: dict[tuple[int, int], int] = {}

    def count(u: int, d: int) -> int:  # shortest paths u -> d, by the hop-count DAG
        if u == d:
            return 1
        if (u, d) not in memo:
            memo[(u, d)] = sum(count(v, d) for v in nxt.get(u, []) if dist[v, d] == dist[u, d] - 1)
        return memo[(u, d)]

    seen: dict[tuple[int, int], set[int]] = {}
    untraced: set[tuple[int, int]] = set()
    for f in disc.flows:
        if f["dst_nic"] < 0:
            continue
        key = (int(f["src_nic"]), int(f["dst_nic"]))
        if f["fwd_path"] < 0 or not disc.paths.traced[f["fwd_path"]]:
            untraced.add(key)
        seen.setdefault(key, set()).add(int(f["fwd_path"]))
    shares = []
    for (a, b), paths in seen.items():
        if (a, b) in untraced:
            continue
        total = count(topo.switch_of(topo.nics[a]), topo.switch_of(topo.nics[b]))
        shares.append(min(1.0, len(paths) / max(1, total)))
    if not shares:
        return {}
    return {"ecmp_pairs": len(shares),
            "ecmp_pairs_all_paths_seen": round(sum(x >= 1.0 for x in shares) / len(shares), 4),
            "ecmp_paths_seen_mean_share": round(sum(shares) / len(shares), 4)}


def resolve(topo: Topology, cluster: Cluster, plan: FlowPlan, traces: dict[str, dict]) -> Discovery:
    """Turn the nodes' trace outputs into the path table and the flows' path indices.
    traces: node -> the tracer's JSON ({"paths": {key: hops}, "arrived": [...]})."""
    hop_map = hop_table(cluster)
    hops: dict[str, list] = {}
    errors: list[str] = []
    for node, out in traces.items():
        hops.update(out.get("paths", {}))
        errors += [f"{node}: {e}" for e in out.get("errors", [])]
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    src, dst, traced = [], [], []
    index: dict[tuple, int] = {}

    def add(key: tuple, elems, weights, s: int, d: int, is_traced: bool) -> int:
        if key not in index:
            index[key] = len(rows)
            rows.append((np.asarray(elems, dtype=np.int64), np.asarray(weights, dtype=float)))
            src.append(s)
            dst.append(d)
            traced.append(is_traced)
        return index[key]

    flows = plan.flows.copy()
    n_traced = 0
    for f in flows:
        s, d = int(f["src_nic"]), int(f["dst_nic"])
        for field_, key, a, b in (("fwd_path", f"f{f['flow']}", s, d),
                                  ("rev_path", f"r{f['flow']}", d, s)):
            elems = hops_to_path(topo, hop_map, topo.nics[a], topo.nics[b], hops.get(key) or [])
            if elems is not None:
                n_traced += 1
                f[field_] = add(("t", *elems), elems, np.ones(len(elems)), a, b, True)
            else:
                try:
                    e, w = topo.expected_row(topo.nics[a], topo.nics[b])
                except ConfigError:
                    continue
                f[field_] = add(("x", a, b), e, w, a, b, False)
    table = PathTable.from_rows(rows, src, dst, traced)
    switch_results = {}
    for node, out in traces.items():
        arrived = set(out.get("arrived", []))
        for key in out.get("paths", {}):
            if key.startswith("s"):
                switch_results[key] = key in arrived
    return Discovery(table, flows, n_traced, 2 * len(flows), switch_results, errors)


def dead_link_findings(topo: Topology, disc: Discovery) -> list[dict]:
    """`down` findings for links that routing withdrew (see the module docstring), serialised."""
    findings: list[Finding] = []
    checked: set[str] = set()
    by_link: dict[str, dict[str, list[bool]]] = {}  # link -> switch under the sources -> results
    for key, ok in disc.switch_results.items():
        nic_idx, _, lid = key[1:].partition(":")
        if lid not in topo.links:
            continue
        own = switch_name(topo, topo.nics[int(nic_idx)])
        by_link.setdefault(lid, {}).setdefault(own, []).append(ok)
    reached_switch: dict[str, bool] = {}
    for lid, per_side in by_link.items():
        for own, results in per_side.items():
            other = next(e for e in topo.links[lid] if e != own)
            reached_switch[other] = reached_switch.get(other, False) or any(results)
    for lid, per_side in by_link.items():
        checked.add(lid)
        for own, results in per_side.items():
            other = next(e for e in topo.links[lid] if e != own)
            if not any(results) and reached_switch.get(other):
                findings.append(_down(lid, "both", len(results), {
                    "check": "switch-probe", "from_switch": own, "to_switch": other,
                    "probes_from_nics": len(results), "answered": 0,
                    "note": f"{other} answers other switches' NICs but none under {own}"}))
    dead = sorted(sw for sw, ok in reached_switch.items() if not ok)
    if dead and any(reached_switch.values()):
        for sw in dead:  # nobody reaches it, others are reached: the switch, not its links
            links = [l for l in by_link if sw in topo.links[l]]
            findings = [f for f in findings if f.element.id not in links]
            findings.append(Finding(Element("switch", sw), "down", "critical",
                                    round(1 - 0.5 ** len(links), 3),
                                    {"window": None, "check": "switch-probe",
                                     "links_probed": len(links), "answered": 0,
                                     "note": f"no NIC reaches {sw}; its neighbours answer"},
                                    source="discovery"))
            checked.update(links)
    findings += _coverage(topo, disc, checked)
    return [f.to_dict() for f in findings]


def _coverage(topo: Topology, disc: Discovery, checked: set[str]) -> list[Finding]:
    p = disc.paths
    n_el = topo.n_elements
    flows = disc.flows[disc.flows["dst_nic"] >= 0]  # a loop probe (loops.py): no NIC-to-NIC flow
    pis = np.concatenate([flows["fwd_path"], flows["rev_path"]]).astype(np.int64)
    pis = pis[pis >= 0]
    pis = pis[np.asarray(p.traced, dtype=bool)[pis]]
    # per element: traced paths crossing it, and how many ECMP would send over it (per NIC pair,
    # its expected row times the pair's traced paths; rows are remembered per switch pair)
    per_path = np.bincount(pis, minlength=len(p.indptr) - 1).astype(np.float64)
    observed = np.asarray(p.matrix(n_el).T @ per_path).ravel() if pis.size else np.zeros(n_el)
    expected = np.zeros(n_el)
    n_nic = max(1, len(topo.nics))
    keys, counts = np.unique(p.src_nic[pis].astype(np.int64) * n_nic + p.dst_nic[pis],
                             return_counts=True)
    for key, count in zip(keys.tolist(), counts.tolist()):
        e, w = topo.expected_row(topo.nics[key // n_nic], topo.nics[key % n_nic])
        expected[e] += count * w
    findings = []
    by_link: dict[str, list[int]] = {}
    for u, v, e in topo.switch_edges():
        el = topo.elements[e]
        if el.id in checked or expected[e] < COVERAGE_MIN or observed[e] > 0:
            continue
        by_link.setdefault(el.id, []).append(e)
    for lid, dirs in by_link.items():
        direction = topo.elements[dirs[0]].direction if len(dirs) == 1 else "both"
        exp = float(min(expected[d] for d in dirs))
        findings.append(_down(lid, direction, exp, {
            "check": "coverage", "expected_crossings": round(exp, 1), "observed_crossings": 0,
            "note": "traced flows avoid it: routing has withdrawn it"}))
    return findings


def _down(lid: str, direction: str, support: float, evidence: dict) -> Finding:
    return Finding(Element("link", lid, direction), "down", "critical",
                   round(float(1 - 0.5 ** support), 3), {"window": None, **evidence},
                   source="discovery")
