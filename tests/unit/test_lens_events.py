"""The lens event state machine: hysteresis, escalation, flapping, resume (fleetctl.lens.events)."""

from __future__ import annotations

import json

from fleetctl.lens.eventlog import EventLog, problem, read_events
from fleetctl.lens.events import EventRules, EventTracker

LINK = {"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2"}
NIC = {"type": "nic", "id": "node3:eth1"}
CABLE = {"type": "link", "id": "node3:eth1--leaf2", "direction": "leaf2->node3:eth1"}


def finding(el=LINK, metric="loss", severity="major", confidence=0.9):
    return {"element": dict(el), "metric": metric, "severity": severity,
            "confidence": confidence, "evidence": {"paths_bad": 4}}


def feed(tracker, pattern, el=LINK, metric="loss", t0=1000.0, w=1.0):
    """pattern: a string of 'B' (bad) and '.' (good) windows; all records returned."""
    out = []
    for i, c in enumerate(pattern):
        a = t0 + i * w
        out += tracker.window(a, a + w, [finding(el, metric)] if c == "B" else [], now=a + w)
    return out


def test_opens_after_k_and_closes_after_m():
    tr = EventTracker(EventRules(k_open=2, m_close=3))
    recs = feed(tr, "B")
    assert recs == []
    recs = feed(tr, "BBBB..", t0=1001.0)
    assert [r["kind"] for r in recs] == ["open"]
    assert tr.open_events()[0]["state"] == "open"
    recs = feed(tr, ".", t0=1007.0)
    assert [r["kind"] for r in recs] == ["close"]
    assert recs[0]["state"] == "closed" and not tr.open_events()
    for r in recs:
        assert problem(r) is None  # a valid record of the event log format


def test_single_bad_windows_never_open():
    tr = EventTracker(EventRules(k_open=2, m_close=3, flap_count=3, flap_window_s=30))
    assert feed(tr, ("B" + "." * 15) * 4) == []  # isolated, and never 3 within 30 s


def test_down_opens_at_once_and_escalates_one_event():
    tr = EventTracker(EventRules(k_open=2, k_open_down=1, m_close=3))
    recs = feed(tr, "BB", metric="loss")
    recs += feed(tr, "B", metric="down", t0=1002.0)
    assert [r["kind"] for r in recs] == ["open", "update"]
    assert len({r["id"] for r in recs}) == 1
    assert recs[-1]["metric"] == "down" and recs[-1]["severity"] == "critical"


def test_nic_and_its_cable_are_one_location():
    from fleetctl.model.fabric import Topology

    topo = Topology.build("t", [(NIC["id"], NIC["id"].split(":")[0])], {"leaf2": 1},
                          [(CABLE["id"], NIC["id"], "leaf2")])
    tr = EventTracker(EventRules(k_open=1, k_open_down=1), location=topo.location)
    recs = tr.window(0, 1, [finding(CABLE, "down")], now=1)
    recs += tr.window(1, 2, [finding(NIC, "down")], now=2)
    assert [r["kind"] for r in recs] == ["open", "update"]
    assert recs[-1]["element"]["type"] == "nic"  # the larger element wins


def test_flapping_is_one_event_with_period_and_count():
    tr = EventTracker(EventRules(k_open=2, k_open_down=2, m_close=3, flap_count=3,
                                 flap_window_s=30))
    recs = feed(tr, "B." * 10, metric="down")  # bad for 1 s every 2 s: K=2 is never reached
    kinds = [r["kind"] for r in recs]
    assert kinds[0] == "open" and kinds.count("open") == 1
    ev = recs[0]
    assert ev["metric"] == "flapping" and ev["flap"]["count"] >= 3
    assert abs(ev["flap"]["period_s"] - 2.0) < 1e-6
    # clearing: it closes only after m_close good windows and three periods
    recs = feed(tr, "." * 10, t0=1020.0)
    assert [r["kind"] for r in recs] == ["close"]
    closed_at = recs[0]["time"]
    assert closed_at >= "1970-01-01T00:17:04"  # 1018 + 3 periods: not before


def test_silent_windows_hold_streaks():
    tr = EventTracker(EventRules(k_open=1, m_close=2))
    assert [r["kind"] for r in feed(tr, "B")] == ["open"]
    key = tr.location(LINK)
    for i in range(5):  # an agent restarting: the location is neither good nor bad
        assert tr.window(1001 + i, 1002 + i, [], silent={key}, now=1002 + i) == []
    assert tr.open_events()


