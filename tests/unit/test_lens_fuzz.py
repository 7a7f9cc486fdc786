"""Property tests over what lens reads (docs/security.md, "lens (issue 20 ...)"): state.json, the
status file and the event log, random and mutated from valid ones. Whatever they hold, lens
resumes and closes windows, `lens status` / `lens events` answer (or say what they refused),
never a traceback; a record the validator accepts always renders. Budgets: tests/support/fuzz.py
(a few seconds each in CI; FLEETCTL_FUZZ=N for N times as many, a longer hunt)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from fleetctl.cli import run
from fleetctl.cli.app import Application
from fleetctl.cli.lens.events import _print_record
from fleetctl.cli.lens.events import _render as _render_events
from fleetctl.cli.lens.status import _open_events as _render_open_events
from fleetctl.errors import DataError
from fleetctl.lens.baseline import PathBaselines
from fleetctl.lens.eventlog import (ELEMENT_TYPES, METRICS, SEVERITIES, decode, encode, problem,
                                    utc_iso)
from fleetctl.lens.events import EventRules, EventTracker
from fleetctl.lens.state import START_DELAY_S, first_window_end, read_state, resume
from tests.cli.test_lens_cli import record
from tests.support.fuzz import byte_mutations, fuzz_settings, json_values, mutations
from tests.unit.test_lens_events import LINK, finding
from tests.unit.test_lens_state import FINGERPRINT, N_PATHS, valid_state

NOW = 1_800_000_000.0
CONTROL = "\x1b\x07\r\u202e"


def as_json(obj) -> bytes:
    return json.dumps(obj).encode()


# ---------------------------------------------------------------- state.json

VALID_STATE = valid_state(last_window_end=NOW - 5, saved=NOW)
state_files = st.one_of(mutations(VALID_STATE).map(as_json), byte_mutations(as_json(VALID_STATE)),
                        json_values.map(as_json), st.binary(max_size=64))


def _resume(directory, content: bytes, window_s: float, now: float = NOW):
    path = directory / "state.json"
    path.write_bytes(content)
    logs: list[str] = []
    tracker, baselines = EventTracker(EventRules(k_open=1)), PathBaselines(N_PATHS)
    state = read_state(path, now=now, log=logs.append)
    resumed = resume(path, state, tracker, baselines, FINGERPRINT, log=logs.append)
    return resumed, tracker, baselines, logs


@fuzz_settings(400)
@given(content=state_files, window_s=st.floats(0.2, 60))
def test_any_state_file_resumes_and_the_loaded_state_runs(tmp_path_factory, content, window_s):
    resumed, tracker, baselines, logs = _resume(tmp_path_factory.mktemp("s"), content, window_s)
    end = first_window_end(NOW, window_s, resumed.last_window_end)
    assert NOW < end <= NOW + START_DELAY_S + 2 * window_s
    assert isinstance(resumed.windows, int) and resumed.windows >= 0
    assert all("\n" not in m for m in logs)  # what was refused: one line each
    # the loaded tracker runs windows: a bad one, then good ones that close what is open
    out = tracker.window(end - window_s, end, [finding(LINK)], now=end)
    for i in range(4):
        out += tracker.window(end + i * window_s, end + (i + 1) * window_s, [], now=end + i)
    for rec in out + tracker.open_events():
        assert problem({**rec, "kind": rec.get("kind", "update"),
                        "time": rec.get("time", rec["last_seen"])}) is None
    json.dumps(tracker.to_state(), allow_nan=False)
    assert baselines.current().shape == (N_PATHS,)


@fuzz_settings(300)
@given(last=json_values | st.floats(-1e7, 1e7), relative=st.booleans(),
       now=st.floats(1e9, 4e9), window_s=st.floats(0.2, 60))
def test_no_last_window_end_stops_windows_from_closing(tmp_path_factory, last, relative, now,
                                                       window_s):
    """A clock stepped either way, or any value at all: the first window ends within the start
    delay plus two windows of now."""
    if relative and isinstance(last, float):
        last = now + last
    doc = {"version": 1, "last_window_end": last}
    try:
        content = as_json(doc)
    except ValueError:
        return
    resumed, *_ = _resume(tmp_path_factory.mktemp("l"), content, window_s, now)
    end = first_window_end(now, window_s, resumed.last_window_end)
    assert now < end <= now + START_DELAY_S + 2 * window_s


# ---------------------------------------------------------------- status file and event log

VALID_RECORD = record(1)
VALID_STATUS = {
    "schema": "fleetctl.lens.status/1", "pid": 4242, "running": True,
    "started": "2026-12-01T06:00:00.000Z", "updated": "2026-12-01T06:10:00.000Z",
    "cluster": "lab", "window_s": 1.0,
    "plan": {"pairs": 12, "design": "full-mesh", "rate_per_pair": 100.0, "hosts": ["node1"]},
    "last_window": {"t_start": "2026-12-01T06:09:59.000Z", "t_end": "2026-12-01T06:10:00.000Z",
                    "probes": 22000, "set_aside": 0, "overloaded": [], "blind": []},
    "elements": [{"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2",
                  "loss_pct": 2.5, "delay_p50_us": 12.0, "delay_p99_us": 30.0, "probes": 400}],
    "agents": [{"host": "node1", "alive": True, "starts": 1, "restarts": 0, "batches": 40,
                "last_error": None, "overloaded": False, "pps": 5600.0, "cpu_pct": 7.5,
                "gaps": []}],
    "clock": [{"host": "node1", "offset_us": 0.0, "drift_ppm": 0.1}],
    "open_events": [VALID_RECORD], "counters": {"windows": 600}}

status_files = st.one_of(mutations(VALID_STATUS).map(as_json),
                         byte_mutations(as_json(VALID_STATUS)), json_values.map(as_json),
                         st.binary(max_size=64))
log_lines = st.one_of(mutations(VALID_RECORD, 2).map(as_json), byte_mutations(as_json(VALID_RECORD)),
                      st.binary(max_size=64))
event_logs = st.lists(log_lines, max_size=5).map(lambda lines: b"\n".join(lines) + b"\n")


@fuzz_settings(100)
@given(status=status_files, log=event_logs, running=st.booleans())
def test_any_status_file_and_event_log_get_an_answer(tmp_path_factory, capsys, status, log,
                                                     running):
    d = tmp_path_factory.mktemp("d")
    (d / "status.json").write_bytes(status)
    (d / "events.jsonl").write_bytes(log)
    with patch("fleetctl.lens.daemon.running_pid", return_value=os.getpid() if running else None):
        for args in (["lens", "status"], ["lens", "events"], ["lens", "events", "--open"]):
            for fmt in ("json", "human"):
                rc = run(["--format", fmt, *args, "--state-dir", str(d), "--no-color"])
                out = capsys.readouterr().out
                assert rc in ((0, 1, 2) if running else (3,)) if args[1] == "status" else rc == 0
                if fmt == "json":
                    doc = json.loads(out)
                    events = doc["open_events"] if args[1] == "status" else doc["events"]
                    assert all(problem(e) is None for e in events)
                else:
                    assert not any(c in out for c in CONTROL)


# ---------------------------------------------------------------- one definition of a valid record

text = st.text(min_size=1, max_size=30) | st.sampled_from(["[/b]", "[red]x", "\x1b[2J", "\u202e"])
times = st.floats(0, 4e9).map(utc_iso)
records = st.fixed_dictionaries({
    "v": st.just(1), "id": st.from_regex(r"ev-[0-9]{8}T[0-9]{6}-[0-9]{4}", fullmatch=True),
    "kind_state": st.sampled_from([("open", "open"), ("update", "open"), ("update", "closed"),
                                   ("close", "closed")]),
    "element": st.fixed_dictionaries({"type": st.sampled_from(ELEMENT_TYPES), "id": text},
                                     optional={"direction": st.none() | st.text(max_size=30)}),
    "metric": st.sampled_from(METRICS), "severity": st.sampled_from(SEVERITIES),
    "confidence": st.floats(0, 1), "evidence": st.dictionaries(st.text(max_size=8), json_values,
                                                               max_size=3),
    "time": times, "first_seen": times, "last_seen": times,
    "flap": st.none() | st.fixed_dictionaries({"count": st.integers(0, 10**9),
                                               "period_s": st.floats(0, 1e9)}),
    "jobs": st.lists(st.fixed_dictionaries({"job_id": text}, optional={
        "user": st.text(max_size=20), "nodes": text, "partition": st.text(max_size=20)}),
        max_size=3),
}).map(lambda r: {**{k: v for k, v in r.items() if k != "kind_state"},
                  "kind": r["kind_state"][0], "state": r["kind_state"][1]})


@fuzz_settings(200)
@given(data=st.data(), valid=records)
def test_a_record_the_validator_accepts_renders(data, valid):
    """Records drawn valid (the strategy is checked) and then, half the time, changed a little:
    whatever the validator accepts renders in the human tables, the follow line and JSON, and
    survives the log's line encoding."""
    assert problem(valid) is None
    rec = data.draw(st.just(valid) | mutations(valid, 2))
    if problem(rec) is not None:
        return
    buf = io.StringIO()
    console = Console(file=buf, width=160, no_color=True, highlight=False)
    _render_events(console, [rec])
    _render_open_events(console, [rec])
    with redirect_stdout(io.StringIO()) as line:
        _print_record(Application(), rec)
    for out in (buf.getvalue(), line.getvalue()):
        assert not any(c in out for c in CONTROL) and rec["id"][:10] in out
    json.loads(json.dumps(rec))
    try:
        data_line = encode(rec)
    except DataError:  # too long for a line, or not finite: refused at append, never written
        return
    assert decode(data_line)[0] == json.loads(data_line)
