"""Shards (analysis/shards.py, lens/shard.py): the layout of pods, each shard's window through
the real window step, and the merge that names a fault on the switches shards share."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleetctl.analysis.shards import merge_windows, partition
from fleetctl.analysis.step import WindowStep
from fleetctl.errors import DataError, UsageError
from fleetctl.lens.shard import SHARD_FILE, ShardMerge, ShardPublisher, parse_document
from fleetctl.model.fabric import WindowStats
from tests.support.fabrics import fat_tree, find, leaf_spine, path_table

SPORTS = 2


def _layout_hosts(layout):
    return [h for s in layout.shards for h in s.hosts]


def test_a_fat_tree_is_cut_into_whole_pods_two_at_least():
    topo = fat_tree(8)  # 8 pods of 16 hosts
    layout = partition(topo, 40)
    assert [len(s.hosts) for s in layout.shards] == [32, 32, 32, 32]
    assert all(s.pods == 2 and s.groups == 2 for s in layout.shards)
    assert sorted(_layout_hosts(layout)) == sorted(topo.hosts)  # every host in one shard
    assert layout.shared == [c for c in topo.switch_tier if c.startswith("c")]  # the cores only
    assert layout.unmeasured == []
    # a shard of one pod would never climb to the cores: two pods at least, even above the size
    assert [len(s.hosts) for s in partition(topo, 16).shards] == [32] * 4


def test_a_leaf_spine_shares_its_spines_and_a_rail_unit_is_one_pod():
    topo = leaf_spine(8, 4, 4)
    layout = partition(topo, 8)
    assert len(layout.shards) == 4 and layout.shared == ["spine1", "spine2", "spine3", "spine4"]
    assert layout.shared_for(layout.shards[1].hosts) == layout.shared
    one = partition(topo, 1000)  # everything fits one shard: nothing shared
    assert len(one.shards) == 1 and one.shared == []


def test_shard_sizes_out_of_range_are_refused():
    with pytest.raises(UsageError, match="shard size"):
        partition(leaf_spine(2, 2, 2), 1)


def test_every_link_is_crossed_by_one_shard_only():
    """Why whole pods: below the top tier, every link direction any shard's paths cross is
    crossed by that shard's paths alone; only the top tier's switches are shared."""
    topo = fat_tree(4)
    layout = partition(topo, 8)
    seen: dict[int, set[str]] = {}
    for s in layout.shards:
        paths = _shard_paths(topo, s.hosts)
        for e in np.unique(paths.elements):
            el = topo.elements[e]
            if el.type == "link":
                seen.setdefault(int(e), set()).add(s.name)
    links = [e for e, el in enumerate(topo.elements) if el.type == "link"]
    assert sorted(seen) == links  # every link direction measured
    assert all(len(v) == 1 for v in seen.values())


# ---------------------------------------------------------------------- windows through the step
def _shard_paths(topo, hosts):
    nics = [n for n, h in zip(topo.nics, topo.nic_host) if h in set(hosts)]
    flows = [(a, b, f) for a in nics for b in nics
             if a.split(":")[0] != b.split(":")[0] for f in range(SPORTS)]
    return path_table(topo, flows, seeded=True)


class _Shard:
    def __init__(self, topo, layout, shard):
        self.topo, self.shard = topo, shard
        self.paths = _shard_paths(topo, shard.hosts)
        self.step = WindowStep(topo, self.paths)
        self.pub = ShardPublisher(layout, topo, list(shard.hosts), "/nonexistent")

    def window(self, rng, probes: int, loss_of: np.ndarray, t_end: float = 1000.0,
               delay_of: np.ndarray | None = None):
        """One window: per-element loss rates `loss_of`; `delay_of`: per-element extra delay (us),
        on top of 100 us and a few us of noise per path (the baseline: 100 us)."""
        inc = self.paths.matrix(self.topo.n_elements)
        survive = np.exp(inc @ np.log1p(-loss_of))
        sent = np.full(len(self.paths), probes)
        lost = rng.binomial(sent, 1 - survive)
        base = np.full(len(self.paths), 100.0)
        delay = base.copy() if delay_of is None else \
            base + np.abs(rng.normal(0, 3, len(self.paths))) + inc @ delay_of
        m = self.step.merge(WindowStats(sent[None], lost[None], delay[None], base))
        sig = self.step.signals(m.sent[0], m.lost[0], m.delay[0], m.baseline)
        findings = [f.to_dict() for f in self.step.findings(sig, 0)]
        doc = self.pub.document(t_end, 1.0, self.pub.counts(self.step, sig, findings), findings)
        return json.loads(json.dumps(doc))  # as the merge reads it


@pytest.fixture(scope="module")
def four_shards():
    topo = leaf_spine(8, 4, 4)
    layout = partition(topo, 8)
    return topo, layout, [_Shard(topo, layout, s) for s in layout.shards]


def _loss(topo, labels: list[str], rate: float, background: float = 1e-4) -> np.ndarray:
    loss = np.full(topo.n_elements, background)
    for lab in labels:
        loss[find(topo, lab)] = rate
    return loss


def _spine_links(topo, spine):
    return [el.label for el in topo.elements if el.type == "link" and spine in el.id]


def _merge(topo, layout, docs):
    windows = [parse_document(d, topo, layout, f"doc {i}") for i, d in enumerate(docs)]
    links = {sw: [lid for lid, ends in topo.links.items() if sw in ends] for sw in layout.shared}
    return merge_windows(windows, [s.name for s in layout.shards], layout.shared,
                         links_of=lambda sw: links[sw])


def test_a_gray_spine_too_thin_for_any_shard_is_named_by_the_merge(four_shards):
    topo, layout, shards = four_shards
    loss = _loss(topo, _spine_links(topo, "spine2"), 0.005)
    named_by_merge = shard_saw = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        docs = [s.window(rng, 8, loss) for s in shards]
        shard_saw += any(d["findings"] for d in docs)
        res = _merge(topo, layout, docs)
        assert all(f["element"]["id"] == "spine2" for f in res.findings)
        named_by_merge += len(res.findings) == 1
    assert named_by_merge >= 17
    assert shard_saw <= 5  # the merge's pooled evidence is what finds it


def test_a_spine_every_shard_sees_is_one_finding_listing_them(four_shards):
    topo, layout, shards = four_shards
    rng = np.random.default_rng(1)
    docs = [s.window(rng, 40, _loss(topo, _spine_links(topo, "spine3"), 0.02)) for s in shards]
    assert all(d["findings"] for d in docs)  # each shard names something of spine3's
    res = _merge(topo, layout, docs)
    assert [(f["element"]["type"], f["element"]["id"], f["metric"]) for f in res.findings] == \
        [("switch", "spine3", "loss")]
    assert res.findings[0]["evidence"]["shards"] == [s.name for s in layout.shards]


def test_a_lossy_uplink_stays_a_link_and_the_spine_stays_clean(four_shards):
    topo, layout, shards = four_shards
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        docs = [s.window(rng, 40, _loss(topo, ["leaf3->spine2"], 0.03)) for s in shards]
        res = _merge(topo, layout, docs)
        assert [f["element"].get("direction") for f in res.findings] == ["leaf3->spine2"]
        assert res.findings[0]["evidence"]["shards"] == ["shard-1"]


def test_clean_windows_merge_to_nothing_and_a_missing_shard_is_said(four_shards):
    topo, layout, shards = four_shards
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        docs = [s.window(rng, 40, _loss(topo, [], 0.0)) for s in shards]
        res = _merge(topo, layout, docs)
        assert res.findings == [] and res.shards_missing == []
    res = _merge(topo, layout, docs[:3])
    assert res.findings == [] and res.shards_missing == ["shard-3"]


def _delay(topo, labels: list[str], extra_us: float) -> np.ndarray:
    delay = np.zeros(topo.n_elements)
    for lab in labels:
        delay[find(topo, lab)] = extra_us
    return delay


def test_a_gray_spine_delaying_every_shard_is_one_delay_finding_on_the_switch(four_shards):
    """200 us more through spine2: each shard sees it on its own paths (with two leaves a shard
    names one of its cables to spine2, both directions: the twins share every path); the merge
    names the switch once, for delay, from every shard's link findings folded into it (before
    2026-12-05: four delay findings on four cables, the spine named nowhere)."""
    topo, layout, shards = four_shards
    nothing = _loss(topo, [], 0.0)
    for seed in range(5):
        rng = np.random.default_rng(300 + seed)
        docs = [s.window(rng, 40, nothing, delay_of=_delay(topo, ["spine2"], 200.0)) for s in shards]
        assert all(d["delay_switches"].get("spine2", [0, 0])[1] > 0 or d["findings"] for d in docs)
        res = _merge(topo, layout, docs)
        assert [(f["element"]["type"], f["element"]["id"], f["metric"]) for f in res.findings] == \
            [("switch", "spine2", "delay")], res.findings
        assert res.findings[0]["evidence"]["shards"] == [s.name for s in layout.shards]
        assert len(res.findings[0]["evidence"]["links"]) >= 4
        assert all("spine2" in link for link in res.findings[0]["evidence"]["links"])


def test_the_pooled_delay_test_names_a_switch_no_shard_could(four_shards):
    """The merge's own test on documents whose shards named nothing: 40 of spine3's 100 paths
    delayed in every shard, no other path: spine3, from the pooled share alone; as many delayed
    paths spread over every spine (10 of each one's 100): nothing."""
    topo, layout, shards = four_shards
    docs = [s.window(np.random.default_rng(7), 40, _loss(topo, [], 0.0)) for s in shards]
    for d in docs:
        d["findings"] = []
        d["paths"], d["delayed"] = 400.0, 40.0
        d["delay_switches"] = {sw: [100.0, 40.0, 40 * 80.0] if sw == "spine3" else [100.0, 0.0, 0.0]
                               for sw in ("spine1", "spine2", "spine3", "spine4")}
    res = _merge(topo, layout, docs)
    assert [(f["element"]["id"], f["metric"]) for f in res.findings] == [("spine3", "delay")]
    ev = res.findings[0]["evidence"]["merge"]
    assert ev["paths"] == 400 and ev["delayed"] == 160 and ev["excess_us"] == 80.0
    assert res.findings[0]["severity"] == "minor"  # 80 us (100 us: major)
    for d in docs:
        d["delay_switches"] = {sw: [100.0, 10.0, 10 * 80.0] for sw in ("spine1", "spine2", "spine3", "spine4")}
    assert _merge(topo, layout, docs).findings == []


def test_clean_noisy_delays_merge_to_nothing(four_shards):
    topo, layout, shards = four_shards
    nothing = _loss(topo, [], 0.0)
    for seed in range(10):
        rng = np.random.default_rng(400 + seed)
        docs = [s.window(rng, 40, nothing, delay_of=np.zeros(topo.n_elements)) for s in shards]
        assert _merge(topo, layout, docs).findings == []


def test_a_document_without_delay_figures_still_merges(four_shards):
    """Documents written before the delay fields: read, and add nothing to the delay test."""
    topo, layout, shards = four_shards
    doc = shards[0].window(np.random.default_rng(5), 40, _loss(topo, [], 0.0))
    for key in ("paths", "delayed", "delay_switches"):
        del doc[key]
    w = parse_document(doc, topo, layout, "an old document")
    assert w.paths == 0 and w.delay_switches == {}


# ---------------------------------------------------------------------- documents are input
def _good_doc(four_shards):
    topo, layout, shards = four_shards
    return shards[0].window(np.random.default_rng(5), 40, _loss(topo, ["leaf1->spine1"], 0.05))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=2), "version 1"),
    (lambda d: d.update(shard="shard-99"), "not one of this site's shards"),
    (lambda d: d.update(probes=float("nan")), "not a count"),
    (lambda d: d.update(lost=-1), "not a count"),
    (lambda d: d.update(lost=d["probes"] + 1), "lost more"),
    (lambda d: d["switches"].update(leaf1=[1, 0]), "not a shared switch"),
    (lambda d: d["switches"].update(spine1=[1, 2]), "lost more"),
    (lambda d: d["switches"].update(spine1="x"), "not a shared switch"),
    (lambda d: d["findings"][0]["element"].update(id="leaf9--spine1"), "not in the site"),
    (lambda d: d["findings"][0]["element"].update(direction="spine7->leaf1"), "no direction"),
    (lambda d: d["findings"][0].update(confidence=2), "confidence"),
    (lambda d: d["findings"][0].update(metric="rm -rf"), "metric"),
    (lambda d: d.update(findings=[{}] * 501), "at most 500"),
    (lambda d: d.update(t_end="now"), "not a time"),
    (lambda d: d.update(delay_switches=[]), "delay_switches is not an object"),
    (lambda d: d.update(delayed=d["paths"] + 1), "more paths delayed"),
    (lambda d: d.update(paths=float("inf")), "not a count"),
    (lambda d: d["delay_switches"].update(leaf2=[1, 0, 0]), "not a shared switch"),
    (lambda d: d["delay_switches"].update(spine1=[1, 2, 0]), "more paths delayed"),
    (lambda d: d["delay_switches"].update(spine1=[1, 0]), "paths, delayed, excess_us"),
    (lambda d: d["delay_switches"].update(spine1=[5, 1, -3]), "not a count"),
])
def test_hostile_documents_are_refused_by_name(four_shards, change, message):
    topo, layout, _ = four_shards
    doc = _good_doc(four_shards)
    assert doc["findings"]
    parse_document(doc, topo, layout, "shard-0's document")
    change(doc)
    with pytest.raises(DataError, match=message):
        parse_document(doc, topo, layout, "shard-0's document")


