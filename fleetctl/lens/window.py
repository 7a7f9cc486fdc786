"""One analysis window of lens: probe records -> integrity -> per-path figures -> findings.

The same steps as a one-shot audit (meshrun.analyze), for one window at a time and with state
carried between windows by the caller: the clock model (clocktrack.py) for one-way delays and the
per-path delay baselines (baseline.py) for gray failures. Integrity first: probes from or to a
host whose agent was overloaded, not running or restarting in the window are set aside, so an
overloaded host never produces a network finding; a delay on every path from (or to) all of a
host's NICs is that host's own side (rollup.is_host_side), kept as a note, never an event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import binom

from fleetctl.analysis.integrity import IntegrityThresholds, host_delay_note, hosts_set_aside, \
    overload_marks, probes_kept, responders_log_pending
from fleetctl.analysis.rollup import is_host_side
from fleetctl.analysis.signals import Thresholds
from fleetctl.analysis.step import ElementIndex, WindowStep
from fleetctl.analysis.summaries import WindowSummary, flow_rows, index_flows, loop_figures, \
    path_figures, path_slots
from fleetctl.analysis.windows import FlowIndex, Windows, build_windows
from fleetctl.lens.elementrows import ElementRows
from fleetctl.lens.jobs import element_columns
from fleetctl.mesh.loops import add_loop_stats, place_loop_figures
from fleetctl.model.fabric import PathTable, Topology, WindowStats

DELAY_EVERY_ENTRIES = 1_000_000  # incidence entries per window between element delay figures
FLAP_BIN_S = 0.1  # time resolution of down/up transitions within a window
EXPLAINED_SHARE = 0.8  # of a finding's bad paths crossing an open event's element: explained
# a place whose probes were this share or more judged (the rest set aside: an agent overloaded,
# not running, an answer log late) can be called good by a window without a finding there; a
# fault shows on every path through its element, so most of them are enough to see it still
MIN_JUDGED_SHARE = 0.5
MAX_IF_NAMED = 64  # findings of a shard's window judged against its shared switches
# of a shard's finding's evidence (lost probes; delayed paths) that must cross one shared switch
# for the switch to explain it when the merge names it: more than half. Its paths away from the
# switch are tested as well (nothing significant there), which is what tells a cable of its own
IF_NAMED_SHARE = 0.5


@dataclass
class WindowResult:
    t_start: float  # s, epoch
    t_end: float
    findings: list[dict] = field(default_factory=list)  # network findings (element, metric, ...)
    # per link direction / switch / NIC: rows, as an ElementRows (a sequence of dicts)
    elements: Sequence[dict] = field(default_factory=list)
    overloaded: list[str] = field(default_factory=list)  # hosts set aside for overload
    blind: list[str] = field(default_factory=list)  # hosts whose agent was not running
    # responders whose answer log was not all in when the window closed (their batch late): the
    # loss direction of probes to them is unknown, their loss is left out (delays are kept)
    log_pending: list[str] = field(default_factory=list)
    loss_unknown: int = 0  # probes whose loss was left out so
    # with hosts set aside or answer logs late: per element, the share of its probes whose loss
    # the window judged (the rest set aside or unknown); None when nothing was left out
    coverage: np.ndarray | None = None
    host_side: list[dict] = field(default_factory=list)  # probe.host_delay notes (not events)
    probes: int = 0
    set_aside: int = 0
    path_delay: np.ndarray | None = None  # per path, us (for the baselines)
    path_healthy: np.ndarray | None = None
    signals: object = None  # the window's PathSignals (merged rows), for a shard's document



def _bad_paths(f: dict, sig, paths: np.ndarray) -> np.ndarray:
    """A finding's bad paths for the explained rules: delayed ones for delay; lossy ones for loss,
    or, for a pooled finding (too few probes a path to call any path lossy), those that lost a
    probe."""
    if f["metric"] == "delay":
        return sig.delayed
    if (paths & sig.lossy).any():
        return sig.lossy
    return np.asarray(sig.lost) > 0


def held_counts(findings: list[dict]) -> dict[str, int]:
    """Findings of a window that the explained rules hold (they open nothing), by what explains
    them: an open event, or a stronger finding of the same window."""
    ev = [f.get("evidence") or {} for f in findings]
    return {"open_event": sum(1 for e in ev if e.get("explained_by_open_event")),
            "window_finding": sum(1 for e in ev if e.get("explained_by_window_finding"))}


class WindowJudge:
    """What lens makes of a window's path signals (the probe engine's step's findings, one
    verdict per element, and the explained rules below), for a step built once per plan. The
    coordinator's WindowAnalyzer is one, over its own step; benchmarks/localization_shards.py
    judges its simulated shards' windows with one, as their coordinators would."""

    def __init__(self, topo: Topology, step: WindowStep):
        self.topo, self.step, self.th = topo, step, step.th
        self._switch_places: dict[str, np.ndarray] = {}  # mark_explained_if_named

    def judge(self, sig, open_elements: list[dict] | None = None) -> tuple[list[dict], list[dict]]:
        """(findings, host-side notes) of a window's signals; findings that an open event's
        element (`open_elements`) or a stronger finding of the window explains are marked
        (_mark_explained)."""
        found = self._findings(sig)
        findings = [f for f in found if not is_host_side(f)]
        host_side = [host_delay_note(f) for f in found if is_host_side(f)]
        self._mark_explained(findings, sig, open_elements or [])
        return findings, host_side

    def mark_explained_if_named(self, findings: list[dict], sig, switches: list[str]) -> None:
        """For a shard: a finding on an element of the shard's own whose evidence mostly
        crosses one of the `switches` it shares with other shards (a spine: more than half of
        its lost probes, or of its delayed paths), and whose paths away from that switch show
        nothing (the explained rules' test), gets
        `evidence.explained_if_named` = that switch's id. The merge holds it (as explained by
        the window's finding) in a window where it names that switch (analysis/shards.py): a
        shard sees a lossy spine through its own links only, and a few of a NIC's paths that
        cross the spine can read as that NIC's cable (12,800 x 8 in 10 shards,
        benchmarks/localization_shards.py: 3 of a NIC's 10 paths, 4 of 88 probes lost). The
        share is by lost probe, not by path, and a majority, not the 80 % of the rules for open
        events: one background drop on a path away from the spine made 2 of 3 bad paths, and
        6 such cables stood in 200 trials; the test away from the switch is what tells a cable
        fault of its own (its paths away from the spine lose too)."""
        shared = set(switches)
        # ~2 ms a finding at 1,280 x 8; a window with more findings than this has a fault of
        # its own shard's (a leaf down), not a spine's share on a few paths
        for f in findings[:MAX_IF_NAMED]:
            ev, el = f["evidence"], f["element"]
            if ev.get("explained_by_window_finding") or ev.get("explained_by_open_event") or \
                    (el.get("type") == "switch" and el.get("id") in shared):
                continue
            ends = set(self.topo.links.get(el.get("id"), ())) if el.get("type") == "link" else set()
            if ends & shared:  # a link of a shared switch: the merge folds or names those
                continue
            paths = self._through(el) & sig.valid
            mine = np.flatnonzero(paths & _bad_paths(f, sig, paths))
            if not mine.size:
                continue
            # its evidence by bad path: the probes lost there (a loss finding), else one each
            weight = sig.lost[mine].astype(float) if f["metric"] != "delay" else np.ones(mine.size)
            if weight.sum() <= 0:
                weight = np.ones(mine.size)
            for sw in switches:  # its bad paths against each switch: a gather of a few rows
                place = self._switch_place(sw)
                if weight[place[mine]].sum() <= IF_NAMED_SHARE * weight.sum():
                    continue
                outside = self._outside_open_event(f, sig, paths & ~place, place | paths)
                if outside["p_value"] >= outside["alpha"]:
                    ev["explained_if_named"] = sw
                    ev["outside_named_switch"] = outside
                break

    def _switch_place(self, switch: str) -> np.ndarray:
        """Per merged path: does it cross the switch (cached per switch)?"""
        if switch not in self._switch_places:
            self._switch_places[switch] = self._through_place({"type": "switch", "id": switch})
        return self._switch_places[switch]

    def location(self, element: dict) -> str:
        return self.topo.location(element)

    def _through(self, element: dict) -> np.ndarray:
        """Per merged path: does it cross the element (an event's or finding's element dict)?"""
        return self.step.rollup.paths_through(element_columns(self.topo, element))

    def _mark_explained(self, findings: list[dict], sig, open_elements: list[dict]) -> None:
        """A finding whose bad paths nearly all cross an open event's place is judged again on
        its own paths that do not: loss (or delay) there that is significant against the clean
        background makes it a fault of its own, at once; none (or too few probes to say) makes it
        that event seen again, marked `explained_by_open_event` with `outside_open_event` (the
        probes away from the event and their p-value), and it opens nothing while the event is
        open. A twin of a faulty cable (with two leaves, every path but the loop probes') was
        named two windows in a row under a 2 % loss in CI: persistence is no evidence when the
        fault that explains it persists too.

        The same holds between the window's own findings, strongest first (most lost probes,
        or most delayed paths, on its paths): one explained so by a stronger finding of this
        window is marked `explained_by_window_finding` and opens nothing this window (the
        stronger one opens, and the rule above takes over). The first window of a loss is
        partial and thin: CI's lab once opened the cable and a second place on it in the same
        window, the solver's pick and the pooled test's, which runs apart from it."""
        if not findings:
            return
        places = [self._through_place(el) for el in open_elements]
        cover = np.zeros(self.step.n_rows, dtype=bool)
        for t in places:
            cover |= t
        here = {self.location(el) for el in open_elements}
        for f in findings:
            if self.location(f["element"]) in here or not cover.any():
                continue
            paths = self._through(f["element"]) & sig.valid
            judged = self._explained(f, sig, paths, cover)
            if judged is None:
                continue
            outside, bad = judged
            f["evidence"]["outside_open_event"] = outside
            if outside["p_value"] < outside["alpha"]:
                continue  # its own paths away from the event show the fault: a second one
            # which event's place: the one its bad paths cross most. That place is not judged
            # good this window (events.py): its fault was seen, under another name
            by = max(zip(open_elements, places), key=lambda ep: int((bad & ep[1]).sum()))[0]
            f["evidence"]["explained_by_open_event"] = self.location(by)
            # a finer element inside an open event's (a link of a switch named a window ago):
            # the same fault seen more sharply, which refines that event (events.py)
            inside = [el for el, t in zip(open_elements, places) if not (paths & ~t).any()]
            if inside:
                f["refines"] = self.location(inside[0])
        self._mark_explained_within(findings, sig, here)

    def _mark_explained_within(self, findings: list[dict], sig, open_places: set[str]) -> None:
        """The window's findings, strongest first, each judged against the places of the
        stronger ones of its metric kind that stand (_mark_explained)."""
        fresh = [f for f in findings if self.location(f["element"]) not in open_places
                 and not f["evidence"].get("explained_by_open_event")]
        if len(fresh) < 2:
            return
        rows = {id(f): self._through(f["element"]) & sig.valid for f in fresh}
        place: dict[int, np.ndarray] = {}  # a standing finding's place rows, computed once

        def place_of(g: dict) -> np.ndarray:
            if id(g) not in place:
                place[id(g)] = self._through_place(g["element"])
            return place[id(g)]

        def strength(f: dict) -> float:
            t = rows[id(f)]
            return float((t & sig.delayed).sum()) if f["metric"] == "delay" else \
                float(sig.lost[t].sum())

        standing: dict[bool, list[dict]] = {True: [], False: []}  # delay kind or not
        for f in sorted(fresh, key=strength, reverse=True):
            kind = f["metric"] == "delay"
            stronger = standing[kind]
            cover = np.zeros(self.step.n_rows, dtype=bool)
            for g in stronger:
                cover |= place_of(g)
            judged = self._explained(f, sig, rows[id(f)], cover) if stronger else None
            if judged is None or judged[0]["p_value"] < judged[0]["alpha"]:
                stronger.append(f)
                continue
            outside, bad = judged
            by = max(stronger, key=lambda g: int((bad & place_of(g)).sum()))
            f["evidence"]["outside_window_finding"] = outside
            f["evidence"]["explained_by_window_finding"] = self.location(by["element"])

    def _explained(self, f: dict, sig, paths: np.ndarray, cover: np.ndarray
                   ) -> tuple[dict, np.ndarray] | None:
        """None where fewer than EXPLAINED_SHARE of the finding's bad paths cross `cover`; else
        the test of its paths away from it (_outside_open_event) and its bad paths."""
        mine = paths & _bad_paths(f, sig, paths)
        if not (mine.any() and cover[mine].mean() >= EXPLAINED_SHARE):
            return None
        return self._outside_open_event(f, sig, paths & ~cover, cover | paths), mine

    def _through_place(self, element: dict) -> np.ndarray:
        """Per merged path: does it cross the element's place (a link's both directions: an
        event is one per cable, and the first window may have named one direction only)?"""
        if element.get("type") == "link":
            element = {"type": "link", "id": element.get("id")}
        return self._through(element)

    def _outside_open_event(self, f: dict, sig, rest: np.ndarray, taken: np.ndarray) -> dict:
        """The binomial test of a finding on its paths that avoid every open event (`rest`)
        against the paths that touch neither it nor an event: probes lost for loss (at the
        finding test's alpha), delayed paths for delay."""
        if f["metric"] == "delay":
            others = sig.valid & ~taken
            n, k = int(rest.sum()), int((rest & sig.delayed).sum())
            bg = max(float(sig.delayed[others].mean()) if others.any() else 0.0, 1e-3)
            alpha, counted = self.th.element_alpha, {"paths_delayed": k}
        else:
            clean = sig.valid & ~taken & ~(sig.lossy | sig.delayed)
            n, k = int(sig.sent[rest].sum()), int(sig.lost[rest].sum())
            bg = max((float(sig.lost[clean].sum()) + 0.5) / (float(sig.sent[clean].sum()) + 1.0),
                     self.th.background_loss)
            alpha, counted = self.th.loss_alpha, {"probes": n, "lost": k}
        p = float(binom.sf(k - 1, n, min(bg, 0.5))) if n and k else 1.0
        return {"paths": int(rest.sum()), **counted, "p_value": float(f"{p:.3g}"), "alpha": alpha}

    def _findings(self, sig) -> list[dict]:
        """The window step's findings (every rule), one verdict per element: a loss (or down)
        finding hides a delay finding of the same place; the window number is not lens's."""
        out: dict[tuple, dict] = {}
        for f in self.step.findings(sig, 0):
            d = f.to_dict()
            d["evidence"].pop("window", None)
            key = (d["element"]["type"], d["element"]["id"], d["element"].get("direction", ""))
            if key not in out:
                out[key] = d
        return list(out.values())


