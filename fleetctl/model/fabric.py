"""The fabric view of the cluster model: elements, NICs, ECMP routing, path tables, record dtypes.

Derived from the cluster model (`Topology.from_site`) or read back from a run file; the neutral
ground that the probe side (mesh/) and the analysis side (analysis/) both import, so that neither
imports the other.

Elements are what a finding can blame: each link direction (`leaf1->spine2`), each switch, each NIC
(`node3:eth1`) and each host. A path is the ordered list of elements a probe crosses:
NIC, link direction, switch, link direction, ..., link direction, NIC.

Where a flow's path was not traced, routing follows the ECMP rule of a routed fabric: every switch
forwards over all neighbours one hop closer to the destination switch (shortest paths), so the
candidate path set of a pair is the shortest-path DAG between its two switches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from fleetctl.errors import ConfigError, DataError
from fleetctl.model.cluster import Cluster

ELEMENT_TYPES = ("link", "switch", "nic", "host")

# Records of a probe run (schema: docs/hdf5-schema.md), shared by the collector, the store and analysis.
MAX_ROUTE_CACHE = 1_000_000  # remembered (switch, switch) routes per topology
NOT_RECORDED = 0  # timestamp value for "not recorded" (e.g. t_recv of a lost probe)
# lost: 0 delivered, 1 lost on the way out, 2 lost on the way back, 3 lost, direction unknown
PROBE_DTYPE = np.dtype([
    ("flow", "<i4"), ("src_nic", "<i4"), ("dst_nic", "<i4"), ("sport", "<u2"), ("seq", "<u4"),
    ("t_send", "<i8"), ("t_remote_rx", "<i8"), ("t_remote_tx", "<i8"), ("t_recv", "<i8"),
    ("lost", "u1"),
])
FLOW_DTYPE = np.dtype([("flow", "<i4"), ("src_nic", "<i4"), ("dst_nic", "<i4"), ("sport", "<u2"),
                       ("fwd_path", "<i4"), ("rev_path", "<i4")])
PAIR_DTYPE = np.dtype([("a", "<i4"), ("b", "<i4"), ("t0", "<f8"), ("offset_s", "<f8"),
                       ("drift", "<f8"), ("margin_s", "<f8"), ("span_s", "<f8"),
                       ("probes", "<i4"), ("residual_s", "<f8")])


@dataclass
class WindowStats:
    """Per-window, per-path figures. Shapes (W, P); delays in microseconds, NaN where none."""

    sent: np.ndarray
    lost: np.ndarray
    delay: np.ndarray  # per-window delay statistic (p50 or p99), one-way or half round trip
    baseline: np.ndarray | None = None  # (P,) healthy delay per path, e.g. from a look-back

    def __post_init__(self) -> None:
        self.sent = np.atleast_2d(np.asarray(self.sent))
        self.lost = np.atleast_2d(np.asarray(self.lost))
        self.delay = np.atleast_2d(np.asarray(self.delay, dtype=np.float64))
        if not (self.sent.shape == self.lost.shape == self.delay.shape):
            raise DataError(f"window stats shapes differ: sent {self.sent.shape}, lost "
                            f"{self.lost.shape}, delay {self.delay.shape}")
        if np.any(self.lost > self.sent) or np.any(self.lost < 0):
            raise DataError("window stats: lost probes outside 0..sent")

    @property
    def n_windows(self) -> int:
        return self.sent.shape[0]


PACK_VALUE_BITS = 36  # a value's share of a packed (key, value) sort key
PACK_KEY_LIMIT = 1 << (63 - PACK_VALUE_BITS)


def _sorted_groups(keys: np.ndarray, values: np.ndarray, resolution: float | None = None):
    """The finite values sorted by key then value: (keys, values, each group's start, its size),
    or None when there is no finite value. With `resolution` (the values' unit, e.g. 1e-3 for
    microseconds to the nanosecond), key and value are packed into one int64 and sorted as such:
    about 3x faster than a two-key sort (the per-probe quantiles of a window are its largest
    cost), values rounded to that resolution; exact when keys or values do not fit."""
    ok = np.isfinite(values)
    keys, values = keys[ok], values[ok]
    if keys.size == 0:
        return None
    packed = _packed(keys, values, resolution) if resolution else None
    if packed is not None:
        packed.sort()
        bias = 1 << (PACK_VALUE_BITS - 1)
        keys = packed >> PACK_VALUE_BITS
        values = ((packed & ((1 << PACK_VALUE_BITS) - 1)) - bias) * resolution
    else:
        order = np.lexsort((values, keys))
        keys, values = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.diff(np.r_[starts, keys.size])
    return keys, values, starts, counts


def _packed(keys: np.ndarray, values: np.ndarray, resolution: float) -> np.ndarray | None:
    bias = 1 << (PACK_VALUE_BITS - 1)
    scaled = np.rint(values / resolution)
    if keys.min() < 0 or keys.max() >= PACK_KEY_LIMIT or np.abs(scaled).max() >= bias:
        return None
    return (keys.astype(np.int64) << PACK_VALUE_BITS) | (scaled.astype(np.int64) + bias)


def group_quantiles(keys: np.ndarray, values: np.ndarray, qs: list[float], n_groups: int, *,
                    linear: bool = False, resolution: float | None = None) -> np.ndarray:
    """Quantiles (q in 0..1) of the finite `values` per integer key; NaN for empty groups. Nearest
    rank by default; `linear`: numpy's linear interpolation (as np.median / np.percentile).
    `resolution`: values rounded to it for a faster sort (_sorted_groups)."""
    out = np.full((len(qs), n_groups), np.nan)
    ok = np.isfinite(values)
    keys, values = keys[ok], values[ok]
    # a group of one value is its own quantile: only the larger groups are sorted (lens's
    # per-path figures from summaries are mostly one flow a path)
    single = np.bincount(keys, minlength=n_groups)[keys] == 1 if keys.size and keys.min() >= 0 \
        else np.zeros(keys.size, dtype=bool)
    if single.any():
        out[:, keys[single]] = values[single]
        keys, values = keys[~single], values[~single]
    groups = _sorted_groups(keys, values, resolution)
    if groups is None:
        return out
    keys, values, starts, counts = groups
    for i, q in enumerate(qs):
        if not linear:
            out[i, keys[starts]] = values[starts + np.minimum(counts - 1, np.floor(q * counts).astype(np.int64))]
            continue
        pos = q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        v_lo, v_hi = values[starts + lo], values[starts + np.minimum(lo + 1, counts - 1)]
        out[i, keys[starts]] = v_lo + (v_hi - v_lo) * (pos - lo)
    return out


class FixedGroups:
    """Groups fixed once (per plan) while their values change every call: a path's flow
    directions, a merged row's paths. A call's quantiles need no sort of every value (what
    `group_quantiles` does): the members are gathered into one matrix per group size and its
    rows sorted, a few values each (lens's per-path medians at 1,280 x 8: 20 -> ~6 ms).
    NaN values are no members; a group with none gets NaN."""

    def __init__(self, keys: np.ndarray, n_groups: int):
        """`keys`: the group of each member slot (-1 or out of range: in none)."""
        keys = np.asarray(keys, dtype=np.int64)
        slot = np.flatnonzero((keys >= 0) & (keys < n_groups))
        g = keys[slot]
        order = np.argsort(g, kind="stable")
        slot, g = slot[order], g[order]
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if g.size else np.zeros(0, np.int64)
        counts = np.diff(np.r_[starts, g.size])
        self.n_slots, self.n_groups = keys.size, n_groups
        # per group size c: the groups, and their members as an (n, c) matrix of slots
        small = np.int32 if keys.size < 2**31 else np.int64  # half the memory: a plan's layout
        self.by_size = [(g[starts[counts == c]].astype(small),
                         slot[starts[counts == c][:, None] + np.arange(c)].astype(small))
                        for c in np.unique(counts)]

    def quantiles(self, values: np.ndarray, qs: list[float], linear: bool = False) -> np.ndarray:
        """(len(qs), n_groups) as `group_quantiles` of the slots' `values` (nearest rank, or
        numpy's linear interpolation), exact (no rounding)."""
        if values.shape != (self.n_slots,):
            raise ValueError(f"{values.shape} values for {self.n_slots} slots")
        out = np.full((len(qs), self.n_groups), np.nan)
        for groups, members in self.by_size:
            m = values[members]
            if m.shape[1] == 1:  # the first size: every quantile is the one value, and the
                out[0, groups] = m[:, 0]  # other rows are still all NaN (one scatter, copies)
                out[1:] = out[0]
                continue
            m.sort(axis=1)  # NaN sort last
            c = np.isfinite(m).sum(axis=1)
            has = c > 0
            groups, m, c = groups[has], m[has], c[has]
            r = np.arange(c.size)
            for i, q in enumerate(qs):
                if not linear:
                    out[i, groups] = m[r, np.minimum(c - 1, np.floor(q * c).astype(np.int64))]
                    continue
                pos = q * (c - 1)
                lo = np.floor(pos).astype(np.int64)
                v_lo, v_hi = m[r, lo], m[r, np.minimum(lo + 1, c - 1)]
                out[i, groups] = v_lo + (v_hi - v_lo) * (pos - lo)
        return out


def group_percentiles(keys: np.ndarray, values: np.ndarray, percentiles: tuple[float, ...],
                      n_groups: int, resolution: float | None = None) -> np.ndarray:
    """(len(percentiles), n_groups): numpy's percentiles (linear interpolation) per group."""
    return group_quantiles(keys, values, [p / 100.0 for p in percentiles], n_groups, linear=True,
                           resolution=resolution)


@dataclass(frozen=True)
class Element:
    type: str  # link | switch | nic | host
    id: str  # the site file's id: link id, switch id, `node:nic`, node
    direction: str = ""  # links only: `a->b` with a, b the link's end ids

    @property
    def label(self) -> str:
        return self.direction if self.type == "link" else self.id

    def to_dict(self) -> dict:
        out = {"type": self.type, "id": self.id}
        if self.type == "link":
            out["direction"] = self.direction
        return out


@dataclass
class PathTable:
    """Paths as CSR rows of element indices (in order), with the weight of each entry.

    Traced paths have weight 1 on every element. An untraced flow's expected row has, per element,
    the probability that the flow crosses it under uniform ECMP splitting; it is unordered.
    """

    indptr: np.ndarray
    elements: np.ndarray
    weights: np.ndarray
    src_nic: np.ndarray
    dst_nic: np.ndarray
    traced: np.ndarray  # bool per path

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def row(self, i: int) -> np.ndarray:
        return self.elements[self.indptr[i]:self.indptr[i + 1]]

    def matrix(self, n_elements: int) -> csr_matrix:
        """paths x elements incidence (weighted), the A of tomography."""
        return csr_matrix((self.weights, self.elements, self.indptr),
                          shape=(len(self), n_elements))

    @classmethod
    def from_rows(cls, rows: list[tuple[np.ndarray, np.ndarray]], src: list[int], dst: list[int],
                  traced: list[bool]) -> PathTable:
        lengths = np.array([len(r[0]) for r in rows], dtype=np.int64)
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        elems = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int64)
        weights = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0)
        return cls(indptr, elems.astype(np.int64), weights.astype(np.float64),
                   np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                   np.asarray(traced, dtype=bool))