def test_the_merge_reads_directories_and_says_why_a_shard_is_left_out(four_shards, tmp_path):
    topo, layout, shards = four_shards
    dirs = []
    for i, s in enumerate(shards):
        d = tmp_path / s.shard.name
        d.mkdir()
        dirs.append(str(d))
        if i == 0:
            continue  # no document yet
        doc = s.window(np.random.default_rng(i), 40, _loss(topo, [], 0.0), t_end=1000.0 if i != 1 else 990.0)
        (d / SHARD_FILE).write_text("{not json" if i == 2 else json.dumps(doc))
    merge = ShardMerge(topo, layout, dirs, stale_s=5.0)
    result, why = merge.window(1001.0)
    assert result.shards_used == ["shard-3"]
    assert result.shards_missing == ["shard-0", "shard-1", "shard-2"]
    assert why[str(tmp_path / "shard-0" / SHARD_FILE)] == "no document yet"
    assert why[str(tmp_path / "shard-1" / SHARD_FILE)].startswith("stale")
    assert "JSON" in why[str(tmp_path / "shard-2" / SHARD_FILE)] or \
        "json" in why[str(tmp_path / "shard-2" / SHARD_FILE)].lower()
    assert merge.unreadable == 1


def test_element_columns_from_the_index_are_what_a_scan_of_the_elements_gives():
    """element_columns (a finding's incidence columns: shard documents, explained findings,
    jobs) answers from an index built once per topology; the scan it replaced is the reference."""
    from fleetctl.lens.jobs import element_columns

    def scan(topo, el):
        t, i, d = el.get("type"), el.get("id"), el.get("direction", "both")
        out = []
        for e, x in enumerate(topo.elements):
            ends = topo.links.get(x.id, ()) if x.type == "link" else ()
            if (t == "link" and x.type == "link" and x.id == i and
                    (d in ("", "both", None) or x.direction == d)) or \
                    (t in ("nic", "switch") and (x.type == t and x.id == i or i in ends)) or \
                    (t == "host" and x.type in ("nic", "host") and x.id.split(":")[0] == i):
                out.append(e)
        return out

    for topo in (fat_tree(4, 2), leaf_spine(3, 2, 3, 2)):
        asked = [{"type": "clock", "id": "n00001"}, {"type": "nic", "id": "nope"}]
        for x in topo.elements:
            asked += [{"type": "link", "id": x.id, "direction": d} for d in (x.direction, "both")] \
                if x.type == "link" else [{"type": x.type, "id": x.id}]
        for el in asked:
            assert element_columns(topo, el) == scan(topo, el), el