def test_state_round_trip_and_adopt_from_log(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    tr = EventTracker(EventRules(k_open=1, m_close=2))
    for r in feed(tr, "BB"):
        log.append(r)
    state = json.loads(json.dumps(tr.to_state()))
    # resumed from its saved state: the fault persists, no second open
    tr2 = EventTracker(EventRules(k_open=1, m_close=2))
    tr2.load_state(state)
    assert feed(tr2, "BBB", t0=1002.0) == []
    # state lost (killed before saving): the log's open event is adopted, then closed once
    tr3 = EventTracker(EventRules(k_open=1, m_close=2))
    tr3.adopt(read_events(tmp_path / "events.jsonl", open_only=True))
    assert feed(tr3, "B", t0=1002.0) == []
    recs = feed(tr3, "..", t0=1003.0)
    assert [r["kind"] for r in recs] == ["close"]
    for r in recs:
        log.append(r)
    events = read_events(tmp_path / "events.jsonl")
    assert len(events) == 1 and events[0]["state"] == "closed"
    new = feed(tr3, "B", t0=1010.0)
    assert new and new[0]["id"] != events[0]["id"]  # ids never collide after adopt


def test_memory_is_bounded_for_transient_locations():
    tr = EventTracker(EventRules(k_open=5, flap_window_s=10))
    for i in range(200):
        el = {"type": "link", "id": f"l{i}", "direction": "a->b"}
        tr.window(i, i + 1, [finding(el)], now=i + 1)
    assert len(tr.loc) <= 12


def test_jobs_are_attached():
    tr = EventTracker(EventRules(k_open=1), jobs_for=lambda el: [
        {"job_id": "12", "user": "alice", "nodes": "node[1-2]", "partition": "debug"}])
    recs = feed(tr, "B")
    assert recs[0]["jobs"][0]["job_id"] == "12"


def test_a_flap_faster_than_the_window_is_seen_within_windows():
    """Down 1 s, up 1 s, windows of 1 s out of phase: every window is bad; the down starts the
    window analysis found inside them show the rhythm."""
    tr = EventTracker(EventRules(k_open=2, m_close=3, flap_count=3, flap_window_s=30))
    recs = []
    for i in range(8):
        f = finding(NIC, "loss")
        if i % 2 == 0:
            f["down_starts"] = [1000.0 + i + 0.4]
        recs += tr.window(1000.0 + i, 1001.0 + i, [f], now=1001.0 + i)
    assert [r["kind"] for r in recs] == ["open", "update"]
    assert recs[-1]["metric"] == "flapping" and recs[-1]["flap"]["period_s"] == 2.0
    assert "down_starts" not in recs[-1]["evidence"]


def test_defaults_open_loss_at_once_and_gray_delay_after_two():
    tr = EventTracker()
    assert [r["kind"] for r in feed(tr, "B", metric="loss")] == ["open"]
    gray = {"type": "link", "id": "leaf2--spine1", "direction": "spine1->leaf2"}
    assert feed(tr, "B", el=gray, metric="delay", t0=1001.0) == []
    assert [r["kind"] for r in feed(tr, "B", el=gray, metric="delay", t0=1002.0)] == ["open"]


def test_a_finding_an_open_event_explains_opens_nothing_while_it_is_open():
    """CI saw it twice: a 2 % loss on leaf2--spine1 was open, and windows named leaf1->spine1 (the
    twin of spine1->leaf2 but for the loop probes): a second event, first after one window, then
    (with a 2-window persistence rule) after two. The coordinator now tests the twin on its own
    paths away from the event (`outside_open_event`): nothing there, no event however long."""
    tr = EventTracker()  # loss opens at once...
    assert [r["kind"] for r in feed(tr, "B")] == ["open"]
    twin = {"type": "link", "id": "leaf1--spine1", "direction": "leaf1->spine1"}

    def explained(t):
        f = finding(twin)
        f["evidence"]["explained_by_open_event"] = True
        f["evidence"]["outside_open_event"] = {"paths": 4, "probes": 160, "lost": 0,
                                               "p_value": 1.0, "alpha": 1e-6}
        return tr.window(t, t + 1, [finding(), f], now=t + 1)

    for t in range(1001, 1021):  # ... but not when an open event explains its paths
        assert explained(float(t)) == []
    tr.window(1021.0, 1022.0, [], now=1022.0)
    tr.window(1022.0, 1023.0, [], now=1023.0)
    assert [r["kind"] for r in tr.window(1023.0, 1024.0, [], now=1024.0)] == ["close"]
    f = finding(twin)  # the event closed: the same place is judged as any other
    assert [(r["kind"], r["element"]["id"]) for r in tr.window(1024.0, 1025.0, [f], now=1025.0)] \
        == [("open", "leaf1--spine1")]


def test_an_open_fault_seen_under_another_name_is_not_judged_good():
    """The 8-host lab, 2026-12-05: a steady 5 % loss on leaf1--spine1 read good for one window in
    its 27th second and bad again the next: a second bad start, and three such in
    lens.flap_window_s make the event `flapping` (it then closes only 3 periods after its last
    start). A window whose only finding the open event explains did so. The place the held
    finding names is neither good nor bad that window: no bad start, no step toward closing."""
    tr = EventTracker()
    assert [r["kind"] for r in feed(tr, "B")] == ["open"]
    twin = {"type": "link", "id": "leaf2--spine2", "direction": "leaf2->spine2"}
    key = "link:" + LINK["id"]
    for t in (1001.0, 1005.0, 1009.0):  # 3 windows in 30 s that name only the twin
        held = finding(twin)
        held["evidence"].update(explained_by_open_event=key, outside_open_event={
            "paths": 4, "probes": 160, "lost": 0, "p_value": 1.0, "alpha": 1e-6})
        assert tr.window(t, t + 1, [held], now=t + 1) == []
        assert tr.loc[key]["good"] == 0
        assert feed(tr, "BBB", t0=t + 1) == []
    assert tr.loc[key]["episodes"] == [1000.0]
    assert [(e["metric"], e["flap"]) for e in tr.open_events()] == [("loss", None)]
    # the old truthy mark names no place: the open event's place is judged as before
    held = finding(twin)
    held["evidence"]["explained_by_open_event"] = True
    tr.window(1013.0, 1014.0, [held], now=1014.0)
    assert tr.loc[key]["good"] == 1


def test_a_finding_a_stronger_one_of_its_window_explains_opens_nothing_that_window():
    """CI's lab, 2026-12-05: the partial first window of a 5 % loss on a cable named the cable
    one way and a second place, and both opened. The second, marked by the coordinator as
    explained by the stronger finding of its window, waits; the stronger opens, alone. Unmarked
    (nothing explains it any more), the place opens as any other."""
    tr = EventTracker()
    other = {"type": "link", "id": "leaf2--spine2", "direction": "leaf2->spine2"}
    held = finding(other)
    held["evidence"].update(explained_by_window_finding="link:leaf1--spine2",
                            outside_window_finding={"paths": 4, "probes": 160, "lost": 0,
                                                    "p_value": 1.0, "alpha": 1e-6})
    out = tr.window(1000.0, 1001.0, [finding(), held], now=1001.0)
    assert [(r["kind"], r["element"]["id"]) for r in out] == [("open", LINK["id"])]
    out = tr.window(1001.0, 1002.0, [finding(other)], now=1002.0)
    assert ("open", "leaf2--spine2") in [(r["kind"], r["element"]["id"]) for r in out]


def test_a_merge_explained_finding_must_persist_to_open():
    """A merge's explained finding (shard.py: a link of a switch with an open merged event, no test
    on its other paths) opens after k_open_gray windows in a row."""
    tr = EventTracker()
    assert [r["kind"] for r in feed(tr, "B")] == ["open"]
    twin = {"type": "link", "id": "leaf1--spine1", "direction": "leaf1->spine1"}

    def explained(t):
        f = finding(twin)
        f["evidence"]["explained_by_open_event"] = True
        return tr.window(t, t + 1, [finding(), f], now=t + 1)

    assert explained(1001.0) == []
    assert tr.window(1002.0, 1003.0, [finding()], now=1003.0) == []
    for t in (1003.0, 1005.0, 1007.0):  # not as a flap either, one window at a time
        assert explained(t) == []
        assert tr.window(t + 1, t + 2, [finding()], now=t + 2) == []
    recs = explained(1009.0) + explained(1010.0)  # it persists: a fault of its own
    assert [(r["kind"], r["element"]["id"]) for r in recs] == [("open", "leaf1--spine1")]


def test_a_finer_element_inside_the_open_event_refines_it():
    """CI saw it (2026-12-02): 2 % loss on leaf2--spine1, one window named switch spine1 (its
    event opened), the next named the cable. One fault: the event moves to the cable."""
    tr = EventTracker()
    spine = {"type": "switch", "id": "spine1"}
    opened = feed(tr, "B", el=spine)
    assert [r["kind"] for r in opened] == ["open"]
    cable = {"type": "link", "id": "leaf2--spine1", "direction": "both"}
    f = finding(cable)
    f["evidence"]["explained_by_open_event"] = True
    f["refines"] = "switch:spine1"
    recs = tr.window(1001.0, 1002.0, [f], now=1002.0)
    assert [(r["kind"], r["id"], r["element"]["id"]) for r in recs] == \
        [("update", opened[0]["id"], "leaf2--spine1")]
    assert recs[0]["refined_from"] == spine and problem(recs[0]) is None
    assert [e["element"]["id"] for e in tr.open_events()] == ["leaf2--spine1"]
    recs = feed(tr, "B", el=cable, t0=1002.0) + feed(tr, "...", t0=1003.0)
    assert [(r["kind"], r["id"]) for r in recs] == [("close", opened[0]["id"])]
    assert not tr.open_events()


def test_refinement_never_coarsens_nor_takes_a_flap():
    spine = {"type": "switch", "id": "spine1"}
    tr = EventTracker()
    feed(tr, "B")  # an open event on LINK
    f = finding(spine)
    f["evidence"]["explained_by_open_event"] = True
    f["refines"] = "link:" + LINK["id"]  # a coarser element never takes a finer event's place
    assert tr.window(1001.0, 1002.0, [f, finding()], now=1002.0) == []
    assert [e["element"]["id"] for e in tr.open_events()] == [LINK["id"]]
    f2 = finding(LINK)
    f2["refines"] = "switch:nowhere"  # no open event there: an ordinary finding
    assert tr.window(1002.0, 1003.0, [f2], now=1003.0) == []
