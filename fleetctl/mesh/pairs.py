"""Which NIC pairs probe each other: a full mesh when small, a covering design when large.

Covering design (documented in docs/mesh.md): every link direction must be crossed by probe paths
from at least k distinct source NICs (fewer only where fewer sources can reach it at all: a NIC's
own uplink has exactly one). A pair (s, d) is taken to cross every link direction of its
candidate ECMP paths, because the agent varies the source port over enough values to spread its
flows over all of them; on a shortest-path fabric a pair crosses u->v iff
dist(s, u) + 1 + dist(v, d) == dist(s, d).

1. Circulant start: NICs in topology order (grouped by switch); NIC i probes NIC i + o_j for
   k offsets o_j spread over the ring, so every NIC sends to k peers and is probed by k distinct
   sources, and peers land under other switches.
2. Repair: every link direction still short of its requirement gets pairs from new sources, chosen
   at random among (source switch, destination switch) combinations whose paths cross it.
The probe count grows as k * N instead of the full mesh's N * (N - 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleetctl.errors import UsageError
from fleetctl.model.fabric import Topology


@dataclass
class PairPlan:
    design: str  # full-mesh | covering
    pairs: list[tuple[int, int]]  # (source NIC index, destination NIC index)
    k: int
    full_mesh_pairs: int
    min_sources: int  # fewest distinct sources over switch-to-switch link directions
    short: list[str] = field(default_factory=list)  # link directions below their requirement

    def to_dict(self) -> dict:
        return {"design": self.design, "pairs": len(self.pairs), "k": self.k,
                "full_mesh_pairs": self.full_mesh_pairs,
                "ratio_to_full_mesh": round(len(self.pairs) / max(1, self.full_mesh_pairs), 5),
                "min_sources": self.min_sources, "short": self.short}


def select_pairs(topo: Topology, k: int = 3, full_mesh_max: int = 64, seed: int = 0,
                 max_repair_rounds: int = 8,
                 base: list[tuple[int, int]] | None = None,
                 nics: set[int] | None = None) -> PairPlan:
    """Full mesh up to `full_mesh_max` attached NICs, else the covering design.

    With `base` (pairs of an earlier plan or chosen by an operator), the covering design keeps
    them and only adds the pairs the coverage still needs, instead of starting with a circulant.
    With `nics` (topology indexes), the design is over those NICs alone (lens over a subset of
    the site's nodes, a shard): a design over every NIC filtered to the subset afterwards keeps
    about 1/S of its pairs for a subset of 1/S of the fleet, and its coverage with them."""
    if k < 1:
        raise UsageError(f"coverage k must be >= 1, not {k}")
    cov = _Coverage(topo, nics)
    nics = cov.nics
    n = len(nics)
    per_host: dict[str, int] = {}
    for a in nics:
        per_host[cov.host[a]] = per_host.get(cov.host[a], 0) + 1
    full = n * n - sum(c * c for c in per_host.values())  # ordered pairs on different hosts
    if n <= full_mesh_max and base is None:
        pairs = [(a, b) for a in nics for b in nics if cov.host[a] != cov.host[b]]
        counts, need = cov.sources(pairs, k)
        return PairPlan("full-mesh", pairs, k, full, _min(counts), cov.short(counts, need))
    rng = np.random.default_rng(seed)
    pairs = set(base or ())
    for j in range(k if base is None else 0):
        off = 1 + j * max(1, n // k) + j  # spread over the ring; +j keeps offsets distinct
        for i in range(n):
            for extra in range(n):
                b = nics[(i + off + extra) % n]
                if cov.host[b] != cov.host[nics[i]] and (nics[i], b) not in pairs:
                    pairs.add((nics[i], b))
                    break
    checked = -1  # how many pairs the last count found complete (pairs only grow: the same set)
    for _ in range(max_repair_rounds):
        counts, need = cov.sources(sorted(pairs), k)
        short = np.flatnonzero(counts < need)
        if short.size == 0:
            checked = len(pairs)
            break
        for e in short:
            for _ in range(int(need[e] - counts[e])):
                p = cov.pair_crossing(e, rng)
                if p is not None:
                    pairs.add(p)
    _cover_nic_cables(cov, pairs, k, rng)
    pairs_l = sorted(pairs)
    if len(pairs) != checked:
        counts, need = cov.sources(pairs_l, k)
    return PairPlan("covering", pairs_l, k, full, _min(counts), cov.short(counts, need))


def _cover_nic_cables(cov: _Coverage, pairs: set[tuple[int, int]], k: int,
                      rng: np.random.Generator) -> None:
    """NIC cables: each NIC sends at least once and is probed by min(k, possible) sources.

    New sources are drawn at random and rejected when on the NIC's own host or already a source:
    O(k) draws per NIC on a large fabric (listing every other NIC per NIC was O(N^2): 80 s at
    16,384 NICs); small fabrics, where draws could keep missing, take the listed candidates."""
    nics = np.array(cov.nics, dtype=np.int64)
    hosts = {h: i for i, h in enumerate(dict.fromkeys(cov.host[i] for i in cov.nics))}
    host_of = {i: hosts[cov.host[i]] for i in cov.nics}
    per_host = np.bincount(list(host_of.values()), minlength=len(hosts))
    sources: dict[int, set[int]] = {i: set() for i in cov.nics}
    sends = {a for a, _ in pairs}
    for a, b in pairs:
        sources[b].add(a)
    for d in cov.nics:
        have = sources[d]
        if len(have) >= k:
            continue
        possible = len(nics) - int(per_host[host_of[d]])
        want = min(k, possible) - len(have)
        if want <= 0:
            continue
        chosen: list[int] = []
        if possible > 4 * k:
            for _ in range(64 * k):
                s = int(nics[rng.integers(nics.size)])
                if host_of[s] != host_of[d] and s not in have and s not in chosen:
                    chosen.append(s)
                    if len(chosen) == want:
                        break
        if len(chosen) < want:
            others = [s for s in cov.nics if host_of[s] != host_of[d] and s not in have
                      and s not in chosen]
            chosen += [int(s) for s in rng.permutation(others)[:want - len(chosen)]]
        for s in chosen:
            pairs.add((s, d))
            sends.add(s)
    for s in cov.nics:
        if s not in sends:
            for _ in range(64):
                d = int(nics[rng.integers(nics.size)])
                if host_of[d] != host_of[s]:
                    pairs.add((s, d))
                    break


def _min(counts: np.ndarray) -> int:
    return int(counts.min()) if counts.size else 0


UNREACHABLE = 10_000  # a hop count no fabric reaches; sums of two still fit in int16
CROSSING_CACHE_ENTRIES = 32_000_000  # edge indices kept between sources() calls (128 MB)


class _Coverage:
    """Distinct-source coverage of switch-to-switch link directions by NIC pairs.

    Pairs are grouped by (source switch, destination switch): every pair of a group crosses the
    same link directions. Distinct sources per link direction are counted per source switch
    (sources under different switches are distinct), over the union of that switch's groups'
    edges only: the cost is the pairs' crossings, never NICs x link directions."""

    def __init__(self, topo: Topology, only: set[int] | None = None):
        self.topo = topo
        self.nics = [i for i, n in enumerate(topo.nics) if topo.attached(n)
                     and (only is None or i in only)]
        self.host = {i: topo.nic_host[i] for i in range(len(topo.nics))}
        self.sw_of = {i: topo.switch_of(topo.nics[i]) for i in self.nics}
        dist = topo.switch_distances()
        self.dist = np.where(np.isfinite(dist), dist, UNREACHABLE).astype(np.int16)
        edges = topo.switch_edges()
        self.eu = np.array([u for u, _, _ in edges], dtype=np.int64)
        self.ev = np.array([v for _, v, _ in edges], dtype=np.int64)
        self.eid = np.array([e for _, _, e in edges], dtype=np.int64)
        by_sw: dict[int, list[int]] = {}
        for i in self.nics:
            by_sw.setdefault(self.sw_of[i], []).append(i)
        self.by_sw = {s: np.array(v) for s, v in by_sw.items()}
        self.nic_sws = np.array(sorted(by_sw), dtype=np.int64)
        self._possible: dict[int, int] = {}
        self._crossing: dict[tuple[int, int], np.ndarray] = {}
        self._cached = 0
        self._have: dict[int, set[int]] = {}  # short edge -> its sources (every one of them)

    def crossing(self, x: int, y: int, from_x: np.ndarray | None = None) -> np.ndarray:
        """Edge positions crossed by some shortest path from switch x to switch y (`from_x`:
        dist(x, eu) per edge, when the caller has it)."""
        hit = self._crossing.get((x, y))
        if hit is not None:
            return hit
        d_xy = self.dist[x, y]
        if d_xy >= UNREACHABLE:
            return np.empty(0, dtype=np.int32)
        if from_x is None:
            from_x = self.dist[x, self.eu]
        # Distances are symmetric (links are cables): dist(v, y) is row y, gathered contiguously.
        edges = np.flatnonzero(from_x + self.dist[y, self.ev] == d_xy - 1).astype(np.int32)
        if self._cached + edges.size <= CROSSING_CACHE_ENTRIES:
            self._crossing[(x, y)] = edges
            self._cached += edges.size
        return edges

    def sources(self, pairs: list[tuple[int, int]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per edge: distinct source NICs crossing it, and the requirement min(k, possible)."""
        by_x: dict[int, dict[int, set[int]]] = {}
        for a, b in pairs:
            by_x.setdefault(self.sw_of[a], {}).setdefault(self.sw_of[b], set()).add(a)
        n_edges = self.eu.size
        counts = np.zeros(n_edges, dtype=np.int64)
        for x, groups in by_x.items():
            from_x = self.dist[x, self.eu]
            crossings = [self.crossing(x, y, from_x) for y in groups]
            if not any(c.size for c in crossings):
                continue
            local = np.unique(np.concatenate(crossings))
            srcs = sorted(set().union(*groups.values()))
            row = {s: i for i, s in enumerate(srcs)}
            covered = np.zeros((len(srcs), local.size), dtype=bool)
            for group_srcs, c in zip(groups.values(), crossings):
                rows = np.array([row[s] for s in group_srcs])
                covered[np.ix_(rows, np.searchsorted(local, c))] = True
            counts[local] += covered.sum(axis=0)
        need = np.full(n_edges, k, dtype=np.int64)
        short = np.flatnonzero(counts < k)
        for e in short:  # only short edges: the check is O(switches^2)
            need[e] = min(k, self.possible(e))
        self._have = self._sources_of(by_x, short) if short.size else {}
        return counts, need

    def _sources_of(self, by_x: dict[int, dict[int, set[int]]], edges: np.ndarray) -> dict[int, set[int]]:
        """Every source crossing each of `edges` (few: the short ones)."""
        wanted = np.zeros(self.eu.size, dtype=bool)
        wanted[edges] = True
        have: dict[int, set[int]] = {int(e): set() for e in edges}
        for x, groups in by_x.items():
            for y, srcs in groups.items():
                c = self.crossing(x, y)  # kept from the count, unless over the cache's bound
                for e in c[wanted[c]]:
                    have[int(e)] |= srcs
        return have

    def _mask(self, e: int) -> np.ndarray:
        """(source switch, destination switch) combinations whose shortest paths cross e."""
        xs, d = self.nic_sws, self.dist
        return d[np.ix_(xs, [self.eu[e]])] + 1 + d[np.ix_([self.ev[e]], xs)] == d[np.ix_(xs, xs)]

    def possible(self, e: int) -> int:
        """How many distinct source NICs could cross edge e at all."""
        if e not in self._possible:
            ok = self._mask(e).any(axis=1)
            self._possible[e] = sum(len(self.by_sw[x]) for x in self.nic_sws[ok])
        return self._possible[e]

    def pair_crossing(self, e: int, rng: np.random.Generator) -> tuple[int, int] | None:
        """A new (source, destination) pair whose paths cross edge e, from a source not yet
        crossing it."""
        xs = self.nic_sws
        ok = self._mask(e)
        have = self._have.get(int(e), set())
        for xi, yi in rng.permutation(np.argwhere(ok)):
            srcs = [s for s in self.by_sw[xs[xi]] if s not in have]
            if not srcs:
                continue
            s = int(rng.choice(srcs))
            dsts = [t for t in self.by_sw[xs[yi]] if self.host[t] != self.host[s]]
            if dsts:
                return s, int(rng.choice(dsts))
        return None

    def short(self, counts: np.ndarray, need: np.ndarray) -> list[str]:
        return [self.topo.elements[self.eid[e]].label for e in np.flatnonzero(counts < need)]