def test_a_link_of_a_switch_with_an_open_merged_event_waits_before_its_own_event(four_shards):
    """A window that names only some of a spine's links (a shard missing, or too thin) while
    the spine's merged event is open: the links are that fault seen partly, and open nothing
    unless they persist (the event machine's k_open_gray)."""
    from fleetctl.lens.events import EventRules, EventTracker
    from fleetctl.lens.shard import mark_explained

    topo, layout, shards = four_shards
    links = {sw: [lid for lid, ends in topo.links.items() if sw in ends] for sw in layout.shared}
    tracker = EventTracker(EventRules(), topo.location)
    rng = np.random.default_rng(1)
    spine = _loss(topo, _spine_links(topo, "spine3"), 0.02)
    records = []
    for w in range(3):  # the spine named: one event
        res = _merge(topo, layout, [s.window(rng, 40, spine) for s in shards])
        mark_explained(res.findings, tracker.open_events(), links.get)
        records += tracker.window(w, w + 1.0, res.findings, now=w + 1.0)
    assert [(r["kind"], r["element"]["id"]) for r in records] == [("open", "spine3")]
    res = _merge(topo, layout, [shards[0].window(rng, 40, spine)])  # one shard in: links only
    assert res.findings and all(f["element"]["type"] == "link" for f in res.findings)
    mark_explained(res.findings, tracker.open_events(), links.get)
    assert all(f["evidence"]["explained_by_open_event"] == "switch:spine3" for f in res.findings)
    assert tracker.window(3, 4.0, res.findings, silent=set(tracker.loc), now=4.0) == []
    # not told a shard is missing, links seen alone still never make the switch good
    tracker.window(4, 5.0, res.findings, now=5.0)
    assert tracker.loc["switch:spine3"]["good"] == 0


