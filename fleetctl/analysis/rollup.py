"""Roll blamed link directions up to the smallest common element, with evidence and confidence.

Order matters, largest element first:
1. switch: at least `switch_min_links` blamed link directions touch it and either most paths
   through it are bad (`switch_bad_share`) or half of its link directions are blamed;
2. NIC: both directions of the NIC's cable are blamed (every path from and to it is bad while its
   neighbours are fine): the NIC, or its switch port or cable, which probes cannot tell apart;
3. host: every NIC of a host with two or more NICs is a NIC finding; for delay, also every NIC
   of such a host slow in the same direction (evidence `side`: send, receive or both; some of
   them blamed and the others' paths nearly as slow counts too, `_host_wide`). That is the
   host's own sending or receiving side (its CPU, kernel or probe agent: timestamps are taken in
   software; or an error of its clock estimate), not two cables degrading by the same
   microseconds at once, so `is_host_side` findings are reported as a measurement note, never as
   a network fault;
4. what remains is a link: one direction, or `both` when both directions are blamed.

Confidence (0..1) = support * sqrt(lift), where support = 1 - 0.5^(bad paths through the element)
and lift = (c - b) / (1 - b), c being the share of the element's paths that are bad and b the share
of bad paths elsewhere (background noise): 1 when every path through it is bad and none elsewhere,
0 when its paths are no worse than the rest. An element is reported only if its bad-path count
is significant against that background (binomial tail below `element_alpha`, 1e-3: a NIC whose
28 paths include 11 slow ones when 20 % of all paths are slow is luck, not a fault), and findings
below `min_confidence` (0.4) are dropped:
with heavy-tailed jitter a window's p99 makes scattered paths look slow, but never most of the
paths through one element. A delay finding on a link or NIC also needs the solver's estimate for
it (`estimate_delay_us`) to reach `delay_floor_us`: paths just over the floor whose excess the
fit puts mostly elsewhere are not that element's fault. (Switches and hosts are judged by their
paths: a path crosses two of a switch's link directions, which share its delay.)
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.sparse import csc_matrix
from scipy.stats import binom

from fleetctl.analysis.signals import PathSignals, Thresholds
from fleetctl.model.fabric import Element, Topology
from fleetctl.model.findings import Finding


def _rate(figures, mask: np.ndarray) -> float:
    n, k = figures(mask)
    return k / max(1, n)


def severity(metric: str, loss: float, excess_us: float) -> str:
    if metric == "down" or loss >= 0.05 or excess_us >= 1000:
        return "critical"
    if loss >= 0.01 or excess_us >= 100:
        return "major"
    return "minor"


class _Call:
    """One call of Rollup.findings: what every group of it is judged against."""

    def __init__(self, blamed: dict[int, float], metric: str, sig: PathSignals, window: int,
                 pooled: bool = False):
        self.blamed, self.metric, self.sig, self.window = blamed, metric, sig, window
        self.pooled = pooled  # blamed by pooled loss (step.pooled_loss_blame): judged so too
        self.bad = (sig.lossy if metric == "loss" else sig.delayed) & sig.valid
        self.total_bad = max(1, int(self.bad.sum()))


def _figures(call: _Call):
    """What a set of paths (a mask) shows for the call's metric, as (trials, failures): loss,
    its probes and lost; delay, its paths and the bad among them."""
    sig = call.sig
    if call.metric == "loss":
        return lambda mask: (int(sig.sent[mask].sum()), int(sig.lost[mask].sum()))
    return lambda mask: (int(mask.sum()), int(call.bad[mask].sum()))


class Rollup:
    """Roll-up over one path table; reused across windows and metrics."""

    def __init__(self, topo: Topology, incidence: csc_matrix, th: Thresholds):
        self.topo = topo
        self.inc = incidence.tocsc()  # all paths x all elements
        self.inc.sort_indices()
        self.is_link = topo.element_types() == 0
        self._twins: dict[int, list[int]] = {}
        self.th = th
        self.nic_links: dict[int, tuple[int, int]] = {}  # nic elem -> (up, down) link dirs
        for lid, (a, b) in topo.links.items():
            if a in topo.switch_tier and b in topo.switch_tier:
                continue
            nic, sw = (a, b) if b in topo.switch_tier else (b, a)
            self.nic_links[topo.index("nic", nic)] = (topo.link_dir(lid, nic, sw),
                                                      topo.link_dir(lid, sw, nic))
        self.host_nics: dict[str, list[int]] = {}
        for nic, host in zip(topo.nics, topo.nic_host):
            self.host_nics.setdefault(host, []).append(topo.index("nic", nic))
        self.switch_links: dict[str, set[int]] = {s: set() for s in topo.switch_tier}
        for lid, (a, b) in topo.links.items():  # one pass: links_of_switch per switch is O(S*L)
            for end in (a, b):
                if end in self.switch_links:
                    self.switch_links[end] |= {topo.link_dir(lid, a, b), topo.link_dir(lid, b, a)}

    def paths_through(self, elems: list[int]) -> np.ndarray:
        """Per path, whether it crosses any of the elements `elems`: from the CSC incidence's
        column slices (getcol copied a column per call, the slower part of every window's
        pooled rounds and roll-up)."""
        mask = np.zeros(self.inc.shape[0], dtype=bool)
        ptr, idx, data = self.inc.indptr, self.inc.indices, self.inc.data
        for e in elems:
            lo, hi = ptr[e], ptr[e + 1]
            mask[idx[lo:hi][data[lo:hi] > 0]] = True
        return mask

    def findings(self, blamed: dict[int, float], metric: str, sig: PathSignals,
                 window: int, pooled: bool = False) -> list[Finding]:
        """The blamed link directions grouped into the smallest elements that explain them
        (switches, then whole hosts, NICs, links), each judged into a finding or dropped."""
        call = _Call(blamed, metric, sig, window, pooled)
        left = set(blamed)
        groups = self._switch_groups(call, left)
        host_side: dict[str, str] = {}
        if metric == "delay":
            groups += self._host_side_groups(call, left, host_side)
        groups += self._nic_and_host_groups(left)
        groups += self._link_groups(left)
        found = []
        for el, path_elems, links in groups:
            through = self.paths_through(path_elems) & sig.valid
            f = self._finding(el, through, links, call)
            if f is not None:
                if el.type == "host" and metric == "delay":
                    f.evidence["side"] = host_side.get(el.id, "both")
                found.append((f, through))
        return self._explain_away(found, call)

    def _explain_away(self, found: list[tuple[Finding, np.ndarray]], call: _Call) -> list[Finding]:
        """Drop a finding whose bad paths another finding explains. The solver may split one
        fault between two elements on the same bad paths (leaf2->spine1 and spine1->leaf1 of a
        2-leaf fabric, told apart only by a few loop probes each): what settles it is each one's
        own paths, outside the other. A is explained by B when A's own paths show no fault of
        their own and the two one-fault hypotheses, B only against A only, differ by a likelihood
        ratio of at least 1 / `explain_alpha` on both own path sets. A with no own paths is never
        dropped (it cannot be judged apart). A finding explained only by findings that are
        themselves explained stays. The kept finding names what it explains (evidence `explains`)."""
        by: dict[int, list[int]] = {}
        for i, (_, ta) in enumerate(found):
            for j, (_, tb) in enumerate(found):
                if i != j and (ta & tb & call.bad).any() and self._explained_by(call, ta, tb):
                    by.setdefault(i, []).append(j)
        keep = [i for i in range(len(found)) if i not in by]
        for i, explainers in by.items():
            firm = [j for j in explainers if j not in by]
            if not firm:
                keep.append(i)
                continue
            found[firm[0]][0].evidence.setdefault("explains", []).append(found[i][0].element.label)
        return [found[i][0] for i in sorted(keep)]

    def _explained_by(self, call: _Call, ta: np.ndarray, tb: np.ndarray) -> bool:
        """Is the finding through paths `ta` explained by the one through `tb` (_explain_away)?"""
        sig, th = call.sig, self.th
        own_a, own_b = ta & ~tb & sig.valid, tb & ~ta & sig.valid
        if not own_a.any():
            return False
        figures = _figures(call)
        base = _rate(figures, sig.valid & ~(ta | tb))
        base = max(th.background_loss if call.metric == "loss" else 1e-6, base)
        (na, ka), (nb, kb) = figures(own_a), figures(own_b)
        if binom.sf(ka - 1, na, base) < th.path_alpha:
            return False  # A's own paths show a hint of a fault of their own: a second fault
        # each one's claimed rate: that of its bad paths (the shared ones, and its own)
        ra = min(0.999, max(base, _rate(figures, ta & call.bad)))
        rb = min(0.999, max(base, _rate(figures, tb & call.bad)))
        b_only = binom.logpmf(ka, na, base) + binom.logpmf(kb, nb, rb)
        a_only = binom.logpmf(ka, na, ra) + binom.logpmf(kb, nb, base)
        return bool(th.explain_alpha > 0 and b_only - a_only >= -np.log(th.explain_alpha))

    def _switch_groups(self, call: _Call, left: set[int]) -> list[tuple]:
        """A switch most of whose links are blamed, or whose paths are mostly bad."""
        groups = []
        for sw, links in self.switch_links.items():
            mine = sorted(left & links)
            if len(mine) < self.th.switch_min_links:
                continue
            through = self.paths_through([self.topo.index("switch", sw)]) & call.sig.valid
            share = call.bad[through].mean() if through.any() else 0.0
            if share >= self.th.switch_bad_share or len(mine) >= 0.5 * len(links):
                groups.append((Element("switch", sw), [self.topo.index("switch", sw)], mine))
                left -= set(mine)
        return groups

    def _host_side_groups(self, call: _Call, left: set[int], host_side: dict[str, str]) -> list[tuple]:
        """Delay on every NIC of a host in one direction: the host's own side (rollup.is_host_side)."""
        groups = []
        for host, nic_els in self.host_nics.items():
            if len(nic_els) < 2 or not all(n in self.nic_links for n in nic_els):
                continue
            sides = [(side, [self.nic_links[n][k] for n in nic_els])
                     for k, side in enumerate(("send", "receive"))]
            sides = [(side, dirs) for side, dirs in sides if self._host_wide(dirs, left, call.sig)]
            if sides:
                links = [l for _, dirs in sides for l in dirs if l in left]
                host_side[host] = sides[0][0] if len(sides) == 1 else "both"
                groups.append((Element("host", host), links, links))
                left -= set(links)
        return groups

    def _nic_and_host_groups(self, left: set[int]) -> list[tuple]:
        """Both directions of a NIC's cable: the NIC; every NIC of a host so: the host."""
        groups, nic_groups = [], {}
        for nic_el, (up, down) in self.nic_links.items():
            if up in left and down in left:
                nic_groups[nic_el] = [up, down]
                left -= {up, down}
        for host, nic_els in self.host_nics.items():
            if len(nic_els) >= 2 and all(n in nic_groups for n in nic_els):
                links = [l for n in nic_els for l in nic_groups.pop(n)]
                groups.append((Element("host", host), nic_els, links))
        for nic_el, links in nic_groups.items():
            groups.append((self.topo.elements[nic_el], [nic_el], links))
        return groups

    def _link_groups(self, left: set[int]) -> list[tuple]:
        """What is left: links, by direction (or both), an indistinguishable twin named once."""
        groups = []
        by_link: dict[str, list[int]] = {}
        for e in sorted(left):
            by_link.setdefault(self.topo.elements[e].id, []).append(e)
        reported: set[int] = set()
        for lid, dirs in by_link.items():
            if len(dirs) == 1 and dirs[0] in reported:
                continue  # an indistinguishable twin of a link already reported
            direction = self.topo.elements[dirs[0]].direction if len(dirs) == 1 else "both"
            groups.append((Element("link", lid, direction), dirs, dirs))
            if len(dirs) == 1:
                reported.update(self.twins(dirs[0]))
        return groups

    def _finding(self, el: Element, through: np.ndarray, links: list[int], call: _Call) -> Finding | None:
        """`through`: the valid paths crossing the group's elements."""
        if call.pooled:
            return self._pooled_finding(el, through, links, call)
        sig, bad, metric = call.sig, call.bad, call.metric
        hit = through & bad
        n_bad, n_through = int(hit.sum()), int(through.sum())
        if n_bad < self.th.min_bad_paths:
            return None
        estimate = max(call.blamed.get(l, 0.0) for l in links)
        if metric == "delay" and el.type in ("link", "nic") and estimate < self.th.delay_floor_us:
            # the solver puts less than the floor on it: its paths' excess is mostly elsewhere
            # (a busy host, a clock estimate), and the floor says so little is never a fault
            return None
        if metric == "loss":
            # pooled over the bad paths: rare single drops on a few paths are not a fault
            lost, sent = int(sig.lost[hit].sum()), int(sig.sent[hit].sum())
            if binom.sf(lost - 1, sent, self.th.background_loss) >= self.th.loss_alpha:
                return None
        outside = sig.valid & ~through
        background = float(bad[outside].mean()) if outside.any() else 0.0
        consistency = n_bad / max(1, n_through)
        lift = max(0.0, (consistency - background) / max(1e-9, 1.0 - background))
        confidence = round(float((1.0 - 0.5 ** n_bad) * np.sqrt(lift)), 3)
        # its paths must be significantly worse than the rest, not just by luck of a few
        if binom.sf(n_bad - 1, n_through, max(background, 1e-6)) >= self.th.element_alpha:
            return None
        if confidence < self.th.min_confidence:
            # paths through it are barely worse than the rest: noise (heavy-tailed p99 jitter,
            # a few unlucky flows), not a faulty element
            return None
        evidence = self._evidence(call, through, hit, outside, background, links, estimate)
        loss_bad = evidence.pop("_loss_bad")
        excess_bad = evidence.pop("_excess_bad")
        kind = metric
        if metric == "loss" and float(np.median(sig.down[hit])) >= 0.5 and loss_bad >= 0.99:
            kind = "down"
        if el.type == "nic":
            evidence["alternatives"] = self._nic_alternatives(el.id)
        if el.type == "link" and len(links) == 1:
            twins = self.twins(links[0])
            if twins:  # the data cannot tell these apart: say so, and share the confidence
                evidence["indistinguishable_from"] = [self.topo.elements[t].label for t in twins]
                confidence = round(confidence / (1 + len(twins)), 3)
        return Finding(el, kind, severity(kind, loss_bad, 0.0 if metric == "loss" else excess_bad),
                       confidence, evidence)

    def _pooled_finding(self, el: Element, through: np.ndarray, links: list[int],
                        call: _Call) -> Finding | None:
        """A loss finding judged on the probes pooled over its paths: its loss against the loss
        of every path not through it. Confidence = (1 - background / loss) * (1 - 0.5^(lost / 4)):
        how far above the rest, and on how many lost probes."""
        sig, th = call.sig, self.th
        probed = np.asarray(sig.valid, dtype=bool)
        outside = probed & ~through
        n_t, k_t = int(sig.sent[through].sum()), int(sig.lost[through].sum())
        n_o, k_o = int(sig.sent[outside].sum()), int(sig.lost[outside].sum())
        if n_t == 0 or k_t < th.pooled_min_lost:
            return None
        p0 = max(th.background_loss, k_o / max(1, n_o))
        rate = k_t / n_t
        if rate < max(2 * p0, th.pooled_min_loss) or binom.sf(k_t - 1, n_t, p0) >= th.loss_alpha:
            return None
        confidence = round(float((1 - p0 / rate) * (1 - 0.5 ** (k_t / 4))), 3)
        if confidence < th.min_confidence:
            return None
        estimate = max(call.blamed.get(l, 0.0) for l in links)
        lossy = through & (np.asarray(sig.lost) > 0)
        evidence = {
            "window": call.window, "method": "pooled",
            "paths_through": int(through.sum()), "paths_with_loss": int(lossy.sum()),
            "probes_through": n_t, "lost_through": k_t, "loss_pct_through": round(100 * rate, 3),
            "probes_outside": n_o, "lost_outside": k_o,
            "background_loss_pct": round(100 * p0, 4),
            # for the significance test against the rest (significance.py)
            "probes_clean_outside": n_o, "lost_clean_outside": k_o,
            "blamed": [self.topo.elements[l].label for l in links],
            "estimate_loss_pct": round(float(100 * (1 - np.exp(-estimate))), 3),
        }
        kind = "down" if rate >= 0.99 else "loss"
        if el.type == "nic":
            evidence["alternatives"] = self._nic_alternatives(el.id)
        if el.type == "link" and len(links) == 1:
            twins = self.twins(links[0])
            if twins:
                evidence["indistinguishable_from"] = [self.topo.elements[t].label for t in twins]
                confidence = round(confidence / (1 + len(twins)), 3)
        return Finding(el, kind, severity(kind, rate, 0.0), confidence, evidence)

    def _evidence(self, call: _Call, through, hit, outside, background: float, links: list[int],
                  estimate: float) -> dict:
        """The figures behind a finding (docs/mesh.md, "Evidence"), and its bad paths' median loss
        and excess delay (under `_loss_bad`, `_excess_bad`, taken out by the caller)."""
        sig, bad = call.sig, call.bad
        clean = through & ~bad
        loss_bad = float(np.median(sig.loss_rate[hit]))
        excess_bad = float(np.nanmedian(sig.excess_us[hit])) if np.isfinite(
            sig.excess_us[hit]).any() else float("nan")
        n_bad = int(hit.sum())
        evidence = {
            "window": call.window,
            "paths_through": int(through.sum()),
            "paths_bad": n_bad,
            "paths_clean": int(clean.sum()),
            "share_of_bad_paths": round(min(1.0, n_bad / call.total_bad), 3),
            "loss_pct_bad_median": round(100 * loss_bad, 3),
            "loss_pct_clean_median": round(100 * float(np.median(sig.loss_rate[clean])), 3)
            if clean.any() else None,
            "excess_delay_us_bad_median": _round(excess_bad),
            "excess_delay_us_clean_median": _round(float(np.nanmedian(sig.excess_us[clean])))
            if clean.any() and np.isfinite(sig.excess_us[clean]).any() else None,
            "blamed": [self.topo.elements[l].label for l in links],
            # for the significance test against clean paths (significance.py)
            "background_bad_share": round(background, 5),
            "probes_through": int(sig.sent[through].sum()),
            "lost_through": int(sig.lost[through].sum()),
            "probes_clean_outside": int(sig.sent[outside & ~bad].sum()),
            "lost_clean_outside": int(sig.lost[outside & ~bad].sum()),
            "_loss_bad": loss_bad, "_excess_bad": excess_bad,
        }
        if call.metric == "loss":
            evidence["estimate_loss_pct"] = round(float(100 * (1 - np.exp(-estimate))), 3)
        else:
            evidence["estimate_delay_us"] = round(float(estimate), 1)
        return evidence

    def _host_wide(self, dirs: list[int], blamed: set[int], sig: PathSignals) -> bool:
        """Is the delay on these link directions (one per NIC of a host, all one way) the host's?
        Yes when every one is blamed, or when some are and the paths of the others are nearly as
        slow (median excess at least half of the blamed ones' and half the floor): a busy host
        slows all of its NICs alike, and only chance puts some of them under the threshold; a
        degraded NIC or cable leaves its siblings at their baseline."""
        hit = [d for d in dirs if d in blamed]
        if not hit:
            return False
        if len(hit) == len(dirs):
            return True
        excess = np.where(sig.valid, sig.excess_us, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no valid path: NaN, not host-wide
            mine = float(np.nanmedian(excess[self.paths_through(hit)]))
            others = float(np.nanmedian(excess[self.paths_through(
                [d for d in dirs if d not in blamed])]))
        return bool(np.isfinite(mine) and np.isfinite(others) and others >= 0.5 * mine
                    and others >= 0.5 * self.th.delay_floor_us)

    def twins(self, elem: int) -> list[int]:
        """Other link directions crossed by exactly the same paths with the same weights.

        With traced paths there are hardly any; with untraced flows (ECMP candidate sets) the
        uplinks of a leaf are all alike, and no solver can say which one is at fault."""
        if elem not in self._twins:
            ptr, idx, data = self.inc.indptr, self.inc.indices, self.inc.data
            nnz = np.diff(ptr)
            mine = slice(ptr[elem], ptr[elem + 1])
            same = np.flatnonzero(self.is_link & (nnz == nnz[elem]) & (nnz > 0))
            self._twins[elem] = [int(e) for e in same if e != elem
                                 and np.array_equal(idx[ptr[e]:ptr[e + 1]], idx[mine])
                                 and np.allclose(data[ptr[e]:ptr[e + 1]], data[mine])]
        return self._twins[elem]

    def _nic_alternatives(self, nic: str) -> list[dict]:
        out = []
        for lid, (a, b) in self.topo.links.items():
            if nic in (a, b):
                out.append({"type": "link", "id": lid})
                ports = self.topo.link_ports.get(lid)
                if ports:
                    sw_end = ports[1] if a == nic else ports[0]
                    if ":" in sw_end:
                        out.append({"type": "port", "id": sw_end})
        return out


def is_host_side(f: dict) -> bool:
    """A delay finding on a host (see 3. above): a measurement note, not a network fault."""
    return f["element"]["type"] == "host" and f["metric"] == "delay"


def _round(v: float) -> float | None:
    return None if not np.isfinite(v) else round(v, 1)