@dataclass
class Topology:
    """Elements and ECMP routing of one fabric. Build with `from_site` (or `build`, as a run file is read)."""

    name: str
    elements: list[Element] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)  # NIC ids `node:nic`, index = NIC index
    nic_host: list[str] = field(default_factory=list)
    switch_tier: dict[str, int] = field(default_factory=dict)
    # links: link id -> (end a, end b); ends are switch ids or NIC ids
    links: dict[str, tuple[str, str]] = field(default_factory=dict)
    link_ports: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index: dict[tuple[str, str, str], int] = {}
        self._routing_ready = False

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, name: str, nics: list[tuple[str, str]], switches: dict[str, int],
              links: list[tuple[str, str, str]],
              ports: dict[str, tuple[str, str]] | None = None) -> Topology:
        """nics: (nic id, host); switches: id -> tier; links: (link id, end a, end b)."""
        topo = cls(name=name, switch_tier=dict(switches), link_ports=dict(ports or {}))
        for sw in switches:
            topo._add(Element("switch", sw))
        for nic, host in nics:
            topo.nics.append(nic)
            topo.nic_host.append(host)
            topo._add(Element("nic", nic))
        for host in dict.fromkeys(topo.nic_host):
            topo._add(Element("host", host))
        known = set(switches) | set(topo.nics)
        for lid, a, b in links:
            for end in (a, b):
                if end not in known:
                    raise ConfigError(f"link {lid!r} end {end!r} is neither a switch nor a NIC")
            topo.links[lid] = (a, b)
            topo._add(Element("link", lid, f"{a}->{b}"))
            topo._add(Element("link", lid, f"{b}->{a}"))
        return topo

    @classmethod
    def from_site(cls, cluster: Cluster) -> Topology:
        """From a Cluster: its node classes' NICs, fabric switches and links."""
        nics: list[tuple[str, str]] = []
        for cls_ in cluster.node_classes:
            for node in cls_.nodes:
                nics.extend((f"{node}:{nic.name}", node) for nic in cls_.nics)
        links, ports = [], {}
        nic_ids = {n for n, _ in nics}
        for link in cluster.links.values():
            ends = []
            for ep in (link.a, link.b):
                end = ep.element_id
                if ep.kind == "host":  # a node without a named NIC: one pseudo-NIC per node
                    end = f"{ep.device}:"
                    if end not in nic_ids:
                        nics.append((end, ep.device))
                        nic_ids.add(end)
                ends.append(end)
            links.append((link.id, ends[0], ends[1]))
            ports[link.id] = (str(link.a), str(link.b))
        return cls.build(cluster.name, nics, {s.id: s.tier for s in cluster.switches.values()}, links,
                         ports)

    def _add(self, el: Element) -> int:
        key = (el.type, el.id, el.direction)
        if key in self._index:
            raise ConfigError(f"duplicate {el.type} {el.label!r} in topology {self.name!r}")
        self._index[key] = len(self.elements)
        self.elements.append(el)
        return self._index[key]

    # ------------------------------------------------------------------ lookups
    def index(self, type_: str, id_: str, direction: str = "") -> int:
        return self._index[(type_, id_, direction)]

    def link_dir(self, link_id: str, src: str, dst: str) -> int:
        return self._index[("link", link_id, f"{src}->{dst}")]

    def nic_index(self, nic: str) -> int:
        try:
            return self._nic_pos[nic]
        except AttributeError:
            self._nic_pos = {n: i for i, n in enumerate(self.nics)}
            return self.nic_index(nic)

    @property
    def n_elements(self) -> int:
        return len(self.elements)

    @property
    def hosts(self) -> list[str]:
        """Hosts in order of their first NIC: the host index of every per-host array."""
        if getattr(self, "_hosts", None) is None:
            self._hosts = list(dict.fromkeys(self.nic_host))
        return self._hosts

    @property
    def nic_host_index(self) -> np.ndarray:
        """Per NIC index, its host's index in `hosts`."""
        if getattr(self, "_nic_host_index", None) is None:
            pos = {h: i for i, h in enumerate(self.hosts)}
            self._nic_host_index = np.array([pos[h] for h in self.nic_host], dtype=np.int64)
        return self._nic_host_index

    @property
    def nic_of_link(self) -> dict[str, str]:
        """The NIC at the end of each host cable: link id -> NIC id."""
        if getattr(self, "_nic_of_link", None) is None:
            nics = set(self.nics)
            self._nic_of_link = {lid: next(e for e in ends if e in nics)
                                 for lid, ends in self.links.items() if any(e in nics for e in ends)}
        return self._nic_of_link

    def location(self, element: dict) -> str:
        """Where a finding or event is, for state kept per place: a NIC's cable folded into the NIC
        (`nic:node1:eth0`), anything else as `type:id`. Both directions of a link are one place."""
        if element.get("type") == "link" and element.get("id") in self.nic_of_link:
            return "nic:" + self.nic_of_link[element["id"]]
        return f"{element.get('type')}:{element.get('id')}"

    def element_types(self) -> np.ndarray:
        return np.array([ELEMENT_TYPES.index(e.type) for e in self.elements], dtype=np.int8)

    def links_between(self, x: str, y: str) -> list[str]:
        """Ids of the links joining ends x and y (switch or NIC ids), from a map built once:
        scanning every link per traced hop made resolving 317,000 paths of a 1,280-host fabric
        take hours."""
        pairs = getattr(self, "_between", None)
        if pairs is None or len(pairs.get("", ())) != len(self.links):
            pairs = {"": tuple(self.links)}
            for lid, (a, b) in self.links.items():
                pairs.setdefault(frozenset((a, b)), []).append(lid)
            self._between = pairs
        return pairs.get(frozenset((x, y)), [])

    def switch_children(self) -> dict[str, list[str]]:
        """Per switch, the switches of lower tiers it links to (built once)."""
        cached = getattr(self, "_switch_children", None)
        if cached is not None and cached[0] == len(self.links):
            return cached[1]
        out: dict[str, list[str]] = {sw: [] for sw in self.switch_tier}
        for a, b in self.links.values():
            if a in out and b in out and self.switch_tier[a] != self.switch_tier[b]:
                lo, hi = (a, b) if self.switch_tier[a] < self.switch_tier[b] else (b, a)
                out[hi].append(lo)
        self._switch_children = (len(self.links), out)
        return out

    def hosts_below(self) -> dict[str, frozenset[str]]:
        """Per switch, the hosts under it: a NIC's switch, then tier by tier upwards (built once)."""
        cached = getattr(self, "_hosts_below", None)
        if cached is not None and cached[0] == len(self.links):
            return cached[1]
        below: dict[str, set[str]] = {sw: set() for sw in self.switch_tier}
        host_of = dict(zip(self.nics, self.nic_host))
        for a, b in self.links.values():
            if a in below and b in host_of:
                below[a].add(host_of[b])
            elif b in below and a in host_of:
                below[b].add(host_of[a])
        children = self.switch_children()
        for sw in sorted(self.switch_tier, key=self.switch_tier.get):  # lower tiers first
            for child in children[sw]:
                below[sw] |= below[child]
        out = {sw: frozenset(v) for sw, v in below.items()}
        self._hosts_below = (len(self.links), out)
        return out

    def links_of_switch(self, switch: str) -> list[int]:
        """Element indices of every link direction entering or leaving a switch."""
        out = []
        for lid, (a, b) in self.links.items():
            if switch in (a, b):
                out += [self.link_dir(lid, a, b), self.link_dir(lid, b, a)]
        return out

    # ------------------------------------------------------------------ routing
    def _prepare_routing(self) -> None:
        if self._routing_ready:
            return
        sws = list(self.switch_tier)
        self._sw_pos = {s: i for i, s in enumerate(sws)}
        self._switches = sws
        self._nbrs: list[list[tuple[int, int]]] = [[] for _ in sws]  # (neighbour, link elem)
        self._nic_attach: dict[str, tuple[int, int, int]] = {}  # nic -> (switch, up elem, down elem)
        rows, cols = [], []
        for lid, (a, b) in self.links.items():
            if a in self._sw_pos and b in self._sw_pos:
                ia, ib = self._sw_pos[a], self._sw_pos[b]
                self._nbrs[ia].append((ib, self.link_dir(lid, a, b)))
                self._nbrs[ib].append((ia, self.link_dir(lid, b, a)))
                rows += [ia, ib]
                cols += [ib, ia]
            else:
                nic, sw = (a, b) if b in self._sw_pos else (b, a)
                if nic not in self._nic_attach and sw in self._sw_pos:
                    self._nic_attach[nic] = (self._sw_pos[sw], self.link_dir(lid, nic, sw),
                                             self.link_dir(lid, sw, nic))
        # The same neighbours as arrays: next_hops picks the closer ones in one gather.
        self._nbr_pos = [np.array([v for v, _ in nb], dtype=np.int64) for nb in self._nbrs]
        self._nbr_elem = [np.array([e for _, e in nb], dtype=np.int64) for nb in self._nbrs]
        graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(sws), len(sws)))
        self._dist = shortest_path(graph, unweighted=True, directed=False)
        self._hops: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._switch_rows: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._routing_ready = True

    def switch_id(self, position: int) -> str:
        self._prepare_routing()
        return self._switches[position]

    def switch_distances(self) -> np.ndarray:
        """Hop counts between switches (switch positions in `switch_tier` order); inf: none."""
        self._prepare_routing()
        return self._dist

    def switch_edges(self) -> list[tuple[int, int, int]]:
        """Every switch-to-switch link direction as (from position, to position, element)."""
        self._prepare_routing()
        return [(u, v, e) for u, nb in enumerate(self._nbrs) for v, e in nb]

    def switch_of(self, nic: str) -> int:
        """Position of the switch a NIC is cabled to."""
        self._prepare_routing()
        return self._nic_attach[nic][0]

    def attached(self, nic: str) -> bool:
        self._prepare_routing()
        return nic in self._nic_attach

    def switch_distance(self, src_nic: str, dst_nic: str) -> float:
        self._prepare_routing()
        return self._dist[self._nic_attach[src_nic][0], self._nic_attach[dst_nic][0]]

    def route_ends(self, src_nic: str, dst_nic: str):
        """((switch position, up link elem, down link elem) of the source NIC, the same of the
        destination NIC); ConfigError when either is not cabled or no route joins them."""
        self._prepare_routing()
        try:
            s = self._nic_attach[src_nic]
            d = self._nic_attach[dst_nic]
        except KeyError as exc:
            raise ConfigError(f"NIC {exc.args[0]!r} has no link to a switch in topology "
                              f"{self.name!r}") from None
        if not np.isfinite(self._dist[s[0], d[0]]):
            raise ConfigError(f"no route from {src_nic} to {dst_nic} in topology {self.name!r}")
        return s, d

    def next_hops(self, u: int, dsw: int) -> list[tuple[int, int]]:
        """(neighbour position, link elem) of every neighbour of switch `u` one hop closer to `dsw`.
        Remembered per (u, dsw): a spine scans every leaf under it, and a 10,000-NIC analysis asked
        1.28 million times (at most MAX_ROUTE_CACHE entries, then it starts over)."""
        self._prepare_routing()
        key = (u, dsw)
        hops = self._hops.get(key)
        if hops is None:
            du = self._dist[u, dsw]
            nb = self._nbr_pos[u]
            closer = np.flatnonzero(self._dist[nb, dsw] == du - 1)
            hops = list(zip(nb[closer].tolist(), self._nbr_elem[u][closer].tolist()))
            if len(self._hops) >= MAX_ROUTE_CACHE:
                self._hops.clear()
            self._hops[key] = hops
        return hops

    def expected_row(self, src_nic: str, dst_nic: str) -> tuple[np.ndarray, np.ndarray]:
        """Elements of all candidate ECMP paths with the probability that a flow crosses each."""
        (ssw, up, _), (dsw, _, down) = self.route_ends(src_nic, dst_nic)
        key = (ssw, dsw)
        row = self._switch_rows.get(key)
        if row is None:
            row = self._switch_row(ssw, dsw)
            if len(self._switch_rows) >= MAX_ROUTE_CACHE:
                self._switch_rows.clear()
            self._switch_rows[key] = row
        ends = np.array([self.index("nic", src_nic), up, down, self.index("nic", dst_nic)],
                        dtype=np.int64)
        return np.concatenate([row[0], ends]), np.concatenate([row[1], np.ones(4)])

    def _switch_row(self, ssw: int, dsw: int) -> tuple[np.ndarray, np.ndarray]:
        """The switches and switch-to-switch link directions between two switches, with the
        probability that a flow crosses each (the same for every NIC pair under them)."""
        prob = {ssw: 1.0}
        weights: dict[int, float] = {}
        frontier = [ssw]
        while frontier:  # breadth-first down the DAG: each layer is one hop closer to dsw
            nxt: dict[int, None] = {}
            for u in frontier:
                weights[self.index("switch", self._switches[u])] = prob[u]
                if u == dsw:
                    continue
                hops = self.next_hops(u, dsw)
                share = prob[u] / len(hops)
                for v, e in hops:
                    weights[e] = weights.get(e, 0.0) + share
                    prob[v] = prob.get(v, 0.0) + share
                    nxt[v] = None
            frontier = list(nxt)
        elems = np.fromiter(weights, dtype=np.int64)
        return elems, np.array([weights[e] for e in elems], dtype=np.float64)