def test_a_spine_delay_named_link_by_link_first_opens_one_event_on_the_spine(four_shards):
    """The same for delay: two shards each name a cable of a slowing spine before the others:
    suspects, no event; then the whole spine is slow: one event, on the spine, for delay."""
    from fleetctl.lens.events import EventRules, EventTracker

    topo, layout, shards = four_shards
    tracker = EventTracker(EventRules(), topo.location)
    rng = np.random.default_rng(4)
    nothing = _loss(topo, [], 0.0)
    partial = _delay(topo, ["leaf1->spine3", "spine3->leaf1", "leaf3->spine3", "spine3->leaf3"], 200.0)
    records, seen = _run_windows(tracker, topo, layout, shards, rng, nothing, 3, delay_of=partial)
    links = [f for fs in seen for f in fs]
    assert links and {f["element"]["id"] for f in links} <= {"leaf1--spine3", "leaf2--spine3",
                                                             "leaf3--spine3", "leaf4--spine3"}
    assert all(f["metric"] == "delay" and f["evidence"]["suspect_switch"] == "spine3" for f in links)
    assert records == []
    more, _ = _run_windows(tracker, topo, layout, shards, rng, nothing, 3, t0=3,
                           delay_of=_delay(topo, ["spine3"], 200.0))
    assert [(r["kind"], r["element"]["id"], r["metric"]) for r in more] == [("open", "spine3", "delay")]