class WindowAnalyzer(WindowJudge):
    """Built once per plan (topology, traced paths, flow table); `analyze` per window."""

    def __init__(self, topo: Topology, paths: PathTable, flows: np.ndarray, solver: str = "nnls",
                 th: Thresholds | None = None, echo_timeout_s: float = 1.0):
        # the probe engine's window step, as audit's
        super().__init__(topo, WindowStep(topo, paths, solver, th))
        self.paths, self.flows = paths, flows
        self.integrity = IntegrityThresholds(echo_timeout_s=echo_timeout_s)  # the agents'
        self.hosts, self.nic_host = topo.hosts, topo.nic_host_index
        # the original paths' incidence (CSC); the step's own where merging left every path
        # alone (one copy, 53 MB at 1,280 x 8 with 8 ports a pair, not two)
        self.inc_orig = self.step.inc if self.step.merged is paths else \
            paths.matrix(topo.n_elements).tocsc()
        self._inc_t = None  # its transpose, for `_coverage` (built the first time it is needed)
        self._elements_at = None  # location key -> element indices, for `unjudged` (likewise)
        self.element_index = ElementIndex(self.step.inc)  # per-element figures, once per plan
        self.flow_index = FlowIndex(flows["flow"])  # summaries' flows -> rows, once per plan
        self.path_slots = path_slots(flows, len(paths))  # flow directions -> paths, as above
        self.report_cols = np.array([e for e, el in enumerate(topo.elements)
                                     if el.type in ("link", "switch", "nic")], dtype=np.int64)
        # per-element delay percentiles (reported in status, metrics and segments, never judged:
        # findings come from the paths) cost ~0.1 s a window at 1,280 hosts x 8 NICs and 8 ports
        # a pair (4.5 M incidence entries; 0.45 s before they ranked only the paths with a
        # delay); a plan that large computes them every DELAY_EVERY_ENTRIES-th window and
        # reports the last ones between (each row says which window they are from)
        self.delay_every = max(1, int(self.element_index.csr.nnz // DELAY_EVERY_ENTRIES))
        self._delay_seen = 0
        element_columns(topo, {})  # builds the topology's element index now, not in a window
        self._last_delay: tuple[np.ndarray, float] | None = None
        # element -> its rank by id (ElementRows.worst: status's lossiest, ties by id)
        self._id_rank = np.unique(np.array([el.id for el in topo.elements]),
                                  return_inverse=True)[1].ravel()
        # location -> "up"/"down"/None at the end of the last window that judged it: a flap whose
        # down moment falls in the first bin of a window is still seen (a link toggled on a
        # fixed rhythm keeps its phase against the windows, so this would repeat every time)
        self.end_state: dict[str, str | None] = {}

    def analyze(self, data, t_start: float, t_end: float, health: dict,
                blind: set[str], clock_fit: tuple = (None, 0),
                baseline: np.ndarray | None = None,
                open_elements: list[dict] | None = None) -> WindowResult:
        """`data`: the window's probe records, or its per-flow summaries (WindowSummary).
        `open_elements`: the elements of the events open now. A finding elsewhere whose bad
        paths nearly all cross one of them is marked `explained_by_open_event` (events.py then
        waits for it to persist): with two leaves, a cable's direction and its twin on the other
        leaf share every path but the loop probes', and a window with few loop losses can name
        the twin once."""
        out = WindowResult(t_start, t_end, blind=sorted(blind))
        marks = overload_marks(health, self.hosts, self.integrity)
        out.overloaded = sorted(h for h, m in marks.items() if m.overloaded)
        if data.size == 0:
            return out
        clock, clock_epoch_ns = clock_fit  # the clock model and its epoch (ClockTracker.fit)
        epoch = clock_epoch_ns if clock is not None else 0
        if isinstance(data, WindowSummary):
            kept, w = self._summary_windows(data, t_start, t_end, marks, blind, clock, epoch, out)
        else:
            kept, w = self._probe_windows(data, t_end - t_start, marks, blind, clock, epoch, out)
        if w is None:
            return out
        sent, lost, delay = w.path_sent[0], w.path_lost[0], w.path_p50_us[0]
        out.path_delay = delay
        base = baseline if baseline is not None else np.full(len(self.paths), np.nan)
        m = self.step.merge(WindowStats(sent[None], lost[None], delay[None], base))
        sig = self.step.signals(m.sent[0], m.lost[0], m.delay[0], m.baseline)
        m_delay = m.delay[0]
        out.signals = sig
        out.findings, out.host_side = self.judge(sig, open_elements)
        bad_rows = sig.lossy | sig.delayed
        out.path_healthy = (sent >= self.th.min_probes) & ~bad_rows[self.step.group]
        out.elements = self._element_rows(sig, m_delay, t_end)
        self._mark_down(out, kept, silent=bool(blind or out.overloaded))
        return out

    def _probe_windows(self, probes: np.ndarray, length_s: float, marks: dict, blind: set[str],
                       clock, epoch: int, out: WindowResult):
        """Per-probe records (`audit --mesh`'s, or lens agents in record mode): the probes kept
        (NIC pairs) and the window's per-path figures, or (.., None) when nothing is left."""
        keep = probes_kept(probes, self.nic_host, self.hosts, marks)
        out.log_pending = sorted(h for h, m in marks.items() if m.probes_log_pending)
        out.loss_unknown = sum(m.probes_log_pending for m in marks.values())
        if blind:
            bad_h = self._host_mask(blind)
            dst = probes["dst_nic"]
            dst_h = np.where(dst >= 0, self.nic_host[np.maximum(dst, 0)], -1)
            keep &= ~(bad_h[self.nic_host[probes["src_nic"]]] | bad_h[dst_h])
        out.probes, out.set_aside = int(probes.size), int((~keep).sum())
        if out.set_aside:
            fi, known = self.flow_index.rows_known(probes["flow"])
            pairs = known & (probes["dst_nic"] >= 0)
            ones = np.ones(probes.size, dtype=np.int64)
            out.coverage = self._coverage(self._path_sent(fi[pairs], ones[pairs]),
                                          self._path_sent(fi[pairs & keep], ones[pairs & keep]))
        probes = probes[keep]
        pair = probes["dst_nic"] >= 0
        if not pair.any():
            return probes[pair], None
        w = build_windows(probes[pair], self.flows, len(self.paths), len(self.topo.nics),
                          self.nic_host, length_s + 3600.0, epoch, clock)
        add_loop_stats(w, probes[~pair], self.flows, self.topo, self.paths)
        return probes[pair], w

    def _summary_windows(self, s: WindowSummary, t_start: float, t_end: float, marks: dict,
                         blind: set[str], clock, epoch: int, out: WindowResult):
        """Per-flow summaries (lens agents' default): the same figures from O(flows) rows;
        a host overloaded or not running in the window is set aside for all of it. The summary
        keeps its rows' flow-table rows (the caller's clock step uses them too)."""
        fi = index_flows(s, self.flow_index).flow_index
        aside = set(blind) | hosts_set_aside(marks, int(t_start * 1e9), int(t_end * 1e9))
        src, dst = self.flows["src_nic"][fi], self.flows["dst_nic"][fi]
        dst_h = np.where(dst >= 0, self.nic_host[np.maximum(dst, 0)], -1)  # -1: a loop's end
        keep = np.ones(s.rows.size, dtype=bool)
        if aside:
            bad_h = self._host_mask(aside)
            keep = ~(bad_h[self.nic_host[src]] | bad_h[dst_h])
        out.probes = s.size
        out.set_aside = int(s.rows["sent"][~keep].sum())
        pair = keep & (dst >= 0)
        pending = responders_log_pending(marks, int(t_end * 1e9)) - aside
        judged = pair
        if pending:
            judged = pair & ~self._host_mask(pending)[dst_h]
        if aside or pending:
            sent = s.rows["sent"].astype(np.int64)
            every = dst >= 0
            out.coverage = self._coverage(self._path_sent(fi[every], sent[every]),
                                          self._path_sent(fi[judged], sent[judged]))
        if not pair.any():
            return s.select(pair), None
        paired = s.select(pair)
        loss_known = None
        if pending:
            out.log_pending = sorted(pending)
            late = ~judged[pair]
            out.loss_unknown = int(s.rows["sent"][pair][late].sum())
            loss_known = ~late
        n_p = len(self.paths)
        fig = path_figures(paired, self.flows, n_p, self.nic_host, clock, epoch,
                           loss_known, self.path_slots)
        w = Windows(t_end - t_start, np.array([int(t_start * 1e9)]), fig.sent[None],
                    fig.lost[None], fig.p50_us[None], fig.p99_us[None], clock is not None)
        loops = keep & (dst < 0)
        if loops.any():
            cols, sent, lost, q = loop_figures(s.select(loops), self.flows, n_p)
            place_loop_figures(w, cols, sent[None], lost[None], q[:, None, :], self.topo,
                               self.paths)
        return paired, w

    def _path_sent(self, flow_rows: np.ndarray, sent: np.ndarray) -> np.ndarray:
        """Probes per path (both ways) of NIC-pair rows: their flows' forward and return paths."""
        n = len(self.paths)
        out = np.zeros(n, dtype=np.float64)
        for col in ("fwd_path", "rev_path"):
            path = self.flows[col][flow_rows].astype(np.int64)
            ok = path >= 0
            out += np.bincount(path[ok], weights=sent[ok], minlength=n)
        return out

    def _coverage(self, every: np.ndarray, judged: np.ndarray) -> np.ndarray:
        """Per element, the share of the probes crossing it (`every`, per path) whose loss the
        window judged (`judged`, per path); 0 where none crossed it. Two sparse products over
        the incidence, only in windows that left something out."""
        if self._inc_t is None:
            self._inc_t = self.inc_orig.T.tocsr()
        total, kept = self._inc_t @ every, self._inc_t @ judged
        return np.where(total > 0, kept / np.maximum(total, 1.0), 0.0)

    def _host_mask(self, hosts: set[str]) -> np.ndarray:
        """Per host index, whether it is in `hosts`; one more slot, False, for index -1 (no
        responder: a loop's end)."""
        return np.array([h in hosts for h in self.hosts] + [False])

    def _mark_down(self, out: WindowResult, probes: np.ndarray, silent: bool) -> None:
        """Loss findings whose probes went from getting through to all lost inside the window: the
        moments (`down_starts`), and down now when it stayed down. The state at each place's end
        is kept for the next window (a silent window keeps the old states)."""
        ends: dict[str, str | None] = {}
        for f in out.findings:
            if f["metric"] in ("loss", "down"):
                key = self.location(f["element"])
                # no finding there last window: it was up (silent windows keep the old states)
                starts, ends[key] = self._down_starts(f["element"], probes, self.end_state.get(key, "up"))
                if starts:
                    f["down_starts"] = starts
                    if ends[key] == "down" and f["metric"] == "loss":
                        # it went down inside this window and stayed down: down now, not a
                        # partial loss (the next window would say so a second later)
                        f["metric"] = "down"
                        f["severity"] = "critical"
                        f["evidence"]["down_since"] = starts[-1]
        self.end_state = {**self.end_state, **ends} if silent else ends

    def unjudged(self, res: WindowResult, keys) -> set[str]:
        """Of the places `keys` (events.py's location keys), those this window cannot call good:
        all of them when it had no probes; with hosts set aside or answer logs late, those
        whose elements had under MIN_JUDGED_SHARE of their probes judged (a NIC of an overloaded
        host, say). One busy agent no longer holds every event open: at a thousand hosts some
        agent is always set aside."""
        keys = set(keys)
        if res.probes == 0:
            return keys
        if not (res.blind or res.overloaded or res.log_pending):
            return set()
        if res.coverage is None:
            return keys
        if self._elements_at is None:
            self._elements_at = self._place_elements()
        where = self._elements_at
        return {k for k in keys
                if k not in where or float(res.coverage[where[k]].min()) < MIN_JUDGED_SHARE}

    def _place_elements(self) -> dict[str, np.ndarray]:
        """Location key -> the elements probes cross there: a NIC with its cable, a link's two
        directions, a switch; a host, which no path crosses as such, by its NICs."""
        topo = self.topo
        crossed = np.diff(self.inc_orig.indptr) > 0
        at: dict[str, list[int]] = {}
        for i, el in enumerate(topo.elements):
            if crossed[i]:
                at.setdefault(self.location({"type": el.type, "id": el.id}), []).append(i)
        for nic, host in zip(topo.nics, topo.nic_host):
            i = topo.index("nic", nic)
            if crossed[i]:
                at.setdefault(f"host:{host}", []).append(i)
        return {k: np.array(v, dtype=np.int64) for k, v in at.items()}

    def _down_starts(self, element: dict, probes: np.ndarray, state: str | None = None
                     ) -> tuple[list[float], str | None]:
        """Moments (s) within the window when probes over the element went from getting through
        to (nearly) all lost, at FLAP_BIN_S resolution: a link flapping faster than the window
        is bad in every window, and only these show its rhythm. `state` is the element's at the
        window's start ("up", "down", None: unknown). Also: its state at the window's end."""
        cols = element_columns(self.topo, element)
        if not cols or probes.size == 0:
            return [], None
        through = np.asarray(self.inc_orig[:, cols].sum(axis=1)).ravel() > 0
        bins = self._summary_bins(probes, through) if isinstance(probes, WindowSummary) else \
            self._probe_bins(probes, through)
        if bins is None:
            return [], None
        t0, bin_s, n, k = bins
        starts = []
        for i in range(len(n)):
            if n[i] < 5:
                continue
            rate = k[i] / n[i]
            now = "down" if rate >= 0.8 else "up" if rate <= 0.2 else None
            if now == "down" and state == "up":
                starts.append(round(t0 + i * bin_s, 3))
            if now is not None:
                state = now
        return starts[-50:], state

    def _probe_bins(self, probes: np.ndarray, through: np.ndarray):
        """(first send s, bin length, probes per bin, failed per bin) over the element's probes
        (forward paths through it, and back paths of what reached the far end), or None."""
        fi = probes["flow"].astype(np.int64)
        fwd, rev = self.flows["fwd_path"][fi], self.flows["rev_path"][fi]
        on_fwd = (fwd >= 0) & through[np.maximum(fwd, 0)]
        on_rev = (rev >= 0) & through[np.maximum(rev, 0)] & (probes["lost"] != 1)
        lost = probes["lost"]
        use = on_fwd | on_rev
        if use.sum() < 20:
            return None
        fail = (on_fwd & np.isin(lost, (1, 3))) | (on_rev & np.isin(lost, (2, 3)))
        t = probes["t_send"][use].astype(np.float64) * 1e-9
        fail = fail[use]
        t0 = float(t.min())
        b = ((t - t0) // FLAP_BIN_S).astype(np.int64)
        return t0, FLAP_BIN_S, np.bincount(b), np.bincount(b, weights=fail)

    def _summary_bins(self, s: WindowSummary, through: np.ndarray):
        """The same from summaries: the rows of flows with either path through the element, their
        unanswered probes per bin (direction unknown: a row with no loss has no bins, its
        probes count as getting through, spread evenly)."""
        fi = flow_rows(s, self.flows)
        fwd, rev = self.flows["fwd_path"][fi], self.flows["rev_path"][fi]
        on = ((fwd >= 0) & through[np.maximum(fwd, 0)]) | ((rev >= 0) & through[np.maximum(rev, 0)])
        if s.rows["sent"][on].sum() < 20:
            return None
        has_bins = np.zeros(s.rows.size, dtype=bool)
        has_bins[s.bin_rows] = True
        b_on = on[s.bin_rows]
        n = s.bin_sent[b_on].sum(axis=0).astype(np.float64)
        k = s.bin_lost[b_on].sum(axis=0).astype(np.float64)
        n += s.rows["sent"][on & ~has_bins].sum() / s.n_bins
        t0 = float(s.rows["window"][on].min()) * s.window_ns * 1e-9
        return t0, s.window_ns * 1e-9 / s.n_bins, n, k

    def _element_rows(self, sig, m_delay, t_end: float) -> ElementRows:
        """Per link direction, switch and NIC: probes through it and lost, loss %, path delay
        p50/p99; as arrays, made into rows only when read (lens/elementrows.py)."""
        index = self.element_index
        if self._last_delay is None or self._delay_seen % self.delay_every == 0:
            st = index.stats(sig.sent, sig.lost, m_delay)
            self._last_delay = (st["delay"], t_end)
        else:  # the loss figures every window; the delays of the last window that had them
            st = {**index.loads(sig.sent, sig.lost), "delay": self._last_delay[0]}
        self._delay_seen += 1
        delay_from = self._last_delay[1]
        cols = self.report_cols[st["sent"][self.report_cols] > 0]
        sent = st["sent"][cols]
        p50, p99 = (np.round(st["delay"][i, cols], 1) for i in (0, 1))
        return ElementRows(self.topo.elements, cols, np.round(100 * st["lost"][cols] / sent, 3),
                           np.where(np.isfinite(p50), p50, np.nan),
                           np.where(np.isfinite(p99), p99, np.nan),
                           np.rint(sent).astype(np.int64),
                           np.rint(st["lost"][cols]).astype(np.int64),
                           delay_from if delay_from != t_end else None, self._id_rank)
