"""Lens window analysis on synthetic records with skewed clocks: clean windows give nothing, a
loss names its link in one window, a gray delay shows against baselines learnt on the fly, an
agent that was not running (blind host) never makes a finding; clock tracking; affected jobs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fleetctl.analysis.summaries import clock_records, from_probes
from fleetctl.config.site import parse_site
from fleetctl.lab.sitefile import site_document, to_toml
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.lens.baseline import PathBaselines
from fleetctl.lens.clocktrack import ClockTracker
from fleetctl.lens.jobs import JobMap
from fleetctl.lens.window import WindowAnalyzer
from fleetctl.mesh.pairs import select_pairs
from fleetctl.model.fabric import FLOW_DTYPE, Topology
from fleetctl.slurm.base import SlurmJob
from tests.support.synthetic import Fault
from tests.support.synthetic_run import synthetic_run


@pytest.fixture(scope="module")
def fabric():
    layout = build_layout(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                                    clock_skew=False, slurm=False, ssh=False))
    site = parse_site(to_toml(site_document(layout, Path("/nonexistent-lab"), slurm_conf="",
                                            ssh={}, cpus=2)))
    topo = Topology.from_site(site)
    pairs = [(topo.nics[a], topo.nics[b]) for a, b in select_pairs(topo).pairs]
    return topo, pairs


def run(fabric, faults=(), seed=3, duration=6.0):
    topo, pairs = fabric
    syn = synthetic_run(topo, pairs, list(faults), sports=8, rate_hz=40, duration=duration,
                        seed=seed)
    # host clocks within +-2 ms of a whole second: every run's first send just after it, so
    # windows on whole seconds (as lens and its agents' summaries cut them) hold whole seconds
    p = syn.probes
    for f in ("t_send", "t_remote_rx", "t_remote_tx", "t_recv"):
        p[f] = np.where(p[f] != 0, p[f] + np.int64(3_000_000), 0)
    return syn


class SummaryWindowAnalyzer(WindowAnalyzer):
    """Lens agents' default: each window arrives as per-flow summaries (what the agents would
    send for these records), not as the records."""

    def analyze(self, probes, t_start, t_end, *args, **kw):
        return super().analyze(from_probes(probes, int(round((t_end - t_start) * 1e9))),
                               t_start, t_end, *args, **kw)


class SummaryClockTracker(ClockTracker):
    def add(self, probes, quiet=frozenset()):
        ids, first = np.unique(probes["flow"], return_index=True)
        flows = np.zeros(len(ids), FLOW_DTYPE)  # the flows of these probes, from the probes
        flows["flow"], flows["src_nic"] = ids, probes["src_nic"][first]
        flows["dst_nic"] = probes["dst_nic"][first]
        super().add(clock_records(from_probes(probes, 1_000_000_000), flows), quiet)


@pytest.fixture(params=["records", "summary"], autouse=True)
def mode(request, monkeypatch):
    """Every test twice: windows of probe records, and of the agents' per-flow summaries."""
    if request.param == "summary":
        monkeypatch.setattr(sys.modules[__name__], "WindowAnalyzer", SummaryWindowAnalyzer)
        monkeypatch.setattr(sys.modules[__name__], "ClockTracker", SummaryClockTracker)
    return request.param