def _run_windows(tracker, topo, layout, shards, rng, loss, windows, t0=0, delay_of=None):
    records, seen = [], []
    for w in range(t0, t0 + windows):
        res = _merge(topo, layout, [s.window(rng, 40, loss, delay_of=delay_of) for s in shards])
        seen.append(res.findings)
        records += tracker.window(w, w + 1.0, res.findings, now=w + 1.0)
    return records, seen


def test_a_spine_fault_named_link_by_link_first_opens_one_event_on_the_spine(four_shards):
    """A spine's fault as it starts: two shards each name one of its links before enough are in
    to name the spine. The links are marked `suspect_switch` and open nothing; once the spine
    is named, its one event is all there is (a CI run once saw three short link events first)."""
    from fleetctl.lens.events import EventRules, EventTracker

    topo, layout, shards = four_shards
    tracker = EventTracker(EventRules(), topo.location)
    rng = np.random.default_rng(3)
    partial = _loss(topo, ["leaf1->spine3", "spine3->leaf1", "leaf3->spine3", "spine3->leaf3"], 0.05)
    records, seen = _run_windows(tracker, topo, layout, shards, rng, partial, 3)
    links = [f for fs in seen for f in fs]
    assert {f["element"]["id"] for f in links} == {"leaf1--spine3", "leaf3--spine3"}
    assert all(f["evidence"]["suspect_switch"] == "spine3" for f in links)
    assert records == []
    spine = _loss(topo, _spine_links(topo, "spine3"), 0.05)
    more, _ = _run_windows(tracker, topo, layout, shards, rng, spine, 2, t0=3)
    assert [(r["kind"], r["element"]["id"]) for r in more] == [("open", "spine3")]


