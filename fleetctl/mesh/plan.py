"""The probe plan: which NIC pairs probe, at what rate, within each host's probe budget.

    plan = plan_probes(topo, nics, budget_pps=2000, k=3, duration=10)

A host's load is the probes it sends plus the probes it answers, per second: a pair (a, b) at r
probes/s costs host(a) r and host(b) r. So with `ends(h)` pair ends on host h, the rate per pair
that keeps every host within the budget is budget / max_h ends(h).

1. Full mesh while it fits: when that rate is at least `min_pair_rate` (enough probes per path
   and window to see a loss), every NIC probes every NIC of the other hosts.
2. Beyond, the covering design of pairs.py (every link direction crossed by k sources), whose
   pair count grows as k N instead of N^2.
3. The rate is min(max_pair_rate, budget / max ends); `--rate` overrides it and the plan says
   when that exceeds the budget (the audit then warns: `probe.budget`).

The loss floor: with n probes through an element and none lost, the one-sided upper confidence
bound on its loss is -ln(1 - confidence) / n (the rule of three at 95 %: 3 / n). `element_probes`
estimates n per link direction before the run, ECMP splitting flows evenly over shortest paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetctl.errors import UsageError
from fleetctl.mesh.pairs import _Coverage, select_pairs
from fleetctl.model.fabric import Topology

DEFAULT_BUDGET_PPS = 2000.0
MIN_PAIR_RATE = 10.0  # below this a full mesh gives too few probes per path and window
MAX_PAIR_RATE = 50.0  # the rate of a small mesh; more adds load, not resolution


@dataclass
class ProbePlan:
    design: str
    pairs: list[tuple[int, int]]
    rate: float  # probes/s per pair
    budget_pps: float
    rate_source: str  # budget | override
    host_pps: dict[str, float]  # sent + answered per second, per host
    k: int
    duration: float
    full_mesh_pairs: int
    min_sources: int

    @property
    def max_host_pps(self) -> float:
        return max(self.host_pps.values(), default=0.0)

    @property
    def over_budget(self) -> bool:
        return self.max_host_pps > self.budget_pps * 1.001

    def to_dict(self) -> dict:
        loads = sorted(self.host_pps.values())
        return {"design": self.design, "pairs": len(self.pairs), "k": self.k,
                "rate_per_pair_pps": round(self.rate, 3), "rate_source": self.rate_source,
                "budget_pps": self.budget_pps,
                "host_pps_max": round(self.max_host_pps, 1),
                "host_pps_median": round(loads[len(loads) // 2], 1) if loads else 0.0,
                "over_budget": self.over_budget, "full_mesh_pairs": self.full_mesh_pairs,
                "min_sources": self.min_sources, "duration_s": self.duration}


def host_ends(pairs, nic_host: list[str]) -> dict[str, int]:
    """Pair ends per host: pairs it sends on plus pairs it answers."""
    out: dict[str, int] = {}
    for a, b in pairs:
        out[nic_host[a]] = out.get(nic_host[a], 0) + 1
        out[nic_host[b]] = out.get(nic_host[b], 0) + 1
    return out


def plan_probes(topo: Topology, nics: set[int] | None = None, *, budget_pps: float =
                DEFAULT_BUDGET_PPS, k: int = 3, duration: float = 10.0, rate: float | None = None
                ) -> ProbePlan:
    """The plan over the NICs `nics` (topology indexes; default every attached NIC)."""
    if not budget_pps > 0:
        raise UsageError(f"probe budget {budget_pps:g} probes/s: must be positive")
    attached = [i for i, n in enumerate(topo.nics) if topo.attached(n)]
    use = [i for i in attached if nics is None or i in nics]
    per_host: dict[str, int] = {}
    for i in use:
        per_host[topo.nic_host[i]] = per_host.get(topo.nic_host[i], 0) + 1
    n = len(use)
    # full mesh: host h sends to and answers every NIC elsewhere, from each of its n_h NICs
    full_ends = max((2 * c * (n - c) for c in per_host.values()), default=0)
    full_rate = budget_pps / full_ends if full_ends else math.inf
    want_full = full_rate >= MIN_PAIR_RATE or (rate is not None and rate * full_ends <= budget_pps)
    if want_full:
        pairs = [(a, b) for a in use for b in use if topo.nic_host[a] != topo.nic_host[b]]
        design, min_sources = "full-mesh", 0
        full = len(pairs)
    else:
        # the same design every run, over the NICs probed (a subset's own design, not the
        # fleet's filtered: that kept ~1/S of a shard's pairs)
        pp = select_pairs(topo, k=k, full_mesh_max=0, seed=0,
                          nics=None if nics is None else set(use))
        keep = set(use)
        pairs = [(a, b) for a, b in pp.pairs if a in keep and b in keep]
        design, min_sources, full = pp.design, pp.min_sources, pp.full_mesh_pairs
    ends = host_ends(pairs, topo.nic_host)
    worst = max(ends.values(), default=0)
    if rate is None:
        chosen = min(MAX_PAIR_RATE, budget_pps / worst) if worst else MAX_PAIR_RATE
        source = "budget"
    else:
        chosen, source = float(rate), "override"
    return ProbePlan(design, pairs, chosen, float(budget_pps), source,
                     {h: e * chosen for h, e in ends.items()}, k, float(duration), full,
                     min_sources)


def loss_floor(probes: np.ndarray | float, confidence: float = 0.95) -> np.ndarray:
    """The smallest loss rate that n probes with no loss can tell from zero (one-sided upper
    bound at `confidence`): -ln(1 - confidence) / n, inf where n is 0."""
    n = np.asarray(probes, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(n > 0, -math.log(1.0 - confidence) / np.maximum(n, 1e-300), np.inf)


def element_probes(topo: Topology, plan: ProbePlan) -> dict[int, float]:
    """Expected probes through each link direction (topology element index) over the run:
    forward over the pair's paths, echoes over the reverse ones, ECMP split evenly."""
    cov = _Coverage(topo)
    per_probe = plan.rate * plan.duration
    out = np.zeros(topo.n_elements)
    nic_pos = {name: i for i, name in enumerate(topo.nics)}
    nic_el: dict[int, tuple[int, int]] = {}  # nic index -> (up, down) cable directions
    for lid, (a, b) in topo.links.items():
        for nic_end, sw_end in ((a, b), (b, a)):
            if nic_end not in topo.switch_tier and sw_end in topo.switch_tier:
                nic_el[nic_pos[nic_end]] = (topo.link_dir(lid, nic_end, sw_end),
                                                    topo.link_dir(lid, sw_end, nic_end))
    groups: dict[tuple[int, int], int] = {}
    for a, b in plan.pairs:
        for nic in (a, b):  # each probe crosses both ends' cables both ways (probe + echo)
            up, down = nic_el.get(nic, (-1, -1))
            if up >= 0:
                out[up] += per_probe
                out[down] += per_probe
        x, y = cov.sw_of[a], cov.sw_of[b]
        groups[(x, y)] = groups.get((x, y), 0) + 1
        groups[(y, x)] = groups.get((y, x), 0) + 1  # the echo
    sigma = _shortest_path_counts(cov)
    d = cov.dist
    for (x, y), count in groups.items():
        if x == y or not np.isfinite(d[x, y]):
            continue
        on = d[x, cov.eu] + 1 + d[cov.ev, y] == d[x, y]
        share = np.where(on, sigma[x, cov.eu] * sigma[cov.ev, y], 0.0) / sigma[x, y]
        np.add.at(out, cov.eid[on], count * per_probe * share[on])
    return {e: float(v) for e, v in enumerate(out) if topo.elements[e].type == "link"}


def _shortest_path_counts(cov: _Coverage) -> np.ndarray:
    """sigma[x, y]: the number of shortest switch paths from x to y (1 on the diagonal)."""
    d = cov.dist
    s = d.shape[0]
    sigma = np.eye(s)
    finite = d[np.isfinite(d)]
    for level in range(1, int(finite.max()) + 1 if finite.size else 1):
        for u, v in zip(cov.eu, cov.ev):
            rows = (d[:, v] == level) & (d[:, u] == level - 1)
            sigma[rows, v] += sigma[rows, u]
    return sigma