def windows(syn, w=1.0):
    t = syn.probes["t_send"]
    start = int(t.min()) // int(w * 1e9) * int(w * 1e9)
    n = int((int(t.max()) - start) // int(w * 1e9)) + 1
    for i in range(n):
        a = start + int(i * w * 1e9)
        b = a + int(w * 1e9)
        yield a * 1e-9, b * 1e-9, syn.probes[(t >= a) & (t < b)]


def analyse(fabric, syn, baselines=None, clock=None, blind=frozenset()):
    topo, _ = fabric
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    out = []
    for a, b, probes in windows(syn):
        if clock is not None:
            clock.add(probes)
            clock.maybe_refit(b)
        model, epoch = clock.fit if clock else (None, 0)
        res = an.analyze(probes, a, b, {}, set(blind), (model, epoch),
                         baselines.current() if baselines else None)
        if baselines is not None and res.path_delay is not None:
            baselines.update(res.path_delay, res.path_healthy)
        out.append(res)
    return an, out


def test_clean_windows_give_no_finding(fabric):
    syn = run(fabric)
    _an, res = analyse(fabric, syn, PathBaselines(len(syn.paths), warmup=2))
    assert all(r.findings == [] for r in res)
    assert res[0].elements and all(r.probes > 0 for r in res)


def test_loss_is_named_in_each_window(fabric):
    syn = run(fabric, [Fault("leaf1->spine2", "loss", 0.05)])
    _an, res = analyse(fabric, syn)
    named = [[(f["element"]["type"], f["element"].get("direction")) for f in r.findings]
             for r in res]
    assert sum(("link", "leaf1->spine2") in n for n in named) >= len(res) - 1
    assert all(len(n) <= 1 for n in named)


def test_a_host_slow_on_all_its_nics_is_a_note_not_a_finding(fabric):
    # what a busy host does to software timestamps (CI saw it: node8's two uplinks blamed
    # for 21 us in a clean run); one NIC slow alone is still the network's
    clean = run(fabric, seed=5, duration=8.0)  # one seed: the same host clocks throughout
    base = PathBaselines(len(clean.paths), warmup=3)
    clock = ClockTracker(*_hosts(fabric), refit_s=2.0)
    analyse(fabric, clean, base, clock)
    slow = run(fabric, [Fault("node2:eth0->leaf1", "delay", 35.0),
                        Fault("node2:eth1->leaf1", "delay", 35.0)], seed=5, duration=4.0)
    _an, res = analyse(fabric, slow, base, clock)
    assert all(r.findings == [] for r in res)
    notes = [n for r in res for n in r.host_side]
    assert len(notes) >= len(res) - 1
    for n in notes:
        assert n["element"] == {"type": "host", "id": "node2"} and n["check"] == "probe.host_delay"
        assert n["category"] == "probe" and n["evidence"]["side"] == "send"
    one = run(fabric, [Fault("node2:eth0->leaf1", "delay", 60.0)], seed=5, duration=4.0)
    _an, res = analyse(fabric, one, base, clock)
    hits = [f["element"].get("direction") for r in res for f in r.findings]
    assert len(hits) >= len(res) - 1 and set(hits) == {"node2:eth0->leaf1"}
    assert all(r.host_side == [] for r in res)


def test_a_blind_host_makes_no_finding(fabric):
    topo, _ = fabric
    syn = run(fabric, [Fault("node2:eth0", "down")])
    _an, res = analyse(fabric, syn, blind={"node2"})
    assert all(r.findings == [] for r in res)
    assert all(r.set_aside > 0 for r in res)


def test_gray_delay_against_learnt_baselines(fabric):
    clean = run(fabric, seed=5, duration=8.0)
    slow = run(fabric, [Fault("spine1->leaf2", "delay", 400.0)], seed=5, duration=4.0)
    base = PathBaselines(len(clean.paths), warmup=3)
    clock = ClockTracker(*_hosts(fabric), refit_s=2.0)
    analyse(fabric, clean, base, clock)
    assert np.isfinite(base.current()).mean() > 0.9
    _an, res = analyse(fabric, slow, base, clock)
    hits = [f for r in res for f in r.findings if f["metric"] == "delay"]
    # with two leaves, leaf1->spine1 and spine1->leaf2 carry the same paths: twins, either named
    assert len(hits) >= len(res) - 1
    for f in hits:
        assert "spine1->leaf2" in [f["element"]["direction"]] + \
            f["evidence"].get("indistinguishable_from", [])
        assert f["evidence"]["excess_delay_us_bad_median"] == pytest.approx(400, abs=20)


def _hosts(fabric):
    topo, _ = fabric
    hosts = list(dict.fromkeys(topo.nic_host))
    return hosts, np.array([hosts.index(h) for h in topo.nic_host])


def test_clock_tracking_follows_offsets_and_reports_a_jump(fabric):
    syn = run(fabric, seed=7, duration=8.0)
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host, refit_s=2.0, horizon_s=4.0, jump_us=200.0)
    for a, b, probes in windows(syn):
        tr.add(probes)
        tr.maybe_refit(b)
    st = {s["host"]: s for s in tr.status()}
    assert len(st) == len(hosts) and all(s["fits"] >= 2 for s in st.values())
    assert tr.findings(b) == []
    # node3's clock steps by 5 ms: its next fit disagrees with the prediction
    jumped = syn.probes.copy()
    h3 = [i for i, h in enumerate(nic_host) if hosts[h] == "node3"]
    shift = np.int64(5_000_000)
    src3, dst3 = np.isin(jumped["src_nic"], h3), np.isin(jumped["dst_nic"], h3)
    for f in ("t_send", "t_recv"):
        jumped[f] = np.where(src3 & (jumped[f] != 0), jumped[f] + shift, jumped[f])
    for f in ("t_remote_rx", "t_remote_tx"):
        jumped[f] = np.where(dst3 & (jumped[f] != 0), jumped[f] + shift, jumped[f])
    span = np.int64(int(syn.probes["t_send"].max() - syn.probes["t_send"].min()) + 1_000_000_000)
    for f in ("t_send", "t_recv", "t_remote_rx", "t_remote_tx"):
        jumped[f] = np.where(jumped[f] != 0, jumped[f] + span, 0)
    tr.chunks.clear()
    for a, b, probes in windows(type(syn)(**{**syn.__dict__, "probes": jumped})):
        tr.add(probes)
        if tr.maybe_refit(b):
            break
    found = tr.findings(b)
    assert found and any(f["element"] == {"type": "clock", "id": "node3"} for f in found) or \
        any(abs(f["evidence"]["jump_us"] or 0) > 1000 for f in found)
    # ... unless node3's agent was overloaded or blind in the window: fleetctl's measurement
    # (the 64-host lab raised a false `clock` event on an overloaded host)
    assert all(f["element"]["id"] != "node3" for f in tr.findings(b, quiet={"node3"}))