def test_a_spine_fault_seen_on_one_link_first_opens_one_event_on_the_spine(four_shards):
    """A spine's first window: one shard names one of its links before the others' are in (a CI
    run opened a link event that closed a window later, when the spine was named). The lone link
    is marked `lone_link_of`: no event in its first window; the spine's one event after it."""
    from fleetctl.lens.events import EventRules, EventTracker

    topo, layout, shards = four_shards
    tracker = EventTracker(EventRules(), topo.location)
    rng = np.random.default_rng(6)
    records, seen = _run_windows(tracker, topo, layout, shards, rng,
                                 _loss(topo, ["leaf1->spine3", "spine3->leaf1"], 0.05), 1)
    assert [(f["element"]["id"], f["evidence"].get("lone_link_of")) for f in seen[0]] == [("leaf1--spine3", "spine3")]
    assert records == []
    more, _ = _run_windows(tracker, topo, layout, shards, rng, _loss(topo, _spine_links(topo, "spine3"), 0.05), 2,
                           t0=1)
    assert [(r["kind"], r["element"]["id"]) for r in more] == [("open", "spine3")]


def test_a_lone_faulty_cable_on_a_spine_opens_a_window_later():
    from fleetctl.lens.events import EventRules, EventTracker

    tracker = EventTracker(EventRules())
    finding = {"element": {"type": "link", "id": "leaf1--spine3", "direction": "both"}, "metric": "loss",
               "severity": "critical", "confidence": 0.9, "evidence": {"lone_link_of": "spine3"}}
    assert tracker.window(0.0, 1.0, [finding], now=1.0) == []
    assert [(r["kind"], r["element"]["id"]) for r in tracker.window(1.0, 2.0, [finding], now=2.0)] == \
        [("open", "leaf1--spine3")]


def test_two_faulty_cables_on_one_spine_still_open_once_they_persist(four_shards):
    from fleetctl.lens.events import EventRules, EventTracker

    topo, layout, shards = four_shards
    rules = EventRules()
    tracker = EventTracker(rules, topo.location)
    rng = np.random.default_rng(4)
    two = _loss(topo, ["leaf1->spine3", "spine3->leaf1", "leaf3->spine3", "spine3->leaf3"], 0.05)
    records, _ = _run_windows(tracker, topo, layout, shards, rng, two, rules.k_open_suspect)
    assert sorted((r["kind"], r["element"]["id"]) for r in records) == \
        [("open", "leaf1--spine3"), ("open", "leaf3--spine3")]


def test_the_merge_service_keeps_a_switch_suspected_for_a_few_windows(four_shards, tmp_path):
    """A window naming only one link of a switch suspected a window before marks that link too:
    the shards' findings come and go while a spine's fault is being named."""
    from fleetctl.lens.shard import SUSPECT_WINDOWS

    topo, layout, shards = four_shards
    dirs = [tmp_path / s.shard.name for s in shards]
    merge = ShardMerge(topo, layout, [str(d) for d in dirs])
    rng = np.random.default_rng(5)

    def publish(loss, now):
        for s, d in zip(shards, dirs):
            d.mkdir(exist_ok=True)
            (d / SHARD_FILE).write_text(json.dumps(s.window(rng, 40, loss, t_end=now)))
        return merge.window(now)[0].findings

    two = _loss(topo, ["leaf1->spine3", "spine3->leaf1", "leaf3->spine3", "spine3->leaf3"], 0.05)
    one = _loss(topo, ["leaf1->spine3", "spine3->leaf1"], 0.05)
    assert all(f["evidence"].get("suspect_switch") == "spine3" for f in publish(two, 1000.0))
    for w in range(1, SUSPECT_WINDOWS):
        f = publish(one, 1000.0 + w)
        assert [x["element"]["id"] for x in f] == ["leaf1--spine3"]
        assert f[0]["evidence"]["suspect_switch"] == "spine3"
    f = publish(one, 1000.0 + SUSPECT_WINDOWS)  # suspicion over: a link fault of its own
    assert [x["element"]["id"] for x in f] == ["leaf1--spine3"]
    assert "suspect_switch" not in f[0]["evidence"]


