"""Which running Slurm jobs a fabric event touches.

A job is affected when two of its nodes form a host pair whose traced probe paths cross the
event's element (a link direction or both, a switch, a NIC with its cable, a host); for a host's
clock, every job on that host. The element -> host pairs map comes from the plan's path table;
the jobs from the Slurm backend (running jobs with their node lists), refreshed by the caller.
"""

from __future__ import annotations

import time

import numpy as np

from fleetctl.model.fabric import PathTable, Topology

MAX_JOBS = 200  # listed per event; the evidence says how many more


class JobMap:
    """Host pairs through an element, from the plan's path incidence when asked (an event opens
    or updates), not a table built per plan: the table (element -> set of host-name pairs) held
    ~110 MB of Python objects at 1,280 hosts x 8 NICs and 495,586 paths, and took seconds to
    build at every (re)plan. `inc`: the paths x elements incidence in CSC form, shared with the
    window analyzer where it has one."""

    def __init__(self, topo: Topology, paths: PathTable, inc=None):
        self.topo = topo
        self.inc = inc if inc is not None else paths.matrix(topo.n_elements).tocsc()
        host = topo.nic_host_index
        src, dst = paths.src_nic, paths.dst_nic
        ok = (src >= 0) & (dst >= 0)
        # per path: its two hosts, the lower index first; -1 where it is not between two hosts
        a = np.where(ok, host[np.where(ok, src, 0)], -1)
        b = np.where(ok, host[np.where(ok, dst, 0)], -1)
        self.lo, self.hi = np.minimum(a, b), np.maximum(a, b)
        self.host_pos = {h: i for i, h in enumerate(topo.hosts)}
        self.jobs: list[dict] = []  # running jobs: {"job_id", "user", "nodes", "partition", set}

    def set_jobs(self, jobs) -> None:
        """Slurm backend SlurmJob objects (running ones)."""
        self.jobs = self.running(jobs)

    @staticmethod
    def running(jobs) -> list[dict]:
        return [{"job_id": j.job_id, "user": j.user, "nodes": j.nodelist,
                 "partition": j.partition, "_set": set(j.nodes)}
                for j in jobs if getattr(j, "state", "RUNNING") == "RUNNING" and j.nodes]

    def pairs_through(self, el: dict) -> np.ndarray:
        """The distinct host pairs (lower, higher host index; two hosts apart) whose traced
        paths cross the element, as an (n, 2) array."""
        inc = self.inc
        cols = [c for c in element_columns(self.topo, el) if 0 <= c < inc.shape[1]]
        if not cols:
            return np.zeros((0, 2), dtype=np.int64)
        rows = np.concatenate([inc.indices[inc.indptr[c]:inc.indptr[c + 1]] for c in cols])
        lo, hi = self.lo[rows], self.hi[rows]
        keep = (lo >= 0) & (lo != hi)
        n = len(self.topo.hosts)
        key = np.unique(lo[keep].astype(np.int64) * n + hi[keep])
        return np.stack([key // n, key % n], axis=1)

    def affected(self, el: dict) -> list[dict]:
        if el.get("type") in ("clock", "host"):
            host = el.get("id", "").split(":")[0]
            hit = [j for j in self.jobs if host in j["_set"]]
        else:
            hit = []
            pairs = self.pairs_through(el) if self.jobs else None
            for j in self.jobs:
                if not len(pairs):
                    break
                inside = np.zeros(len(self.topo.hosts), dtype=bool)
                pos = [self.host_pos[h] for h in j["_set"] if h in self.host_pos]
                inside[pos] = True
                if (inside[pairs[:, 0]] & inside[pairs[:, 1]]).any():
                    hit.append(j)
        return [{k: v for k, v in j.items() if k != "_set"} for j in hit[:MAX_JOBS]]


class FabricJobs:
    """Which running jobs an element of the shared fabric touches, from the topology alone (the
    merge of shards has no one plan's traced paths): jobs with nodes on both sides of it. A
    switch: a node under it, and not all of the job under one of its lower neighbours (or on
    one host); a link between switches: a node under its lower end and one elsewhere; a host
    cable, a NIC or a host: a job on that host. With ECMP any flow may take any of its equal
    paths, so a job spanning two leaves crosses each spine above both: "may cross". A host
    under several leaves (one per rail) counts under the first: rail-aligned traffic stays on
    its rail."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.below = topo.hosts_below()
        self.children = topo.switch_children()
        self.host_of = dict(zip(topo.nics, topo.nic_host))
        self.jobs: list[dict] = []
        self._side_cache: dict[str, dict[str, int]] = {}  # switch -> host -> side (_sides)

    def set_jobs(self, jobs) -> None:
        self.jobs = JobMap.running(jobs)

    def _sides(self, switch: str) -> dict[str, int]:
        """Host -> which side of `switch` it is on: the index of the lower neighbour it is
        under, or its own for a host on the switch (cached per switch)."""
        cache = self._side_cache
        if switch not in cache:
            side: dict[str, int] = {}
            for i, child in enumerate(self.children[switch]):
                for h in self.below[child]:
                    side.setdefault(h, i)
            n = len(self.children[switch])
            for k, h in enumerate(sorted(self.below[switch] - side.keys())):
                side[h] = n + k
            cache[switch] = side
        return cache[switch]

    def affected(self, el: dict) -> list[dict]:
        t, ident = el.get("type"), str(el.get("id", ""))
        if t == "switch" and ident in self.children:
            side = self._sides(ident)
            # a node under it, and the job not all on one of its sides (a lower switch's
            # subtree, one host, outside it: -1): some pair's traffic passes through it
            hit = []
            for j in self.jobs:
                seen = {side.get(h, -1) for h in j["_set"]}
                if len(seen) > 1 and seen != {-1}:
                    hit.append(j)
        elif t == "link" and ident in self.topo.links:
            ends = self.topo.links[ident]
            sws = [e for e in ends if e in self.children]
            if len(sws) == 2:
                side = self.below[min(sws, key=lambda e: self.topo.switch_tier[e])]
            else:  # a host's cable
                side = {self.host_of.get(e) for e in ends} - {None}
            hit = [j for j in self.jobs if j["_set"] & side and j["_set"] - side]
        else:
            host = self.host_of.get(ident, ident.split(":")[0])
            hit = [j for j in self.jobs if host in j["_set"]]
        return [{k: v for k, v in j.items() if k != "_set"} for j in hit[:MAX_JOBS]]


def element_columns(topo: Topology, el: dict) -> list[int]:
    """The fabric elements (columns of the path incidence) an event element stands for: a link
    direction (or both), a NIC with its cable, a switch with its links, a host's NICs. From an
    index built once per topology (a scan of every element per call cost ~40 ms a finding at
    5,000 hosts x 8 NICs)."""
    index = _column_index(topo)
    t, i = el.get("type"), el.get("id")
    if t == "link":
        d = el.get("direction", "both")
        return [e for e, direction in index["link"].get(i, ())
                if d in ("", "both", None) or direction == d]
    if t in ("nic", "switch", "host"):
        return list(index[t].get(i, ()))
    return []


def _column_index(topo: Topology) -> dict:
    """type -> id -> columns, in element order (as the scan gave them); links keep directions."""
    index = getattr(topo, "_element_columns", None)
    if index is not None and index["size"] == len(topo.elements):
        return index
    link: dict[str, list] = {}
    nic: dict[str, list[int]] = {}
    switch: dict[str, list[int]] = {}
    host: dict[str, list[int]] = {}
    for e, x in enumerate(topo.elements):
        if x.type == "link":
            link.setdefault(x.id, []).append((e, x.direction))
            for end in topo.links.get(x.id, ()):
                (switch if end in topo.switch_tier else nic).setdefault(end, []).append(e)
        elif x.type == "nic":
            nic.setdefault(x.id, []).append(e)
            host.setdefault(x.id.split(":")[0], []).append(e)
        elif x.type == "switch":
            switch.setdefault(x.id, []).append(e)
        elif x.type == "host":
            host.setdefault(x.id, []).append(e)
    for table in (nic, switch, host):  # element order, as one pass over the elements gave
        for cols in table.values():
            cols.sort()
    index = {"size": len(topo.elements), "link": link, "nic": nic, "switch": switch, "host": host}
    topo._element_columns = index
    return index


class JobRefresh:
    """Slurm's running jobs into a job map (JobMap, FabricJobs) every `every_s`, for a coordinator
    and for the merge of shards alike. `slurm` None (no Slurm where this runs): nothing. Slurm not
    answering never stops the caller: said once, until it answers again."""

    def __init__(self, slurm, every_s: float, log, who: str = ""):
        self.slurm, self.every_s, self.log, self.who = slurm, every_s, log, who
        self.last = 0.0
        self.failing = False

    def __call__(self, jobs, force: bool = False) -> None:
        now = time.time()
        if self.slurm is None or (not force and now - self.last < self.every_s):
            return
        self.last = now
        try:
            jobs.set_jobs(self.slurm.jobs(states=["RUNNING"]))
            self.failing = False
        except Exception as exc:  # noqa: BLE001 - Slurm down must not stop the detection
            if not self.failing:
                self.log(f"{self.who}cannot list running jobs: {str(exc)[:300]}")
            self.failing = True