def test_a_jump_is_judged_only_against_a_fit_that_knew_the_drift(fabric):
    """A host's first fit covers a few seconds of bounds and can misjudge its drift by hundreds
    of ppm: the next fit then disagrees with its prediction by milliseconds, which is the first
    fit's error, not the clock (a 512-host harness: 243 false jumps a shard). Such a prediction,
    or one from a drift beyond the bound, judges no jump."""
    syn = run(fabric, seed=7, duration=8.0)
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host, refit_s=2.0, horizon_s=4.0, jump_us=200.0)
    fits = 0
    for a, b, probes in windows(syn):
        tr.add(probes)
        if tr.maybe_refit(b):
            fits += 1
            if fits == 1:  # the first fit misjudges node3's drift by 1,000 ppm
                tr.fit[0].drift[hosts.index("node3")] += 1e-3
            if fits == 2:
                break
    assert fits == 2 and "node3" not in tr.jumps and tr.findings(b) == []
    model, _ = tr.fit
    model.drift[hosts.index("node3")] += 1e-3  # beyond the 200 ppm bound: no prediction from it
    for a, b, probes in windows(syn):
        tr.add(probes)
        tr.last_fit = -1e18
        tr.maybe_refit(b)
        break
    assert "node3" not in tr.jumps
    # (a real step after two fits is seen: test_clock_tracking_follows_offsets_and_reports_a_jump)


def test_the_windows_use_a_hosts_clock_only_once_a_second_fit_confirmed_it(fabric):
    """A first fit's drift can be hundreds of ppm off (a few seconds of bounds): the windows'
    one-way delays leave a host out (offset NaN: not measured) until a second fit has followed
    its first; the tracker's own model (findings, status) keeps every estimate."""
    syn = run(fabric, seed=7, duration=8.0)
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host, refit_s=2.0, horizon_s=4.0)
    assert tr.window_fit == (None, 0)
    fits = 0
    for a, b, probes in windows(syn):
        tr.add(probes)
        if tr.maybe_refit(b):
            fits += 1
            model, epoch = tr.window_fit
            assert epoch == tr.epoch_ns and np.isfinite(tr.model.offset).all()
            if fits == 1:
                assert np.isnan(model.offset).all()
                t = np.zeros(len(hosts))
                assert np.isnan(model.theta(np.arange(len(hosts)), np.roll(np.arange(len(hosts)), 1), t)).all()
            else:
                assert model is tr.model
                break
    assert fits == 2


def test_a_fit_in_the_worker_process_is_the_fit_here(fabric):
    """lens fits clocks in a worker process (its interpreter lock is the windows'): the same
    model, bit for bit, and the worker's CPU time as the fit's cost."""
    from fleetctl.lens.clocktrack import _fit, fit_elsewhere, stop_workers

    syn = run(fabric, seed=7, duration=4.0)
    hosts, nic_host = _hosts(fabric)
    probes = syn.probes[syn.probes["lost"] == 0]
    epoch = int(probes["t_send"].min())
    try:
        there, cost = fit_elsewhere(probes, nic_host, hosts, epoch)
    finally:
        stop_workers()
    here, _ = _fit(probes, nic_host, hosts, epoch)
    assert np.array_equal(there.offset, here.offset, equal_nan=True)
    assert np.array_equal(there.drift, here.drift, equal_nan=True)
    assert cost > 0


def test_a_reference_host_gone_quiet_is_no_clock_jump(fabric):
    """Offsets are relative to the component's first host. When node1 (the reference) sends and
    answers nothing for a fit, node2 becomes the reference and every offset moves by the two
    clocks' difference (up to milliseconds): no host's clock jumped."""
    syn = run(fabric, seed=7, duration=8.0)
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host, refit_s=2.0, horizon_s=4.0, jump_us=200.0)
    for a, b, probes in windows(syn):
        tr.add(probes)
        tr.maybe_refit(b)
    assert tr.findings(b) == []
    h1 = [i for i, h in enumerate(nic_host) if hosts[h] == "node1"]
    quiet = syn.probes[~np.isin(syn.probes["src_nic"], h1) & ~np.isin(syn.probes["dst_nic"], h1)]
    span = np.int64(int(syn.probes["t_send"].max() - syn.probes["t_send"].min()) + 1_000_000_000)
    later = quiet.copy()
    for f in ("t_send", "t_recv", "t_remote_rx", "t_remote_tx"):
        later[f] = np.where(later[f] != 0, later[f] + span, 0)
    tr.chunks.clear()
    refits = 0
    for a, b, probes in windows(type(syn)(**{**syn.__dict__, "probes": later})):
        tr.add(probes)
        refits += tr.maybe_refit(b)
    assert refits and tr.model.component[hosts.index("node1")] == -1
    assert tr.findings(b) == []