def test_a_missing_shard_holds_only_the_places_its_probes_cross(four_shards, tmp_path):
    """A merged window without shard-0 cannot call shard-0's leaf uplinks good, but a spine
    all four shards cross is judged on the other three: one late shard must not hold every
    merged event open (with tens of shards one is always late somewhere)."""
    topo, layout, _shards = four_shards
    merge = ShardMerge(topo, layout, [str(tmp_path)])
    leaf_of = {next(iter(b)): sw for sw, b in layout.below.items()
               if len(b) == 1 and sw not in layout.shared}
    link = {i: next(lid for lid, ends in topo.links.items() if set(ends) == {leaf_of[i], "spine1"})
            for i in (0, 1)}
    keys = {"switch:spine1", f"link:{link[0]}", f"link:{link[1]}", "nic:no-such-nic"}
    assert merge.unjudged(keys, []) == set()
    assert merge.unjudged(keys, ["shard-0"]) == {f"link:{link[0]}", "nic:no-such-nic"}
    assert merge.unjudged(keys, ["shard-1", "shard-2", "shard-3"]) == \
        {"switch:spine1", f"link:{link[1]}", "nic:no-such-nic"}


def test_links_of_a_spine_one_shard_named_whole_fold_into_it(four_shards):
    """One shard's roll-up names the spine, another shard names only some of its links (its
    share of the fault was thinner): one finding, the switch, listing those links; a lossy
    cable on another spine in the same window stays its own finding."""
    topo, layout, shards = four_shards
    rng = np.random.default_rng(1)
    loss = _loss(topo, _spine_links(topo, "spine3") + ["leaf2->spine1"], 0.03)
    docs = [s.window(rng, 40, loss) for s in shards]
    res = _merge(topo, layout, docs)  # every shard names spine3's links: the merge folds them
    others = [(f["element"]["type"], f["element"]["id"]) for f in res.findings
              if f["element"]["id"] != "spine3"]
    assert [f["element"]["id"] for f in res.findings].count("spine3") == 1
    assert len(others) == 1 and others[0][1].endswith("--spine1")  # the cable: a link of its own
    links = [f for f in docs[1]["findings"] if "spine3" in f["element"]["id"]]
    assert links and all(f["element"]["type"] == "link" for f in links)
    # shard 0 named the spine itself, from its own roll-up
    whole = {**links[0], "element": {"type": "switch", "id": "spine3"}}
    docs[0]["findings"] = [whole] + [f for f in docs[0]["findings"]
                                     if "spine3" not in f["element"]["id"]]
    for d in docs[2:]:
        d["findings"] = [f for f in d["findings"] if "spine3" not in f["element"]["id"]]
    res = _merge(topo, layout, docs)
    spine = [f for f in res.findings if "spine3" in f["element"]["id"]]
    assert [(f["element"]["type"], f["element"]["id"]) for f in spine] == [("switch", "spine3")]
    ev = spine[0]["evidence"]
    assert {layout.shards[0].name, layout.shards[1].name} <= set(ev["shards"])
    assert set(ev["links"]) == {f["element"].get("direction") if f["element"].get("direction")
                                not in (None, "", "both") else f["element"]["id"] for f in links}
    assert [(f["element"]["type"], f["element"]["id"]) for f in res.findings
            if f["element"]["id"] != "spine3"] == others


def _signals(shard, lost_on: np.ndarray, probes: int = 40):
    """A shard's window signals: `probes` on every path, all lost where `lost_on` (rows of its
    paths) loses 4 of them (a bool mask), or the count it gives (an int array)."""
    sent = np.full(len(shard.paths), probes)
    lost = np.where(lost_on, 4, 0) if lost_on.dtype == bool else lost_on
    base = np.full(len(shard.paths), 100.0)
    m = shard.step.merge(WindowStats(sent[None], lost[None], base[None], base))
    return shard.step.signals(m.sent[0], m.lost[0], m.delay[0], m.baseline)


