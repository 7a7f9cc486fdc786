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
from scipy.sparse import coo_matrix, csr_matrix

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
                 base: list[tuple[int, int]] | None = None) -> PairPlan:
    """Full mesh up to `full_mesh_max` attached NICs, else the covering design.

    With `base` (pairs of an earlier plan or chosen by an operator), the covering design keeps
    them and only adds the pairs the coverage still needs, instead of starting with a circulant."""
    if k < 1:
        raise UsageError(f"coverage k must be >= 1, not {k}")
    cov = _Coverage(topo)
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
    for _ in range(max_repair_rounds):
        counts, need = cov.sources(sorted(pairs), k)
        short = np.flatnonzero(counts < need)
        if short.size == 0:
            break
        for e in short:
            for _ in range(int(need[e] - counts[e])):
                p = cov.pair_crossing(e, rng)
                if p is not None:
                    pairs.add(p)
    _cover_nic_cables(cov, pairs, k, rng)
    pairs_l = sorted(pairs)
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


class _Coverage:
    """Distinct-source coverage of switch-to-switch link directions by NIC pairs."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.nics = [i for i, n in enumerate(topo.nics) if topo.attached(n)]
        self.host = {i: topo.nic_host[i] for i in range(len(topo.nics))}
        self.sw_of = {i: topo.switch_of(topo.nics[i]) for i in self.nics}
        self.dist = topo.switch_distances()
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
        self._last_sources: csr_matrix | None = None

    def crossing(self, x: int, y: int) -> np.ndarray:
        """Edge positions crossed by some shortest path from switch x to switch y."""
        d = self.dist
        return np.flatnonzero(d[x, self.eu] + 1 + d[self.ev, y] == d[x, y])

    def sources(self, pairs: list[tuple[int, int]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per edge: distinct source NICs crossing it, and the requirement min(k, possible)."""
        groups: dict[tuple[int, int], set[int]] = {}
        for a, b in pairs:
            groups.setdefault((self.sw_of[a], self.sw_of[b]), set()).add(a)
        rows, cols = [], []
        for (x, y), srcs in groups.items():
            edges = self.crossing(x, y)
            for s in srcs:
                rows.append(np.full(edges.size, s))
                cols.append(edges)
        n_edges = self.eu.size
        if rows:
            r, c = np.concatenate(rows), np.concatenate(cols)
            m = coo_matrix((np.ones(r.size), (r, c)), shape=(len(self.topo.nics), n_edges)).tocsr()
            m.sum_duplicates()
            m.data[:] = 1.0
        else:
            m = csr_matrix((len(self.topo.nics), n_edges))
        self._last_sources = m.tocsc()
        counts = np.asarray(m.sum(axis=0)).ravel()
        need = np.full(n_edges, float(k))
        for e in np.flatnonzero(counts < k):  # only short edges: the check is O(switches^2)
            need[e] = min(k, self.possible(e))
        return counts, need

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
        have = set(self._last_sources.getcol(e).indices) if self._last_sources is not None \
            else set()
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