def test_affected_jobs_cross_the_element(fabric):
    topo, _ = fabric
    syn = run(fabric, duration=1.0)
    jm = JobMap(topo, syn.paths)
    jm.set_jobs([SlurmJob("12", "RUNNING", "alice", "debug", "train", ["node1", "node3"],
                          "node[1,3]"),
                 SlurmJob("13", "RUNNING", "bob", "debug", "local", ["node1", "node2"],
                          "node[1-2]"),
                 SlurmJob("14", "PENDING", "carol", "debug", "wait", [], "")])
    # node1 and node2 share leaf1 in this lab: only the job spanning leaves crosses a spine
    hit = jm.affected({"type": "switch", "id": "spine1"})
    assert [j["job_id"] for j in hit] == ["12"]
    assert hit[0] == {"job_id": "12", "user": "alice", "nodes": "node[1,3]", "partition": "debug"}
    assert sorted(j["job_id"] for j in jm.affected({"type": "nic", "id": "node1:eth0"})) == \
        ["12", "13"]
    assert [j["job_id"] for j in jm.affected({"type": "clock", "id": "node2"})] == ["13"]


def test_job_map_pairs_are_the_traced_paths_host_pairs(fabric):
    """JobMap answers from the incidence when asked: the same host pairs as a scan of every
    traced path crossing the element, for every element of the lab fabric."""
    from fleetctl.lens.jobs import element_columns

    topo, _ = fabric
    syn = run(fabric, duration=1.0)
    jm = JobMap(topo, syn.paths)
    paths = syn.paths
    for x in topo.elements:
        el = {"type": x.type, "id": x.id, **({"direction": x.direction} if x.direction else {})}
        cols = set(element_columns(topo, el))
        want = set()
        for p in range(len(paths)):
            s, d = paths.src_nic[p], paths.dst_nic[p]
            if s < 0 or d < 0 or not cols & set(int(e) for e in paths.row(p)):
                continue
            a, b = sorted((topo.nic_host_index[s], topo.nic_host_index[d]))
            if a != b:
                want.add((int(a), int(b)))
        got = {tuple(int(v) for v in row) for row in jm.pairs_through(el)}
        assert got == want, el
    assert len(jm.pairs_through({"type": "link", "id": "no-such-link"})) == 0


def test_baselines_learn_from_healthy_windows_only():
    b = PathBaselines(3, warmup=2)
    b.update(np.array([10.0, 10.0, np.nan]), np.array([True, True, True]))
    assert np.isnan(b.current()).all()
    b.update(np.array([12.0, 500.0, 5.0]), np.array([True, False, True]))
    cur = b.current()
    assert cur[0] == pytest.approx(10.04) and np.isnan(cur[1]) and np.isnan(cur[2])
    state = b.to_state()
    c = PathBaselines(3, warmup=2)
    c.load_state(state)
    assert c.current()[0] == pytest.approx(10.04)
    c.load_state({"value": [1.0], "count": [9]})  # another plan: ignored
    assert c.current()[0] == pytest.approx(10.04)


def test_down_starts_inside_a_window(fabric):
    """A NIC cable down for the second half of a window: the window's finding carries the moment
    its probes started to be lost (flap detection needs it)."""
    topo, _ = fabric
    syn = run(fabric, duration=2.0)
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    a, b, probes = next(windows(syn))
    probes = probes.copy()
    nic = topo.nics.index("node2:eth0")
    mid = int((a + 0.5) * 1e9)
    hit = ((probes["src_nic"] == nic) | (probes["dst_nic"] == nic)) & (probes["t_send"] >= mid)
    probes["lost"][hit] = 1
    for f in ("t_remote_rx", "t_remote_tx", "t_recv"):
        probes[f][hit] = 0
    res = an.analyze(probes, a, b, {}, set())
    f = next(f for f in res.findings if "node2:eth0" in f["element"]["id"])
    assert len(f["down_starts"]) == 1 and abs(f["down_starts"][0] - (a + 0.5)) <= 0.11
    assert f["metric"] == "down"  # and still down at the window's end


def test_a_flap_on_the_window_edge_is_seen(fabric):
    """A NIC cable toggled every second, going down 20 ms after each window starts (a fixed
    rhythm keeps that phase): no window holds both an up and a down stretch long enough to see the
    change, yet every down start is found, from the state the previous window ended in."""
    topo, _ = fabric
    syn = run(fabric, duration=8.0)
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    nic = topo.nics.index("node2:eth0")
    starts, metrics, edges = [], [], []
    for i, (a, b, probes) in enumerate(windows(syn)):
        edges.append(a)
        probes = probes.copy()
        t = probes["t_send"] * 1e-9
        down = ((t - a >= 0.02) if i % 2 == 0 else (t - a < 0.02)) & (i >= 2)
        hit = ((probes["src_nic"] == nic) | (probes["dst_nic"] == nic)) & down
        probes["lost"][hit] = 1
        for f in ("t_remote_rx", "t_remote_tx", "t_recv"):
            probes[f][hit] = 0
        res = an.analyze(probes, a, b, {}, set())
        for f in res.findings:
            if "node2:eth0" in f["element"]["id"]:
                starts += f.get("down_starts", [])
                metrics.append(f["metric"])
    # down from windows 2, 4, 6 (each 20 ms in), up again 20 ms into windows 3, 5, 7
    assert len(starts) == 3, starts
    for s, i in zip(starts, (2, 4, 6)):
        assert edges[i] <= s <= edges[i] + 0.25, (starts, edges)