def _cable_finding(topo, nic: str) -> dict:
    cable = next(lid for lid, ends in topo.links.items() if nic in ends)
    return {"element": {"type": "link", "id": cable, "direction": "both"}, "metric": "loss",
            "severity": "critical",
            "confidence": 0.5, "evidence": {}}


def test_a_cable_finding_a_spine_would_explain_is_marked_so_and_held_when_it_is_named(
        four_shards):
    """A shard's loss on the few paths of a NIC that cross one spine (its other paths clean)
    reads as the NIC's cable in that shard; the shard marks it explained_if_named = the spine,
    and the merge holds it in a window where it names that spine, not in one where it does
    not."""
    from fleetctl.lens.window import WindowJudge

    topo, layout, shards = four_shards
    shard = shards[0]
    judge = WindowJudge(topo, shard.step)
    nic = next(n for n, h in zip(topo.nics, topo.nic_host) if h in set(shard.shard.hosts))
    f = _cable_finding(topo, nic)
    through_nic = shard.step.rollup.paths_through(
        [topo.index("nic", nic)])[shard.step.group]
    spine = sorted(layout.shared)[0]
    through_spine = shard.step.rollup.paths_through([topo.index("switch", spine)])[shard.step.group]
    assert (through_nic & through_spine).any() and (through_nic & ~through_spine).any()
    sig = _signals(shard, through_nic & through_spine)
    judge.mark_explained_if_named([f], sig, list(layout.shared))
    assert f["evidence"]["explained_if_named"] == spine
    assert f["evidence"]["outside_named_switch"]["lost"] == 0
    # one background drop on a path away from the spine besides: the spine still explains
    # most of its lost probes (the share is by probe, a majority), and one drop away from it is
    # not significant
    rows = np.flatnonzero(through_nic & through_spine)
    away = np.flatnonzero(through_nic & ~through_spine)
    lost = np.zeros(len(shard.paths), dtype=np.int64)
    lost[rows[:1]] = 2
    lost[away[:1]] = 1
    h = _cable_finding(topo, nic)
    judge.mark_explained_if_named([h], _signals(shard, lost), list(layout.shared))
    assert h["evidence"]["explained_if_named"] == spine
    assert h["evidence"]["outside_named_switch"]["lost"] == 1
    # as many lost away from it as through it: not the spine's to explain
    lost[away[:1]] = 2
    h = _cable_finding(topo, nic)
    judge.mark_explained_if_named([h], _signals(shard, lost), list(layout.shared))
    assert "explained_if_named" not in h["evidence"]
    # the same loss on its paths away from the spine too: a cable fault of its own
    g = _cable_finding(topo, nic)
    judge.mark_explained_if_named([g], _signals(shard, through_nic), list(layout.shared))
    assert "explained_if_named" not in g["evidence"]

    docs = [s.window(np.random.default_rng(3), 40, _loss(topo, [], 0.0)) for s in shards]
    docs[0]["findings"] = [f]
    res = _merge(topo, layout, docs)  # the spine is not named: the cable stands
    assert not res.findings[0]["evidence"].get("explained_by_window_finding")
    docs = [s.window(np.random.default_rng(4), 40,
                     _loss(topo, _spine_links(topo, spine), 0.03)) for s in shards]
    docs[0]["findings"] = [f] + [x for x in docs[0]["findings"] if spine in x["element"]["id"]]
    res = _merge(topo, layout, docs)
    cable = [x for x in res.findings if x["element"]["id"] == f["element"]["id"]]
    assert [x["element"]["id"] for x in res.findings if x["element"]["type"] == "switch"] == [spine]
    assert cable and cable[0]["evidence"]["explained_by_window_finding"] == f"switch:{spine}"
    # a document's value is input: anything but a named switch's id holds nothing
    for bad in (["spine1"], 7, "no-such-switch", None):
        docs[0]["findings"][0] = {**f, "evidence": {"explained_if_named": bad}}
        res = _merge(topo, layout, docs)
        cable = [x for x in res.findings if x["element"]["id"] == f["element"]["id"]]
        assert not cable[0]["evidence"].get("explained_by_window_finding")
