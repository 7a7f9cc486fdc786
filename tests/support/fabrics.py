"""Synthetic fabrics for tests and benchmarks: k-ary 3-tier fat-trees, 2-tier leaf-spines, and the
ECMP hash that stands in for traceroute (which flow takes which path).

A k-ary fat-tree (Al-Fares et al.) has k pods of k/2 leaves and k/2 aggregation switches,
(k/2)^2 cores and k^3/4 hosts; it has 3 k^3/4 links (k=24: 10,368 links, 3,456 hosts).
Ids mimic a site file: `p3-l1` (pod 3 leaf 1), `p3-a0`, `c17`, `n00042:eth0`.
"""

from __future__ import annotations

import zlib
from array import array

import numpy as np

from fleetctl.errors import ConfigError, UsageError
from fleetctl.model.fabric import PathTable, Topology


def fat_tree(k: int, nics_per_host: int = 1) -> Topology:
    """A k-ary 3-tier fat-tree; each host has `nics_per_host` NICs on its leaf."""
    if k < 2 or k % 2:
        raise UsageError(f"fat-tree arity k must be an even number >= 2, not {k}")
    half = k // 2
    switches: dict[str, int] = {}
    links: list[tuple[str, str, str]] = []
    nics: list[tuple[str, str]] = []
    cores = [f"c{i}" for i in range(half * half)]
    for c in cores:
        switches[c] = 3
    host = 0
    for p in range(k):
        for a in range(half):
            switches[f"p{p}-a{a}"] = 2
            for j in range(half):  # agg a of each pod reaches cores a*half .. a*half+half-1
                core = cores[a * half + j]
                links.append((f"p{p}-a{a}--{core}", f"p{p}-a{a}", core))
        for l in range(half):
            leaf = f"p{p}-l{l}"
            switches[leaf] = 1
            for a in range(half):
                links.append((f"{leaf}--p{p}-a{a}", leaf, f"p{p}-a{a}"))
            for _ in range(half):
                name = f"n{host:05d}"
                host += 1
                for e in range(nics_per_host):
                    nic = f"{name}:eth{e}"
                    nics.append((nic, name))
                    links.append((f"{nic}--{leaf}", nic, leaf))
    return Topology.build(f"fat-tree-k{k}", nics, switches, links)


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int, nics_per_host: int = 2) -> Topology:
    """A 2-tier leaf-spine like the emulated lab: every leaf has one uplink per spine."""
    switches = {f"spine{s}": 2 for s in range(1, spines + 1)}
    links: list[tuple[str, str, str]] = []
    nics: list[tuple[str, str]] = []
    node = 1
    for l in range(1, leaves + 1):
        leaf = f"leaf{l}"
        switches[leaf] = 1
        for s in range(1, spines + 1):
            links.append((f"{leaf}--spine{s}", leaf, f"spine{s}"))
        for _ in range(hosts_per_leaf):
            for e in range(nics_per_host):
                nic = f"node{node}:eth{e}"
                nics.append((nic, f"node{node}"))
                links.append((f"{nic}--{leaf}", nic, leaf))
            node += 1
    return Topology.build(f"leaf-spine-{leaves}x{spines}", nics, switches, links)


MASK64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finalizer: every input bit moves every output bit."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def ecmp_path(topo: Topology, src_nic: str, dst_nic: str, flow: int, seeded: bool = False
              ) -> list[int]:
    """The path one flow takes: each switch hashes (pair, flow, switch) over its next hops.

    Default: CRC32 of the whole text, as the tests were written against. CRC32 is linear, so with
    a power-of-two fan-out its low bits correlate across switches and flows (at k=16 and k=32
    fat-trees, flows bunch on the same core links). `seeded`: what switches do, one hash of the
    flow mixed with each switch's own seed (benchmarks/triangulation.py)."""
    (ssw, up, _), (dsw, _, down) = topo.route_ends(src_nic, dst_nic)
    path = [topo.index("nic", src_nic), up]
    u = ssw
    flow_hash = zlib.crc32(f"{src_nic}|{dst_nic}|{flow}".encode()) if seeded else 0
    while True:
        path.append(topo.index("switch", topo.switch_id(u)))
        if u == dsw:
            break
        hops = topo.next_hops(u, dsw)
        h = mix64(flow_hash ^ mix64(u + 0x5EED)) if seeded else \
            zlib.crc32(f"{src_nic}|{dst_nic}|{flow}|{u}".encode())
        u, e = hops[h % len(hops)]
        path.append(e)
    path += [down, topo.index("nic", dst_nic)]
    return path


def path_table(topo: Topology, flows: list[tuple[str, str, int]], traced: bool = True,
               seeded: bool = False) -> PathTable:
    """Path table for flows (src nic, dst nic, flow number): ECMP-hashed or expected rows."""
    src = [topo.nic_index(s) for s, _, _ in flows]
    dst = [topo.nic_index(d) for _, d, _ in flows]
    if not traced:
        rows = [topo.expected_row(s, d) for s, d, _ in flows]
        return PathTable.from_rows(rows, src, dst, [False] * len(rows))
    # Traced: one flat array of every path's elements (a numpy array per flow cost ~400 MB and
    # ~3 s at 884,736 flows).
    elems, lengths = array("q"), array("q")
    for s, d, f in flows:
        p = ecmp_path(topo, s, d, f, seeded)
        elems.extend(p)
        lengths.append(len(p))
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=indptr[1:])
    flat = np.frombuffer(elems, dtype=np.int64).copy()
    return PathTable(indptr, flat, np.ones(flat.size), np.asarray(src, dtype=np.int64),
                     np.asarray(dst, dtype=np.int64), np.ones(len(flows), dtype=bool))


def find(topo: Topology, label: str) -> int:
    """Element index by label: `leaf1->spine2` (link direction), a switch, NIC or host id."""
    for i, e in enumerate(topo.elements):
        if e.label == label:
            return i
    raise ConfigError(f"no element {label!r} in topology {topo.name!r}")


def with_loops(topo: Topology, paths: PathTable) -> PathTable:
    """`paths` plus a loop per NIC and uplink of its leaf, as mesh/loops.py plans them: NIC -> leaf
    -> the uplink's far switch and back, which tells a leaf's uplink from the downlink that
    shares every NIC pair's path with it (2-tier fabrics)."""
    rows = [(paths.row(i), paths.weights[paths.indptr[i]:paths.indptr[i + 1]]) for i in range(len(paths))]
    src, dst, traced = list(paths.src_nic), list(paths.dst_nic), list(paths.traced)
    for nic in topo.nics:
        leaf = topo.switch_id(topo.switch_of(nic))
        cable = topo.links_between(nic, leaf)[0]
        for lid, (a, b) in topo.links.items():
            if leaf not in (a, b) or a not in topo.switch_tier or b not in topo.switch_tier:
                continue
            far = b if a == leaf else a
            rows.append((np.array([topo.index("nic", nic), topo.link_dir(cable, nic, leaf),
                                   topo.index("switch", leaf), topo.link_dir(lid, leaf, far),
                                   topo.index("switch", far), topo.link_dir(lid, far, leaf),
                                   topo.link_dir(cable, leaf, nic)], dtype=np.int64), np.ones(7)))
            src.append(topo.nic_index(nic))
            dst.append(topo.nic_index(nic))
            traced.append(True)
    return PathTable.from_rows(rows, src, dst, traced)