def test_a_finding_whose_bad_paths_cross_an_open_event_is_marked_explained(fabric):
    syn = run(fabric, [Fault("spine1->leaf2", "loss", 0.05)], duration=3.0)
    twins = {"spine1->leaf2": {"type": "link", "id": "leaf1--spine1", "direction": "leaf1->spine1"},
             "leaf1->spine1": {"type": "link", "id": "leaf2--spine1", "direction": "spine1->leaf2"}}
    elsewhere = {"type": "link", "id": "leaf2--spine2", "direction": "both"}
    topo, _ = fabric
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    marked = 0
    for a, b, probes in windows(syn):
        plain = an.analyze(probes, a, b, {}, set())
        for f in plain.findings:
            assert "explained_by_open_event" not in f["evidence"]
        named = [f["element"]["direction"] for f in plain.findings]
        if not named:
            continue  # the run's last, short window
        assert len(named) == 1 and named[0] in twins
        res = an.analyze(probes, a, b, {}, set(), open_elements=[elsewhere])
        assert all("explained_by_open_event" not in f["evidence"] for f in res.findings)
        res = an.analyze(probes, a, b, {}, set(), open_elements=[twins[named[0]]])
        # marked with the place of the event that explains it (the tracker holds it so)
        marked += all(f["evidence"].get("explained_by_open_event") == an.location(twins[named[0]])
                      for f in res.findings)
        for f in res.findings:  # no loop probes here: no path of the twin avoids the event
            assert f["evidence"]["outside_open_event"]["paths"] == 0
            assert f["evidence"]["outside_open_event"]["p_value"] == 1.0
    assert marked >= 2


def test_a_finding_a_stronger_one_of_its_window_explains_is_marked(fabric):
    """Two findings of one window on one fault (a cable's direction and the twin of its other
    direction: CI's lab opened two events so in the partial first window of a loss): the weaker,
    whose bad paths all cross the stronger one's cable, is marked and opens nothing; the
    stronger is not. Two faults apart are two findings, neither marked."""
    topo, _ = fabric
    syn = run(fabric, [Fault("spine1->leaf2", "loss", 0.05)], duration=3.0)
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    a, b, probes = next(windows(syn))
    res = an.analyze(probes, a, b, {}, set())
    (real,) = res.findings
    assert real["element"]["direction"] in ("spine1->leaf2", "leaf1->spine1")  # twins here
    weaker = json.loads(json.dumps(real))
    weaker["element"] = {"type": "link", "id": "node1:eth0--leaf1", "direction": "node1:eth0->leaf1"}
    weaker["evidence"] = {}
    pair = [weaker, json.loads(json.dumps(real))]
    an._mark_explained(pair, res.signals, [])
    mark = pair[0]["evidence"].get("explained_by_window_finding")
    # node1:eth0's lossy paths are those of the fault, through its cable: explained by it
    assert mark == an.location(real["element"]), pair[0]["evidence"]
    assert pair[0]["evidence"]["outside_window_finding"]["p_value"] >= 1e-6
    assert "explained_by_window_finding" not in pair[1]["evidence"]
    syn = run(fabric, [Fault("spine1->leaf2", "loss", 0.05), Fault("node1:eth0", "down")],
              duration=3.0)
    a, b, probes = next(windows(syn))
    res = an.analyze(probes, a, b, {}, set())
    assert len({an.location(f["element"]) for f in res.findings}) == 2, res.findings
    assert not any("explained_by_window_finding" in f["evidence"] for f in res.findings)


def test_a_finding_with_loss_on_its_own_paths_away_from_the_open_event_is_not_explained(fabric):
    """The test on a finding's paths that avoid the open event (loop probes, for a twin): loss
    there well above the clean paths' is a second fault; a lost probe or two is not."""
    from fleetctl.analysis.signals import window_signals

    topo, _ = fabric
    syn = run(fabric, duration=2.0)
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    n = 40
    sent = np.full(n, 500)
    rest = np.zeros(n, dtype=bool)
    rest[:4] = True  # the finding's own paths away from the event
    taken = np.zeros(n, dtype=bool)
    taken[:10] = True  # ... and the rest of its paths or the event's
    for lost_each, independent in ((0, False), (1, False), (10, True)):
        lost = np.zeros(n, dtype=np.int64)
        lost[:4] = lost_each
        lost[4:10] = 25  # the event's own loss, never the background
        lost[10] = 1  # the clean background: 1 in 15,000
        sig = window_signals(sent, lost, np.zeros(n), np.zeros(n), an.th)
        out = an._outside_open_event({"metric": "loss"}, sig, rest, taken)
        assert out["paths"] == 4 and out["probes"] == 2000 and out["lost"] == 4 * lost_each
        assert (out["p_value"] < out["alpha"]) is independent, out


