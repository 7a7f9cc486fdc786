"""Hang and straggler signals from ranks' progress files (fleetctl.recovery), with the real writer
(Progress, its thread included), the real event log and act's reading of the events."""

from __future__ import annotations

import json
import time

import pytest

from fleetctl.act.detections import from_lens_event
from fleetctl.lens.eventlog import EventLog, problem, read_events
from fleetctl.recovery.progress import Progress
from fleetctl.recovery.signals import Thresholds, judge, read_ranks
from fleetctl.recovery.watch import JobWatcher

T0 = 1_800_000_000.0


def write(tmp_path, rank, *, node=None, it=100, time_=T0, progress=T0, phase="compute", iteration_s=0.1,
          compute_s=0.05, samples=32):
    d = tmp_path / "42"
    d.mkdir(exist_ok=True)
    doc = {"v": 1, "job": "42", "rank": rank, "node": node or f"node{rank + 1}", "pid": 1000 + rank,
           "iteration": it, "time": time_, "started": T0 - 100, "progress_time": progress, "phase": phase,
           "phase_since": progress, "iteration_s": iteration_s, "compute_s": compute_s, "samples": samples}
    (d / f"rank-{rank}.json").write_text(json.dumps(doc))


def signals(tmp_path, now, **th):
    ranks, skipped = read_ranks(str(tmp_path), "42")
    return [(s.metric, s.rank, s.node) for s in judge(ranks, now, Thresholds(**th))], skipped


def test_a_clean_job_and_a_starting_job_raise_nothing(tmp_path):
    for r in range(4):
        write(tmp_path, r, compute_s=0.05 + 0.002 * r)
    assert signals(tmp_path, T0 + 1) == ([], 0)
    for r in range(4):  # no iteration yet: a long import or rendezvous is not a hang
        write(tmp_path, r, it=-1, samples=0, iteration_s=None, compute_s=None, progress=T0 - 600)
    assert signals(tmp_path, T0 + 1) == ([], 0)


def test_a_killed_rank_is_the_hang_not_the_ranks_waiting_for_it(tmp_path):
    # threshold: 3 x 0.1 s + 10 s = 10.3 s; rank 2's process stopped writing 20 s ago
    for r in range(4):
        write(tmp_path, r, time_=T0 + 19 if r != 2 else T0, progress=T0, phase="collective")
    assert signals(tmp_path, T0 + 5)[0] == []  # within the threshold
    assert signals(tmp_path, T0 + 20)[0] == [("hang", 2, "node3")]


def test_a_rank_stuck_in_its_own_work_is_named(tmp_path):
    for r in range(4):
        write(tmp_path, r, time_=T0 + 29, phase="compute" if r == 1 else "collective")
    assert signals(tmp_path, T0 + 30)[0] == [("hang", 1, "node2")]


def test_no_rank_standing_out_waits_three_thresholds_and_then_says_the_culprit_is_unknown(tmp_path):
    for r in range(4):
        write(tmp_path, r, time_=T0 + 59, phase="collective")
    assert signals(tmp_path, T0 + 20)[0] == []  # a slow collective, a checkpoint: not yet
    ranks, _ = read_ranks(str(tmp_path), "42")
    [sig] = judge(ranks, T0 + 40)
    assert sig.rank is None and sig.evidence["culprit_unknown"]
    assert "all 4 ranks wait in the collective" in sig.message


def test_a_straggler_is_named_from_its_compute_time_not_its_iteration_time(tmp_path):
    for r in range(8):  # synchronous training: every rank's iteration takes as long as the slowest's
        write(tmp_path, r, iteration_s=0.2, compute_s=0.13 if r == 5 else 0.10 + 0.001 * r)
    assert signals(tmp_path, T0 + 1)[0] == [("straggler", 5, "node6")]
    write(tmp_path, 5, compute_s=0.11)  # 10 % slower: within the job's spread
    assert signals(tmp_path, T0 + 1)[0] == []
    write(tmp_path, 5, compute_s=0.13, samples=4)  # too few iterations to say
    assert signals(tmp_path, T0 + 1)[0] == []


@pytest.mark.parametrize("content", ["{", "[]", json.dumps({"v": 2}), json.dumps({"v": 1, "rank": True}),
                                     "x" * 5000])
def test_hostile_progress_files_are_skipped_and_counted(tmp_path, content):
    write(tmp_path, 0)
    (tmp_path / "42" / "rank-9.json").write_text(content)
    assert signals(tmp_path, T0 + 1) == ([], 1)


