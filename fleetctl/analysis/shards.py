"""Shards: one fleet's probing split among coordinators by pods, and the merge that joins them.

One lens coordinator carries about 1,250 hosts x 8 NICs (docs/scale.md). Above that, lens runs
one coordinator per shard, each a plain `lens run` over its shard's nodes. A shard is made of
whole pods: the hosts that reach each other below the top tier of switches (a fat-tree pod, a
leaf of a 2-tier fabric, a rail-optimized scalable unit whose hosts join its rail leaves).

Why pods: a shard probes only between its own hosts, so every link below the top tier, and
every link into the top tier from the shard's switches, is crossed by that shard's paths and by
no other's. Each shard localizes there as a lone coordinator does, with all the evidence there
is. A shard needs at least two groups of switches that join only through the top tier (two
fat-tree pods, two leaves; a rail unit has eight), or its paths never climb to the top tier and
its uplinks go unmeasured: `partition` packs shards so.

What shards share are the top-tier switches above them (and any switch whose hosts a pod too
large for a shard spread over two shards). Each shard sees such a switch only through its own
links: a switch fault shows in every shard as a few link findings, or as a loss too thin in
any one shard to name. Each shard therefore publishes, per window, its findings and, for every
shared switch, the probes through it and lost, net of the paths its own loss findings explain
(`shard_counts`), with the same over all its valid paths (the background). The merge
(`merge_windows`) over the shards' latest windows:
- names the same element once, listing the shards that named it;
- tests each shared switch's loss pooled over every shard against the merged background
  (binomial, as step.pooled_loss_blame does per link direction) and names the switch where it
  stands out; the shards' loss findings on its links fold into it (`evidence.links`);
- leaves a shard whose window is missing or stale out, and says so; its absence is never a
  finding.
Its cost per window is O(shards x shared switches + findings), independent of the paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.sparse import csr_matrix
from scipy.stats import binom

from fleetctl.analysis.rollup import severity
from fleetctl.analysis.signals import Thresholds
from fleetctl.errors import UsageError
from fleetctl.model.fabric import Topology
from fleetctl.model.findings import finding_key, sort_key
from fleetctl.model.severity import SEVERITY_RANK
from fleetctl.nodeset import parse_nodeset

MIN_SHARD_HOSTS = 2
MAX_SHARDS = 4096


@dataclass(frozen=True)
class Shard:
    name: str  # shard-0, shard-1, ...
    hosts: tuple[str, ...]
    pods: int  # whole pods in it (a pod larger than a shard counts in each part)
    groups: int  # groups of switches joined only through the top tier

    def to_dict(self) -> dict:
        return {"name": self.name, "nodes": str(parse_nodeset(list(self.hosts))), "hosts": len(self.hosts),
                "pods": self.pods, "switch_groups": self.groups}


@dataclass
class ShardLayout:
    topo_name: str
    max_hosts: int
    shards: list[Shard]
    shared: list[str]  # switches with hosts of more than one shard below them
    below: dict[str, frozenset[int]] = field(default_factory=dict)  # switch -> shards under it
    unmeasured: list[str] = field(default_factory=list)  # shards whose uplinks no path climbs

    def shard_of(self, name: str) -> Shard:
        for s in self.shards:
            if s.name == name:
                return s
        raise UsageError(f"no shard {name!r} in this layout (shards: "
                         f"{', '.join(s.name for s in self.shards)})")

    def shared_for(self, hosts) -> list[str]:
        """The shared switches above a set of hosts (a shard's coordinator's nodes)."""
        mine = {i for i, s in enumerate(self.shards) if set(s.hosts) & set(hosts)}
        return [sw for sw in self.shared if self.below[sw] & mine]

    def to_dict(self) -> dict:
        return {"topology": self.topo_name, "max_hosts": self.max_hosts,
                "shards": [s.to_dict() for s in self.shards], "shared_switches": self.shared,
                "unmeasured_uplinks": self.unmeasured}


def _components(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    if not edges:
        return np.arange(n)
    a, b = np.array(edges, dtype=np.int64).T
    graph = csr_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def partition(topo: Topology, max_hosts: int) -> ShardLayout:
    """Shards of whole pods, at most `max_hosts` hosts each where a pod allows, each with at
    least two switch groups where the fabric has them; deterministic (the site's order)."""
    if not MIN_SHARD_HOSTS <= max_hosts <= 1_000_000:
        raise UsageError(f"shard size {max_hosts} out of range ({MIN_SHARD_HOSTS}-1000000 hosts)")
    switches = list(topo.switch_tier)
    if not switches or not topo.hosts:
        raise UsageError(f"topology {topo.name!r} has no switches or no hosts to shard")
    top = max(topo.switch_tier.values())
    tiers = set(topo.switch_tier.values())
    pos = {s: i for i, s in enumerate(switches)}
    host_pos = {h: len(switches) + i for i, h in enumerate(topo.hosts)}
    nic_host = dict(zip(topo.nics, topo.nic_host))
    below_top = [s for s in switches if topo.switch_tier[s] < top or len(tiers) == 1]
    sw_edges, host_edges = [], []
    for a, b in topo.links.values():
        if a in pos and b in pos:
            if topo.switch_tier[a] < top and topo.switch_tier[b] < top:
                sw_edges.append((pos[a], pos[b]))
        else:
            nic, sw = (a, b) if b in pos else (b, a)
            if sw in pos and nic in nic_host and (topo.switch_tier[sw] < top or len(tiers) == 1):
                host_edges.append((host_pos[nic_host[nic]], pos[sw]))
    n = len(switches) + len(topo.hosts)
    group = _components(n, sw_edges)  # switch groups: joined below the top tier
    pod = _components(n, sw_edges + host_edges)  # pods: switch groups joined by their hosts
    groups_of_pod: dict[int, set[int]] = {}
    for s in below_top:
        groups_of_pod.setdefault(int(pod[pos[s]]), set()).add(int(group[pos[s]]))
    pods: dict[int, list[str]] = {}
    for h in topo.hosts:
        pods.setdefault(int(pod[host_pos[h]]), []).append(h)
    shards_hosts: list[tuple[list[str], int, int]] = []  # (hosts, pods, groups)
    cur: list[str] = []
    cur_pods = cur_groups = 0
    for p, hosts in pods.items():  # in the site's order of first host
        g = len(groups_of_pod.get(p, ()))
        if cur and cur_groups >= 2 and len(cur) + len(hosts) > max_hosts:
            shards_hosts.append((cur, cur_pods, cur_groups))
            cur, cur_pods, cur_groups = [], 0, 0
        if len(hosts) > max_hosts and g >= 2:  # a pod larger than a shard: split by hosts
            if cur:
                shards_hosts.append((cur, cur_pods, cur_groups))
                cur, cur_pods, cur_groups = [], 0, 0
            for i in range(0, len(hosts), max_hosts):
                shards_hosts.append((hosts[i:i + max_hosts], 1, g))
            continue
        cur += hosts
        cur_pods += 1
        cur_groups += g
    if cur:
        if shards_hosts and cur_groups < 2:  # a last lone group: with the shard before it
            h, p, g = shards_hosts.pop()
            cur, cur_pods, cur_groups = h + cur, p + cur_pods, g + cur_groups
        shards_hosts.append((cur, cur_pods, cur_groups))
    if len(shards_hosts) > MAX_SHARDS:
        raise UsageError(f"{len(shards_hosts)} shards of at most {max_hosts} hosts: over "
                         f"{MAX_SHARDS}; choose larger shards")
    shards = [Shard(f"shard-{i}", tuple(h), p, g) for i, (h, p, g) in enumerate(shards_hosts)]
    below = _shards_below(topo, shards)
    shared = [s for s in switches if len(below[s]) > 1]
    return ShardLayout(topo.name, max_hosts, shards, shared, below,
                       [s.name for s in shards if s.groups < 2 and len(tiers) > 1])


def _shards_below(topo: Topology, shards: list[Shard]) -> dict[str, frozenset[int]]:
    """Per switch, the shards with a host under it."""
    shard_of_host = {h: i for i, s in enumerate(shards) for h in s.hosts}
    return {sw: frozenset(shard_of_host[h] for h in hosts)
            for sw, hosts in topo.hosts_below().items()}


# ---------------------------------------------------------------------- a shard's window
def shard_counts(step, sig, findings: list[dict], shared_cols: np.ndarray,
                 columns_of) -> dict:
    """What a shard publishes of one window besides its findings: per shared switch (columns
    `shared_cols` of the step's incidence) the probes through it and lost, and the same over all
    valid paths, each net of the paths that the window's loss findings cross (`columns_of(el)`:
    an element dict's incidence columns); and for delay, the valid paths through it, those of
    them delayed and their summed excess (us), with the same over all valid paths, net of the
    paths any of the window's findings cross and of lossy paths (whose delay is the survivors').
    Weighted as the incidence is (untraced rows by their crossing probability)."""
    rows = np.array(sig.valid, dtype=bool)
    for f in findings:
        if f.get("metric") in ("loss", "down"):
            rows &= ~step.rollup.paths_through(columns_of(f["element"]))
    drows = rows & ~np.asarray(sig.lossy, dtype=bool)
    for f in findings:
        if f.get("metric") == "delay":
            drows &= ~step.rollup.paths_through(columns_of(f["element"]))
    sent = np.where(rows, np.asarray(sig.sent, float), 0.0)
    lost = np.where(rows, np.asarray(sig.lost, float), 0.0)
    delayed = drows & np.asarray(sig.delayed, dtype=bool)
    excess = np.where(delayed, np.nan_to_num(np.asarray(sig.excess_us, float)), 0.0)
    inc = step.inc[:, shared_cols]
    return {"probes": float(sent.sum()), "lost": float(lost.sum()),
            "through": np.asarray(inc.T @ sent).ravel(), "lost_through": np.asarray(inc.T @ lost).ravel(),
            "paths": float(drows.sum()), "delayed": float(delayed.sum()),
            "paths_through": np.asarray(inc.T @ drows.astype(float)).ravel(),
            "delayed_through": np.asarray(inc.T @ delayed.astype(float)).ravel(),
            "excess_through": np.asarray(inc.T @ excess).ravel()}


# ---------------------------------------------------------------------- the merge
@dataclass
class ShardWindow:
    """One shard's latest window, as read (validated) from its document."""

    shard: str
    t_end: float
    probes: float
    lost: float
    switches: dict[str, tuple[float, float]]  # shared switch -> (probes through, lost), net
    findings: list[dict]
    paths: float = 0.0  # valid paths for delay, net (0: a document without delay figures)
    delayed: float = 0.0
    # shared switch -> (valid paths through it, delayed, their summed excess in us), net
    delay_switches: dict[str, tuple[float, float, float]] = field(default_factory=dict)


@dataclass
class MergeResult:
    findings: list[dict]
    shards_used: list[str]
    shards_missing: list[str]  # no window, or a stale one: left out, never a finding
    switches: list[dict]  # per shared switch: pooled figures over the shards used


def merge_windows(windows: list[ShardWindow], expected: list[str], shared: list[str],
                  th: Thresholds | None = None, links_of=None) -> MergeResult:
    """One merged window from the shards' latest (fresh) windows. `links_of(switch)`: the link
    ids of a switch's links (to fold the shards' link findings into a switch named here)."""
    th = th or Thresholds()
    used = sorted({w.shard for w in windows})
    missing = sorted(set(expected) - set(used))
    merged: dict[tuple, dict] = {}
    for w in sorted(windows, key=lambda w: w.shard):
        for f in w.findings:
            key = finding_key(f["element"], f["metric"])
            have = merged.get(key)
            if have is None:
                merged[key] = have = {**f, "evidence": {**f.get("evidence", {}), "shards": []}}
            elif f["confidence"] > have["confidence"]:
                shards = have["evidence"]["shards"]
                merged[key] = have = {**f, "evidence": {**f.get("evidence", {}), "shards": shards}}
            have["evidence"]["shards"].append(w.shard)
    rows, named = _switch_tests(windows, shared, th)
    named += _switches_by_links(merged, shared, th, links_of, {n for n, _ in named})
    delay_rows, delay_named = _switch_delay_tests(windows, shared, th)
    delay_named += _switches_by_links(merged, shared, th, links_of, {n for n, _ in delay_named},
                                      metrics=("delay",))
    _fold_switches(merged, named, "loss", links_of)
    _fold_switches(merged, delay_named, "delay", links_of)
    by_shards = _fold_into_shard_switches(merged, shared, links_of, ("loss", "down"))
    delay_by_shards = _fold_into_shard_switches(merged, shared, links_of, ("delay",))
    _mark_suspects(merged, shared, links_of, {n for n, _ in named} | by_shards)
    _mark_suspects(merged, shared, links_of, {n for n, _ in delay_named} | delay_by_shards,
                   metrics=("delay",))
    _hold_explained_if_named(merged, {n for n, _ in named} | by_shards,
                             {n for n, _ in delay_named} | delay_by_shards)
    switches = {r["switch"]: r for r in rows}
    for r in delay_rows:
        switches.setdefault(r["switch"], {"switch": r["switch"]})["delay"] = \
            {k: v for k, v in r.items() if k != "switch"}
    return MergeResult(sorted(merged.values(), key=sort_key), used, missing,
                       [switches[s] for s in shared if s in switches])


def _fold_switches(merged: dict, named: list[tuple[str, dict]], metric: str, links_of) -> None:
    """Each switch named by the merge becomes one finding of `metric`; the shards' findings of
    that metric on its links fold into it (`evidence.links`)."""
    family = ("loss", "down") if metric == "loss" else ("delay",)
    for sw, row in named:
        key = finding_key({"type": "switch", "id": sw}, metric)
        links = set(links_of(sw)) if links_of else set()
        folded = [k for k, f in merged.items() if f["metric"] in family
                  and f["element"]["type"] == "link" and f["element"]["id"] in links]
        folded_shards = sorted({s for k in folded for s in merged[k]["evidence"]["shards"]})
        folded_links = sorted({_link_name(merged[k]["element"]) for k in folded})
        for k in folded:
            del merged[k]
        if key in merged:  # named by a shard too: one finding, with the pooled figures
            merged[key]["evidence"].update(merge=row)
            merged[key]["evidence"]["shards"] = sorted(set(merged[key]["evidence"]["shards"]) |
                                                       set(folded_shards) | set(row["shards"]))
            continue
        merged[key] = {"element": {"type": "switch", "id": sw}, "metric": metric,
                       "severity": row.get("severity") or
                       severity(metric, row.get("loss", 0.0), row.get("excess_us", 0.0)),
                       "confidence": row["confidence"],
                       "evidence": {"merge": row, "links": folded_links,
                                    "shards": sorted(set(row["shards"]) | set(folded_shards))}}


def _fold_into_shard_switches(merged: dict, shared: list[str], links_of, family) -> set[str]:
    """A shared switch a shard named itself (its own roll-up saw enough of its links) while
    another shard named only some of its links: those link findings (of the `family`) fold
    into the switch's finding (`evidence.links`), as into a switch the merge names. Left apart
    they were a switch and up to 44 link findings of one spine's fault in one window (2 shards
    of 1,280 x 8: precision 0.36 over 80 trials, benchmarks/localization_shards.py). The switches so named are returned."""
    out: set[str] = set()
    if links_of is None:
        return out
    shared = set(shared)
    for f in list(merged.values()):
        el = f["element"]
        if el["type"] != "switch" or el["id"] not in shared or f["metric"] not in family:
            continue
        out.add(el["id"])
        links = set(links_of(el["id"]))
        folded = [k for k, g in merged.items() if g["metric"] in family
                  and g["element"]["type"] == "link" and g["element"]["id"] in links]
        if not folded:
            continue
        ev = f["evidence"]
        ev["links"] = sorted(set(ev.get("links") or []) |
                             {_link_name(merged[k]["element"]) for k in folded})
        ev["shards"] = sorted(set(ev["shards"]) |
                              {s for k in folded for s in merged[k]["evidence"]["shards"]})
        for k in folded:
            del merged[k]
    return out


def _hold_explained_if_named(merged: dict, named: set[str], delay_named: set[str]) -> None:
    """A shard's finding its shard judged explained by a shared switch, should that switch be
    at fault (`evidence.explained_if_named`, lens/window.py), in a window where the merge
    names that switch (of the finding's metric family): marked explained by the window's
    finding, which holds it in the event machine while the switch's fault stands."""
    for f in merged.values():
        ev = f["evidence"]
        sw = ev.get("explained_if_named")
        if not isinstance(sw, str) or ev.get("explained_by_window_finding"):
            continue
        if sw in (delay_named if f["metric"] == "delay" else named):
            ev["explained_by_window_finding"] = f"switch:{sw}"


def _link_name(el: dict) -> str:
    """A link direction (`leaf1->spine2`), or the cable's id when both directions are meant."""
    d = el.get("direction")
    return el["id"] if d in (None, "", "both") else d


def _mark_suspects(merged: dict, shared: list[str], links_of, named: set[str],
                   metrics=("loss", "down")) -> None:
    """Link findings on two links or more of one shared switch not (yet) named: a spine's
    fault as it starts, each shard seeing a link or two of it before enough are in to name the
    switch. Marked `evidence.suspect_switch`, so the event machine opens them only if they
    persist (`EventRules.k_open_suspect` windows): one fault, one event on the switch, not a
    few short-lived link events ahead of it. Two faulty cables on one spine still open, late.
    A single link of such a switch is marked `evidence.lone_link_of`: opened after
    `EventRules.k_open_lone` windows (a lone cable's event one window later). Delay findings
    likewise, among themselves (`metrics`)."""
    if links_of is None:
        return
    for sw in shared:
        if sw in named:
            continue
        links = set(links_of(sw))
        on = [f for f in merged.values() if f["metric"] in metrics
              and f["element"]["type"] == "link" and f["element"]["id"] in links]
        if len({f["element"]["id"] for f in on}) >= 2:
            for f in on:
                f["evidence"]["suspect_switch"] = sw
        elif on:  # one link of it: a lone cable, or the switch's fault in its first window (seen by
            # a shard or two before the others' links are in, once in CI): an event if it stays
            on[0]["evidence"]["lone_link_of"] = sw


def _switches_by_links(merged: dict, shared: list[str], th: Thresholds, links_of,
                       already: set[str], metrics=("loss", "down")) -> list[tuple[str, dict]]:
    """The roll-up's switch rule over every shard's findings together: a shared switch with at
    least `switch_min_links` of its link directions named lossy (or delayed, `metrics`), half of
    them or more, by two shards or more, is the switch (each shard saw only its own links of it:
    a spine's fault is a few link findings in every shard, and each shard's paths through it are
    explained by them, so the pooled test has nothing left to see)."""
    if links_of is None:
        return []
    out = []
    for sw in shared:
        if sw in already:
            continue
        links = set(links_of(sw))
        dirs, shards, conf, sev = 0, set(), [], []
        for f in merged.values():
            el = f["element"]
            if f["metric"] in metrics and el["type"] == "link" and el["id"] in links:
                dirs += 2 if el.get("direction") == "both" else 1
                shards |= set(f["evidence"]["shards"])
                conf.append(f["confidence"])
                sev.append(f["severity"])
        if dirs >= th.switch_min_links and 2 * dirs >= 2 * len(links) and len(shards) >= 2:
            out.append((sw, {"link_directions": dirs, "of": 2 * len(links), "shards": sorted(shards),
                             "confidence": round(float(np.mean(conf)), 3),
                             "severity": max(sev, key=SEVERITY_RANK.get)}))
    return out


def _switch_tests(windows: list[ShardWindow], shared: list[str], th: Thresholds):
    """Per shared switch, pooled over the shards: (figures of every switch with probes, the
    switches named). Greedy as pooled_loss_blame: the most concentrated excess first; a named
    switch's probes leave the background of the next test."""
    n, k, by = _pool(shared, [(w.shard, {sw: v[:2] for sw, v in w.switches.items()}) for w in windows])
    return _greedy(shared, n, k, by, sum(w.probes for w in windows), sum(w.lost for w in windows),
                   ("probes", "lost", "loss", 6), th.loss_alpha, th.pooled_max_faults,
                   floor=th.background_loss, ceiling=1.0, min_k=th.pooled_min_lost,
                   min_rate=th.pooled_min_loss)


def _switch_delay_tests(windows: list[ShardWindow], shared: list[str], th: Thresholds):
    """Per shared switch, delayed paths pooled over the shards: (figures of every switch with
    paths, the switches named). A switch is named where `switch_min_links` (3) paths or more and
    a share of its paths of at least `candidate_share` are delayed, twice the background's share
    (the other paths', at least 1e-3) or more, and improbable under that share (binomial,
    `element_alpha` over the switches tested); greedy as the loss test. A gray spine seen by every
    shard is a few delayed paths in each (too few for a shard to name it, or a link or two):
    pooled, it is all of them."""
    n, k, by = _pool(shared, [(w.shard, {sw: v[:2] for sw, v in w.delay_switches.items()})
                              for w in windows])
    excess, _, _ = _pool(shared, [(w.shard, {sw: (v[2], 0.0) for sw, v in w.delay_switches.items()})
                                  for w in windows])
    rows, named = _greedy(shared, n, k, by, sum(w.paths for w in windows),
                          sum(w.delayed for w in windows), ("paths", "delayed", "share", 4),
                          th.element_alpha, th.pooled_max_faults, floor=1e-3, ceiling=0.5,
                          min_k=max(th.min_bad_paths, th.switch_min_links),
                          min_rate=th.candidate_share)
    # the mean excess of the delayed paths: in every row, and a named switch's severity
    for sw, row in [(r["switch"], r) for r in rows] + named:
        row["excess_us"] = round(excess[sw] / k[sw], 1) if k[sw] >= 1 else 0.0
    return rows, named


def _pool(shared: list[str], per_shard: list[tuple[str, dict]]):
    """Sum per shared switch of each shard's (count, bad): (counts, bads, shards that had it)."""
    n = {s: 0.0 for s in shared}
    k = {s: 0.0 for s in shared}
    by: dict[str, list[str]] = {s: [] for s in shared}
    for shard, table in per_shard:
        for sw, (sn, sk) in table.items():
            if sw in n and sn > 0:
                n[sw] += sn
                k[sw] += sk
                by[sw].append(shard)
    return n, k, by


def _greedy(shared, n, k, by, total_n, total_k, keys, alpha, max_named, *, floor, ceiling,
            min_k, min_rate):
    """The pooled binomial test of each switch against the rest (background clamped to
    [floor, ceiling]): a switch with `min_k` bad or more, a rate of at least `min_rate` and twice
    the background, and a p-value under `alpha` over the switches tested; the one with the largest
    log-likelihood ratio is named, its counts leave the background, and the rest are tested again.
    `keys`: the row's names for (count, bad, rate, rate's digits)."""
    count_key, bad_key, rate_key, digits = keys
    named: list[tuple[str, dict]] = []
    rows: dict[str, dict] = {}
    left = [s for s in shared if n[s] > 0]
    alpha = alpha / max(1, len(left))
    while left and len(named) < max_named:
        best, best_llr = None, -np.inf
        for sw in left:
            p0 = min(ceiling, max(floor, (total_k - k[sw]) / max(1.0, total_n - n[sw])))
            rate = k[sw] / n[sw]
            row = {count_key: int(round(n[sw])), bad_key: int(round(k[sw])),
                   rate_key: round(rate, digits), "background": round(p0, 6), "shards": sorted(by[sw])}
            rows[sw] = row
            if k[sw] < min_k or rate < max(2 * p0, min_rate):
                continue
            p = float(binom.sf(round(k[sw]) - 1, round(n[sw]), p0))
            if p >= alpha:
                continue
            r = min(rate, 1 - 1e-12)
            llr = k[sw] * np.log(r / p0) + (n[sw] - k[sw]) * np.log((1 - r) / (1 - p0))
            row["p_value"] = p
            if llr > best_llr:
                best, best_llr = sw, llr
        if best is None:
            break
        row = rows[best]
        row["confidence"] = round(float(np.sqrt((row[rate_key] - row["background"]) / row[rate_key])), 3)
        named.append((best, row))
        left.remove(best)
        total_n -= n[best]
        total_k -= k[best]
    return [{"switch": s, **rows[s]} for s in shared if s in rows], named