def test_a_finding_inside_an_open_events_element_refines_it(fabric):
    """A cable of the switch an open event names: marked `refines` with the switch's location (its
    paths all cross the switch); the same finding against a cable elsewhere is not."""
    syn = run(fabric, [Fault("spine1->leaf2", "loss", 0.05)], duration=3.0)
    topo, _ = fabric
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    spine = {"type": "switch", "id": "spine1"}
    other = {"type": "switch", "id": "spine2"}
    refined = 0
    for a, b, probes in windows(syn):
        res = an.analyze(probes, a, b, {}, set(), open_elements=[spine])
        for f in res.findings:
            assert f["element"]["type"] == "link" and "spine1" in f["element"]["id"]
            assert f.get("refines") == "switch:spine1"
            refined += 1
        res = an.analyze(probes, a, b, {}, set(), open_elements=[other])
        assert all("refines" not in f for f in res.findings)
    assert refined >= 2


def test_clock_records_are_reduced_to_the_tightest_bounds_per_host_pair(mode):
    """One record per (sender host, responder host) a window: the smallest t2 - t1 and the
    largest t3 - t4, which may come from two different probes."""
    from fleetctl.lens.clocktrack import tightest_per_host_pair
    from fleetctl.model.fabric import PROBE_DTYPE

    nic_host = np.array([0, 0, 1, 1])
    p = np.zeros(5, PROBE_DTYPE)
    p["src_nic"], p["dst_nic"] = [0, 1, 0, 2, 3], [2, 3, 3, 0, 1]
    p["t_send"] = [100, 200, 300, 400, 500]
    p["t_remote_rx"] = p["t_send"] + [50, 20, 90, 70, 60]  # host 0 -> 1: smallest 20 (row 1)
    p["t_recv"] = [1000, 1100, 1200, 1300, 1400]
    p["t_remote_tx"] = p["t_recv"] - [30, 40, 10, 25, 5]  # host 0 -> 1: largest -10 (row 2)
    out = tightest_per_host_pair(p, nic_host)
    assert out.size == 2
    a = out[nic_host[out["src_nic"]] == 0][0]
    assert a["t_remote_rx"] - a["t_send"] == 20 and a["t_send"] == 200
    assert a["t_remote_tx"] - a["t_recv"] == -10 and a["t_recv"] == 1200
    b = out[nic_host[out["src_nic"]] == 1][0]
    assert b["t_remote_rx"] - b["t_send"] == 60 and b["t_remote_tx"] - b["t_recv"] == -5


def test_the_clock_reads_summaries_as_it_reads_their_records(fabric):
    """add_summary keeps what add(clock_records(...)) keeps, record for record, with and
    without quiet hosts."""
    from fleetctl.lens.clocktrack import ClockTracker as Tracker  # not the fixture's stand-in

    hosts, nic_host = _hosts(fabric)
    for seed, quiet in ((7, set()), (8, {"node3"}), (9, {"node1", "node6"})):
        syn = run(fabric, seed=seed, duration=2.0)
        p = syn.probes
        ids, first = np.unique(p["flow"], return_index=True)
        flows = np.zeros(len(ids), FLOW_DTYPE)
        flows["flow"], flows["src_nic"] = ids, p["src_nic"][first]
        flows["dst_nic"] = p["dst_nic"][first]
        s = from_probes(p, 1_000_000_000)
        a, b = Tracker(hosts, nic_host), Tracker(hosts, nic_host)
        a.add(clock_records(s, flows), quiet)
        b.add_summary(s, flows, quiet)
        assert len(a.chunks) == len(b.chunks) == 1 and a.chunks[0].size >= 2
        assert np.array_equal(a.chunks[0], b.chunks[0])
        assert a.adds == b.adds and a.quiet_last == b.quiet_last
        # one window's rows (lens's case: grouped through the plan's flow order, no sort)
        one = s.select(s.rows["window"] == s.rows["window"].min())
        a, b = Tracker(hosts, nic_host), Tracker(hosts, nic_host)
        a.add(clock_records(one, flows), quiet)
        b.add_summary(one, flows, quiet)
        assert len(b.chunks) == 1 and b.chunks[0].size >= 2
        assert np.array_equal(np.sort(a.chunks[0], order=["src_nic", "dst_nic", "t_send"]),
                              np.sort(b.chunks[0], order=["src_nic", "dst_nic", "t_send"]))
    # a window with nothing to learn from (every host quiet; no answered row): nothing kept, no
    # error (lens's registered lab: IndexError in the first windows, the coordinator ended)
    b = Tracker(hosts, nic_host)
    b.add_summary(one, flows, set(hosts))
    none = dataclasses.replace(one, rows=one.rows.copy())
    none.rows["answered"] = 0
    b.add_summary(none, flows)
    assert not b.chunks


