"""The lens event log: validation, last record wins, rotation, concurrent writers, hostile lines,
follow across rotation and truncation."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.errors import DataError
from fleetctl.lens.eventlog import (MAX_LINE, EventLog, follow, log_files, new_event_id,
                                    read_events, read_log, utc_iso)


def record(eid: str | None = None, kind: str = "open", **over) -> dict:
    """A valid record; `time` is left to append() unless given."""
    rec = {"v": 1, "id": eid or new_event_id(), "kind": kind,
           "state": "closed" if kind == "close" else "open",
           "element": {"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2"},
           "metric": "loss", "severity": "critical", "confidence": 0.9,
           "evidence": {"loss_pct": 2.5}, "first_seen": "2026-12-01T06:00:00.000Z",
           "last_seen": "2026-12-01T06:00:05.000Z", "flap": None,
           "jobs": [{"job_id": "12", "user": "alice", "nodes": "node[1-2]", "partition": "debug"}]}
    rec.update(over)
    return rec


def test_append_and_current_view(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    a, b = "ev-20261201T060000-0001", "ev-20261201T060001-0002"
    log.append(record(a))
    log.append(record(b, severity="warning"))
    log.append(record(a, "update", severity="warning", confidence=0.5))
    log.append(record(b, "close"))
    view = read_events(tmp_path / "events.jsonl")
    assert [e["id"] for e in view] == [a, b]
    assert view[0]["kind"] == "update" and view[0]["confidence"] == 0.5
    assert view[1]["state"] == "closed"
    assert [e["id"] for e in read_events(log.path, open_only=True)] == [a]
    lines = (tmp_path / "events.jsonl").read_bytes().splitlines()
    assert len(lines) == 4 and all(json.loads(x)["time"].endswith("Z") for x in lines)


def test_since_filters_on_the_last_record(tmp_path):
    log = EventLog(tmp_path / "e.jsonl")
    log.append(record("ev-20261201T060000-0001", time="2026-12-01T06:00:00.000Z"))
    log.append(record("ev-20261201T060000-0002", time="2026-12-01T07:00:00.000Z"))
    log.append(record("ev-20261201T060000-0001", "update", time="2026-12-01T08:00:00.000Z"))
    ids = [e["id"] for e in read_events(log.path, since="2026-12-01T07:30:00Z")]
    assert ids == ["ev-20261201T060000-0001"]
    assert len(read_events(log.path, since=0)) == 2


@pytest.mark.parametrize("bad", [
    {"kind": "opened"}, {"state": "closed"}, {"v": 2}, {"id": "ev-1"}, {"confidence": 1.5},
    {"confidence": True}, {"element": {"type": "cable", "id": "x"}}, {"element": {"type": "link"}},
    {"first_seen": "yesterday"}, {"flap": {"count": -1, "period_s": 3}}, {"jobs": "12"},
    {"evidence": []}, {"metric": "jitter"}, {"severity": "fatal"},
    {"evidence": {"blob": "x" * MAX_LINE}},
    {"jobs": [{"job_id": 12, "user": "alice"}]}, {"jobs": [{"user": "alice"}]},
    {"jobs": [{"job_id": ""}]}, {"jobs": [{"job_id": "1", "nested": {"a": "b"}}]},
])
def test_append_refuses_invalid_records(tmp_path, bad):
    log = EventLog(tmp_path / "e.jsonl")
    with pytest.raises(DataError):
        log.append(record(**bad))
    assert not (tmp_path / "e.jsonl").exists() or not (tmp_path / "e.jsonl").read_bytes()


def test_hostile_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "e.jsonl"
    good = record("ev-20261201T060000-0001", time=utc_iso())
    junk = [b"not json", b"[" * 50_000, b"\xff\xfe garbage", json.dumps([1, 2]).encode(),
            json.dumps(record(confidence="high", time=utc_iso())).encode(), b"x" * (3 * MAX_LINE),
            json.dumps(record(v=7)).encode(), b'{"v": 1, "confidence": NaN}']
    with open(path, "wb") as fh:
        for j in junk:
            fh.write(j + b"\n")
        fh.write(json.dumps(good).encode() + b"\n")
        fh.write(b'{"v": 1, "id": "ev-2026')  # a crashed writer's partial last line
    view = read_log(path)
    assert list(view.events) == [good["id"]]
    assert view.skipped == len(junk) + 1 and view.reasons["too long"] == 1
    # the next writer ends the partial line: its own record stays whole
    EventLog(path).append(record("ev-20261201T060000-0002"))
    view = read_log(path)
    assert list(view.events) == [good["id"], "ev-20261201T060000-0002"]
    assert view.reasons["partial"] == 0 and view.skipped == len(junk) + 1


def test_rotation_keeps_n_files_and_reads_across_them(tmp_path):
    log = EventLog(tmp_path / "e.jsonl", max_bytes=MAX_LINE, keep=2)
    ids = [f"ev-20261201T060000-{i:04d}" for i in range(300)]
    for eid in ids:
        log.append(record(eid, evidence={"pad": "p" * 400}))
    files = log_files(log.path)
    assert [f.name for f in files] == ["e.jsonl.2", "e.jsonl.1", "e.jsonl"]
    assert all(f.stat().st_size <= MAX_LINE for f in files)
    seen = [e["id"] for e in read_events(log.path)]
    assert seen == ids[-len(seen):] and 0 < len(seen) < len(ids)  # the oldest file went


def _writer(path: str, start: int, n: int) -> None:
    log = EventLog(path, max_bytes=256 * 1024, keep=50)
    for i in range(start, start + n):
        log.append(record(f"ev-20261201T060000-{i:04d}", evidence={"pad": "q" * 2000}))


def test_concurrent_writers_never_interleave(tmp_path):
    path = str(tmp_path / "e.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, k * 100, 100)) for k in range(4)]
    threads = [threading.Thread(target=_writer, args=(path, 400 + k * 100, 100)) for k in range(2)]
    for p in procs + threads:
        p.start()
    for p in procs + threads:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    view = read_log(path)
    assert view.skipped == 0 and len(view.events) == 600


def test_follow_sees_appends_rotation_and_truncation(tmp_path):
    path = tmp_path / "e.jsonl"
    log = EventLog(path, max_bytes=MAX_LINE, keep=10)  # no file deleted while the follower catches up
    log.append(record("ev-20261201T050000-0000"))  # before following: not seen
    stop = threading.Event()
    got: list[str] = []
    follower = follow(path, poll_s=0.02, stop=stop)

    def consume():
        for rec in follower:
            got.append(rec["id"])

    t = threading.Thread(target=consume, daemon=True)  # (a failure must not keep pytest from ending)
    t.start()
    try:
        time.sleep(0.2)
        ids = [f"ev-20261201T060000-{i:04d}" for i in range(120)]
        for eid in ids:  # ~40 records per file: two rotations while following
            log.append(record(eid, evidence={"pad": "r" * 1500}))
        _wait(lambda: len(got) >= len(ids))
        assert got == ids
        with open(path, "r+b") as fh:  # truncated in place (an operator's `> events.jsonl`)
            fh.truncate(0)
        time.sleep(0.1)
        with open(path, "ab") as fh:
            fh.write(b"garbage\n")
        log.append(record("ev-20261201T070000-0001"))
        _wait(lambda: got[-1] == "ev-20261201T070000-0001")
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive() and follower.skipped == 1


def test_follow_from_start_reads_rotated_files_first(tmp_path):
    log = EventLog(tmp_path / "e.jsonl", max_bytes=MAX_LINE, keep=5)
    ids = [f"ev-20261201T060000-{i:04d}" for i in range(60)]
    for eid in ids:
        log.append(record(eid, evidence={"pad": "s" * 1500}))
    assert len(log_files(log.path)) > 1
    got = [r["id"] for r in follow(log.path, from_start=True, poll_s=0.01, stop=lambda: True)]
    assert got == ids


def test_helpers():
    assert utc_iso(0) == "1970-01-01T00:00:00.000Z"
    assert new_event_id(0).startswith("ev-19700101T000000-")
    assert read_events("/nonexistent/events.jsonl") == []
    with pytest.raises(DataError):  # a FIFO or directory is never a log
        EventLog(os.devnull).append(record())


def _wait(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_a_planted_symlink_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "events.jsonl").symlink_to(victim)
    with pytest.raises(DataError, match="cannot append"):
        EventLog(tmp_path / "events.jsonl").append(record())
    assert victim.read_text() == "precious\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300) | st.text(max_size=200).map(str.encode), max_size=20))
def test_any_bytes_read_without_a_traceback(tmp_path_factory, chunks):
    path = tmp_path_factory.mktemp("fuzz") / "e.jsonl"
    data = b"\n".join(chunks)
    path.write_bytes(data)
    view = read_log(path)
    assert view.records + view.skipped <= data.count(b"\n") + 1