def test_a_bad_node_name_or_job_id_is_refused(tmp_path):
    write(tmp_path, 0, node="a;rm -rf")
    assert signals(tmp_path, T0 + 1) == ([], 1)
    from fleetctl.errors import DataError
    with pytest.raises(DataError, match="job id"):
        read_ranks(str(tmp_path), "../etc")


def test_the_writer_keeps_writing_while_the_loop_is_stuck(tmp_path):
    p = Progress(str(tmp_path), "42", 3, node="node4", interval_s=0.05)
    try:
        for it in range(5):
            p.compute_done()
            p.step(it)
        p.compute_done()  # then stuck in the collective
        time.sleep(0.3)
        [r] = read_ranks(str(tmp_path), "42")[0]
        assert (r.rank, r.node, r.iteration, r.phase, r.samples) == (3, "node4", 4, "collective", 5)
        assert time.time() - r.time < 0.2  # still written: alive
    finally:
        p.close()


def test_the_watcher_opens_and_closes_valid_events_that_act_reads(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    clock = {"now": T0 + 20}
    watcher = JobWatcher(str(tmp_path), "42", log, clock=lambda: clock["now"])
    for r in range(4):
        write(tmp_path, r, time_=T0 + 19 if r != 2 else T0, phase="collective")
    [opened] = watcher.poll()
    assert problem(opened) is None and opened["metric"] == "hang" and opened["element"] == {"type": "host",
                                                                                           "id": "node3"}
    assert watcher.poll() == []  # still open: not written again
    det = from_lens_event(opened)
    assert det.nodes == ["node3"] and not det.trouble and det.jobs == [{"job_id": "42"}]
    for r in range(4):  # the job goes on (node3's rank replaced)
        write(tmp_path, r, it=200, time_=T0 + 30, progress=T0 + 30)
    clock["now"] = T0 + 31
    [closed] = watcher.poll()
    assert closed["kind"] == "close" and closed["id"] == opened["id"]
    assert [e["state"] for e in read_events(tmp_path / "events.jsonl")] == ["closed"]


def test_an_unknown_culprit_is_an_event_act_does_not_act_on(tmp_path):
    watcher = JobWatcher(str(tmp_path), "42", None, clock=lambda: T0 + 40)
    for r in range(2):
        write(tmp_path, r, time_=T0 + 39, phase="collective")
    [rec] = watcher.poll()
    assert from_lens_event(rec).trouble


def test_in_a_two_rank_job_a_rank_is_compared_with_the_other():
    # the median of two is their mean: 1.3x the other would be only 13 % above it
    from fleetctl.recovery.signals import Rank, _stragglers
    ranks = [Rank(0, "node1", 1, 100, T0, T0, "compute", 0.2, 0.100, 32),
             Rank(1, "node2", 2, 100, T0, T0, "compute", 0.2, 0.130, 32)]
    [sig] = _stragglers(ranks, Thresholds())
    assert sig.rank == 1 and sig.evidence["slower_pct"] == 30.0


def test_the_mean_compute_spans_twenty_seconds_so_a_short_burst_names_no_straggler():
    """2 ms iterations: 128 of them are a quarter of a second, which a busy node's scheduler
    makes 20 % slower now and then (false straggler events in the lab's clean 30 minutes). The
    mean spans COMPUTE_SPAN_S: a 0.3 s burst 50 % slower moves it under 1 %; a slowdown that
    lasts moves it all the way; 128 iterations at least however slow the loop."""
    from fleetctl.recovery.progress import COMPUTE_SPAN_S, RECENT_COMPUTE, ProgressRecord

    rec = ProgressRecord(0, "node1")
    t = 0.0
    for _ in range(int(COMPUTE_SPAN_S / 0.002)):
        t += 0.002
        rec._add_compute(t, 0.002)
    for _ in range(150):  # a 0.3 s burst
        t += 0.003
        rec._add_compute(t, 0.003)
    assert rec._compute_mean() < 0.002 * 1.01
    for _ in range(int(COMPUTE_SPAN_S / 0.003) + 10):  # slower for a whole span
        t += 0.003
        rec._add_compute(t, 0.003)
    assert rec._compute_mean() == pytest.approx(0.003)
    assert t - rec._compute[0][0] <= COMPUTE_SPAN_S + 0.003
    slow = ProgressRecord(1, "node2")
    for i in range(300):  # 10 s iterations: the last 128, however long they span
        slow._add_compute(10.0 * i, 10.0)
    assert len(slow._compute) == RECENT_COMPUTE and slow._compute_mean() == 10.0