def test_the_clock_learns_nothing_from_a_quiet_host(fabric, mode):
    """Overloaded or not running in the window: its timestamps are not trusted (a stalled
    responder stamps its echo late, a falsely tight bound)."""
    syn = run(fabric, seed=7, duration=2.0)
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host)
    tr.add(syn.probes, quiet={"node3"})
    kept = np.concatenate(list(tr.chunks))
    h3 = [i for i, h in enumerate(nic_host) if hosts[h] == "node3"]
    assert kept.size and not np.isin(kept["src_nic"], h3).any()
    assert not np.isin(kept["dst_nic"], h3).any()


def test_no_clock_finding_for_a_host_quiet_within_the_fits_horizon(fabric, mode):
    syn = run(fabric, seed=7, duration=2.0)
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host, horizon_s=4.0)
    tr.history["node3"].append((0.5, 800.0, 480.0))
    tr.history["node3"].append((1.0, 900.0, 500.0))  # drift ~500 ppm, two fits: beyond the bound
    assert [f["element"]["id"] for f in tr.findings(1.0)] == ["node3"]
    tr.add(syn.probes, quiet={"node3"})
    for _ in range(3):  # quiet 4 windows ago at most: still within the horizon
        tr.add(syn.probes)
        assert tr.findings(1.0) == []
    tr.add(syn.probes)
    assert [f["element"]["id"] for f in tr.findings(1.0)] == ["node3"]


def test_a_drift_beyond_the_bound_in_one_fit_only_is_the_fits_error(fabric, mode):
    hosts, nic_host = _hosts(fabric)
    tr = ClockTracker(hosts, nic_host)
    tr.history["node3"].append((1.0, 900.0, -1000.0))  # one odd fit (a thin start)
    assert tr.findings(1.0) == []
    tr.history["node3"].append((2.0, 910.0, 3.0))  # the next puts it right
    assert tr.findings(2.0) == []
    tr.history["node3"].append((3.0, 910.0, 600.0))
    tr.history["node3"].append((4.0, 915.0, 620.0))  # two fits in a row: the host's clock
    assert [f["element"]["id"] for f in tr.findings(4.0)] == ["node3"]


def _health_until(hosts: list[str], ends_ns: dict[str, int]) -> dict:
    """Each host's health table as the coordinator holds it at a window's close: quarter-second
    rows up to `ends_ns[host]` (its last batch in)."""
    from fleetctl.mesh.health import HEALTH_FIELDS

    out = {}
    for h in hosts:
        end = ends_ns[h]
        rows = []
        for i in range(8, 0, -1):
            row = dict.fromkeys(HEALTH_FIELDS, 0)
            row.update(t_start_ns=end - i * 250_000_000, duration_s=0.25, sent=10)
            rows.append([row[f] for f in HEALTH_FIELDS])
        out[h] = {"fields": list(HEALTH_FIELDS), "windows": rows}
    return out


def test_a_responders_late_answer_log_blames_no_other_direction(fabric, mode):
    # CI saw it on the 8-host lab: 2 % loss on spine1->leaf2, and spine1->leaf1 blamed too, once.
    # The responders on leaf1 (whose answers of leaf2's probes return over spine1->leaf2) had
    # their last batch late: their answer counts for the window's tail were not in, so probes
    # lost on the way back looked lost on the way out, over leaf2->spine1->leaf1.
    topo, _ = fabric
    syn = run(fabric, [Fault("spine1->leaf2", "loss", 0.1)], duration=5.0)
    late = ["node1", "node2"]  # leaf1's hosts
    late_i = [topo.hosts.index(h) for h in late]
    an = WindowAnalyzer(topo, syn.paths, syn.flows, echo_timeout_s=0.2)
    named, pending = [], []
    for a, b, probes in windows(syn):
        probes = probes.copy()
        b_ns = int(round(b * 1e9))
        # their last batch in ended 0.3 s before the window's end: their log is complete for
        # probes sent up to 0.5 s before it (one echo timeout earlier)
        to_late = np.isin(syn.nic_host[probes["dst_nic"]], late_i)
        tail = to_late & (probes["t_send"] >= b_ns - 500_000_000) & (probes["lost"] == 2)
        probes["lost"][tail] = 1  # the answer never logged: looks lost on the way out
        ends = {h: b_ns + (-300_000_000 if h in late else 300_000_000) for h in topo.hosts}
        res = an.analyze(probes, a, b, _health_until(topo.hosts, ends), set())
        named += [[f["element"].get("direction") or f["element"]["id"]] +
                  f["evidence"].get("indistinguishable_from", []) for f in res.findings]
        pending.append((res.log_pending, res.loss_unknown > 0))
    # with two leaves, leaf1->spine1 and spine1->leaf2 carry the same paths: twins, either named
    assert len(named) >= len(pending) - 1 and all("spine1->leaf2" in n for n in named), named
    assert sum(p == (late, True) for p in pending) >= len(pending) - 1, pending


def test_a_fit_that_moves_a_hosts_estimate_relearns_its_paths_baselines():
    """An early fit misjudged a host's clock by 30 us (the 512-host harness): the paths' delay
    baselines learnt then hold that error, and a baseline learns only from healthy windows.
    The next fit's move is reported per host, against its component's median move (a new
    reference host moves every offset alike), and those paths are learnt again."""
    from fleetctl.analysis.clock import ClockModel
    from fleetctl.lens.baseline import PathBaselines

    hosts = ["a", "b", "c", "d"]
    tr = ClockTracker(hosts, np.array([0, 1, 2, 3]))

    def model(offsets):
        return ClockModel(hosts, np.array(offsets), np.zeros(4), np.zeros(4, dtype=int), [],
                          np.zeros(0))
    tr._compare(model([0.0, 1e-3, 2e-3, 3e-3]), 0, 10.0)
    assert tr.moved == {}
    tr.fit = (model([0.0, 1e-3, 2.5e-3, 3e-3]), 0)
    # against a host's first fit, which no window used (_for_windows): no move reported
    tr._compare(model([0.0, 1e-3, 2e-3, 3e-3]), 0, 10.0)
    assert tr.moved == {}
    tr.fit = (model([0.0, 1e-3, 2e-3, 3e-3]), 0)
    # every offset 100 us later (a reference change would do that) and c 30 us on top of it
    tr._compare(model([100e-6, 1.1e-3, 2.13e-3, 3.1e-3]), 0, 10.0)
    assert tr.moved == {"c": 30.0}
    b = PathBaselines(3, warmup=1)
    b.update(np.array([10.0, 20.0, 30.0]), np.array([True, True, True]))
    assert b.forget(np.array([False, True, False])) == 1
    assert np.isnan(b.current()[1]) and b.current()[0] == 10.0 and b.count[1] == 0


def test_a_large_plan_reports_element_delays_every_nth_window(fabric, monkeypatch):
    """Element delay percentiles are reported, not judged: a plan with millions of incidence
    entries computes them every n-th window and says which window the reported ones are from;
    loss and probes are per window always."""
    import fleetctl.lens.window as window_mod

    syn = run(fabric, duration=4.0)
    topo, _ = fabric
    every = WindowAnalyzer(topo, syn.paths, syn.flows)
    monkeypatch.setattr(window_mod, "DELAY_EVERY_ENTRIES", 1)  # this small plan counts as large
    sparse = WindowAnalyzer(topo, syn.paths, syn.flows)
    assert every.delay_every == 1 and sparse.delay_every > 1
    sparse.delay_every = 2
    for i, (a, b, probes) in enumerate(windows(syn)):
        full = {r["id"] + r.get("direction", ""): r for r in every.analyze(probes, a, b, {}, set()).elements}
        rows = sparse.analyze(probes, a, b, {}, set()).elements
        for r in rows:
            f = full[r["id"] + r.get("direction", "")]
            assert (r["loss_pct"], r["probes"], r["lost"]) == (f["loss_pct"], f["probes"], f["lost"])
            if i % 2 == 0:
                assert "delay_window_end" not in r and r["delay_p50_us"] == f["delay_p50_us"]
            else:
                assert r["delay_window_end"] == b - 1.0


def test_a_blind_host_holds_its_own_places_only(fabric):
    """A window with node4's agent not running cannot call node4's NICs, cables or host good
    (nothing crossing them was judged), but a spine link still crosses enough judged probes:
    one agent set aside must not hold every event open (at a thousand hosts one always is)."""
    topo, _ = fabric
    syn = run(fabric, duration=3.0)
    an, res = analyse(fabric, syn, blind={"node4"})
    r = res[1]
    assert r.coverage is not None and r.set_aside > 0
    keys = {topo.location({"type": el.type, "id": el.id}) for el in topo.elements}
    held = an.unjudged(r, keys)
    assert "host:node4" in held and "nic:node4:eth0" in held and "nic:node4:eth1" in held
    assert not any("node1" in k or "spine" in k for k in held), sorted(held)
    assert an.unjudged(r, ["link:no-such-place"]) == {"link:no-such-place"}  # unknown: held
    _an, clean = analyse(fabric, syn)
    assert clean[1].coverage is None and an.unjudged(clean[1], keys) == set()
    clean[1].probes = 0
    assert an.unjudged(clean[1], keys) == keys  # a window without probes judges nothing


def test_the_first_fits_cost_does_not_put_off_the_fit_that_confirms_it():
    """A first fit over a few seconds of bounds can cost ten times a later one; the refit
    period stretches with a fit's cost only once a second fit has confirmed the model."""
    from fleetctl.lens.clocktrack import FIT_SHARE_INVERSE, ClockTracker

    tracker = ClockTracker(["a", "b"], np.array([0, 1]), refit_s=5.0)
    tracker.fit_cost_s = 12.8
    tracker.fit_seq = 1
    assert tracker.refit_period_s() == 5.0
    tracker.fit_seq = 2
    assert tracker.refit_period_s() == FIT_SHARE_INVERSE * 12.8
    tracker.fit_cost_s = 0.5
    assert tracker.refit_period_s() == 5.0
