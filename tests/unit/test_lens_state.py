"""The coordinator's resume state (fleetctl.lens.state) is untrusted input: whatever state.json
holds, `Coordinator.run` starts, closes windows on the clock and logs, one line each, what it
dropped. The coordinator runs for real here (its loop, resume and scheduling); only the plan,
agents and window analysis are stubbed."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from fleetctl.lens.baseline import PathBaselines
from fleetctl.lens.coordinator import Coordinator
from fleetctl.lens.events import EventRules, EventTracker
from fleetctl.lens.options import LensOptions
from tests.unit.test_lens_events import LINK, feed, finding

FINGERPRINT = "4:32:2"
N_PATHS = 4


class NoOutputs:
    def open_events(self):
        return []


def coordinator(state_dir, logs: list[str]) -> tuple[Coordinator, list[float]]:
    """A coordinator over the real loop whose window close feeds the real event tracker one
    bad window of LINK; `closed` gets each window end."""
    opts = LensOptions(state_dir=str(state_dir), window_s=0.2, health_window_s=0.01,
                       echo_timeout_s=0.01)
    c = Coordinator(SimpleNamespace(name="lab"), ["node1", "node2"], None, opts, NoOutputs(),
                    log=logs.append)
    closed: list[float] = []

    def build(_nodes):
        c.plan = SimpleNamespace(fingerprint=FINGERPRINT, hosts=[])
        c.tracker = EventTracker(EventRules(k_open=1))
        c.baselines = PathBaselines(N_PATHS)

    def close(a, b):
        c.counters["windows"] += 1
        c.tracker.window(a, b, [finding(LINK)], now=b)
        json.dumps(c.tracker.to_state())  # what _save writes
        c.baselines.current()
        closed.append(b)

    c._build, c._close = build, close
    c._start_agents = lambda: None
    c._refresh_jobs = lambda force=False: None
    c._periodic = lambda now: None
    c._write_status = lambda now, stopping=False: None
    return c, closed


@pytest.fixture(autouse=True)
def quick_start(monkeypatch):
    """The first window right away (not a second after the start: the agents are stubbed)."""
    monkeypatch.setattr("fleetctl.lens.state.START_DELAY_S", 0.0, raising=False)


def run_until_a_window_closes(state_dir, logs) -> tuple[Coordinator, list[float]]:
    c, closed = coordinator(state_dir, logs)
    stop = threading.Event()
    errors: list[BaseException] = []

    def target():
        try:
            c.run(stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    deadline = time.monotonic() + 15  # a bounded wait: the first window closes within ~2 s
    while not closed and not errors and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    t.join(10)
    assert not errors, f"lens did not start: {errors[0]!r}"
    assert closed, "no window closed within 15 s"
    return c, closed


def valid_state(**over) -> dict:
    tr = EventTracker(EventRules(k_open=1))
    feed(tr, "B")  # one open event
    state = {"version": 1, "last_window_end": time.time() - 5, "windows": 12,
             "fingerprint": FINGERPRINT, "tracker": tr.to_state(),
             "baselines": {"value": [10.0, None, 12.5, 9.0], "count": [7, 0, 9, 5]},
             "saved": time.time()}
    state.update(over)
    return json.loads(json.dumps(state))


def test_a_valid_state_is_resumed(tmp_path):
    state = valid_state()
    state["tracker"]["loc"]["switch:spine9"] = {"bad": 0, "good": 2, "episodes": []}  # no event
    (tmp_path / "state.json").write_text(json.dumps(state))
    logs: list[str] = []
    c, _ = run_until_a_window_closes(tmp_path, logs)
    assert c.counters["windows"] == 12 + 1
    assert len(c.tracker.open_events()) == 1 and c.baselines.count[2] >= 9
    assert not [m for m in logs if "dropped" in m]


def _bad_tracker() -> dict:
    state = valid_state()
    loc = state["tracker"]["loc"]
    (key, st), = loc.items()
    loc["missing"] = {"bad": 1}  # fields missing
    loc["nic:x"] = dict(st, event={k: v for k, v in st["event"].items() if k != "severity"})
    loc["deep"] = dict(st, episodes=["yesterday"])
    return dict(state["tracker"], seq="7")


@pytest.mark.parametrize("over, named", [
    ({"last_window_end": time.time() + 3600}, ["s in the future (the clock stepped back?)"]),
    ({"last_window_end": 1e308}, ["last_window_end"]),
    ({"last_window_end": "soon"}, ["last_window_end: not a time"]),
    ({"windows": "12a"}, ["windows: not an integer"]),
    ({"windows": -4, "fingerprint": ["x"]}, ["windows: not an integer", "fingerprint"]),
    ({"tracker": _bad_tracker()},
     ["tracker.seq", "tracker.loc['missing']: good", "tracker.loc['nic:x']: event: severity",
      "tracker.loc['deep']: episodes"]),
    ({"tracker": {"seq": 1, "loc": [1, 2]}}, ["tracker.loc: not an object"]),
    ({"tracker": "x", "baselines": {"value": ["a"] * 4, "count": [1] * 4}},
     ["tracker: not an object", "baselines.value"]),
    ({"baselines": {"value": [1.0] * 4, "count": [1] * 3}}, ["baselines: 4 values and 3 counts"]),
])
def test_an_invalid_field_is_dropped_with_one_line_and_lens_starts(tmp_path, over, named):
    (tmp_path / "state.json").write_text(json.dumps(valid_state(**over)))
    logs: list[str] = []
    c, closed = run_until_a_window_closes(tmp_path, logs)
    dropped = [m for m in logs if m.endswith(": dropped")]
    assert len(dropped) == len(named), logs
    for what, line in zip(named, dropped):
        assert what in line and "state.json" in line
    assert closed[0] < time.time() + 1  # windows close on the clock, not on the file
    if "windows" in over:
        assert c.counters["windows"] == 1


@pytest.mark.parametrize("text", ["[" * 60_000, '{"version": 1, "tracker": ' * 5000, "\xff",
                                  '{"version": 2}', '{"version": true}', "[]", ""])
def test_an_unusable_state_file_is_one_line_and_lens_starts(tmp_path, text):
    (tmp_path / "state.json").write_text(text, errors="surrogateescape")
    logs: list[str] = []
    c, _ = run_until_a_window_closes(tmp_path, logs)
    assert [m for m in logs if "starting without it" in m] and c.counters["windows"] == 1


def _baselines_doc(**over) -> dict:
    doc = {"version": 1, "fingerprint": FINGERPRINT,
           "baselines": {"value": [10.0, None, 12.5, 9.0], "count": [7, 0, 9, 5]}}
    doc.update(over)
    return doc


def test_baselines_are_resumed_from_their_own_file(tmp_path):
    state = {k: v for k, v in valid_state().items() if k != "baselines"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "baselines.json").write_text(json.dumps(_baselines_doc()))
    logs: list[str] = []
    c, _ = run_until_a_window_closes(tmp_path, logs)
    assert c.baselines.count[2] >= 9 and c.baselines.count[0] >= 7
    assert not [m for m in logs if "dropped" in m or "learnt again" in m]


@pytest.mark.parametrize("doc, line", [
    (_baselines_doc(fingerprint="another plan"), None),  # another plan's: not used, not an error
    (_baselines_doc(version=2), "not a version 1 baselines file"),
    (_baselines_doc(fingerprint=["x"]), "not a version 1 baselines file"),
    (_baselines_doc(baselines=[1, 2]), "not a version 1 baselines file"),
    (_baselines_doc(baselines={"value": [1.0] * 4, "count": [1] * 3}), "4 values and 3 counts"),
    ("[" * 60_000, "learnt again"),
    ("\xff", "learnt again"),
])
def test_an_unusable_baselines_file_is_one_line_and_they_are_learnt_again(tmp_path, doc, line):
    state = {k: v for k, v in valid_state().items() if k != "baselines"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    text = doc if isinstance(doc, str) else json.dumps(doc)
    (tmp_path / "baselines.json").write_text(text, errors="surrogateescape")
    logs: list[str] = []
    c, _ = run_until_a_window_closes(tmp_path, logs)
    assert int(c.baselines.count.sum()) == 0  # nothing learnt from the file
    said = [m for m in logs if "baselines" in m]
    assert (len(said) == 1 and line in said[0]) if line else not said, logs
    assert len(c.tracker.open_events()) == 1  # the state itself was resumed


def test_save_writes_the_baselines_apart_once_a_while(tmp_path, monkeypatch):
    import fleetctl.lens.coordinator as coordinator_module

    logs: list[str] = []
    c, _ = coordinator(tmp_path, logs)
    c._build([])
    c._baselines_at = None
    c.baselines.update(np.array([10.0, 11.0, 12.0, 13.0]), np.ones(4, bool))
    c._save(1000.0)
    state = json.loads((tmp_path / "state.json").read_text())
    saved = json.loads((tmp_path / "baselines.json").read_text())
    assert "baselines" not in state and state["last_window_end"] == 1000.0
    assert saved["fingerprint"] == FINGERPRINT and saved["baselines"]["count"] == [1, 1, 1, 1]
    c.baselines.update(np.array([10.0, 11.0, 12.0, 13.0]), np.ones(4, bool))
    c._save(1001.0)  # within BASELINES_SAVE_S: state only
    assert json.loads((tmp_path / "baselines.json").read_text()) == saved
    assert json.loads((tmp_path / "state.json").read_text())["last_window_end"] == 1001.0
    monkeypatch.setattr(coordinator_module, "BASELINES_SAVE_S", 0.0)
    c._save(1002.0)
    assert json.loads((tmp_path / "baselines.json").read_text())["baselines"]["count"] == [2] * 4
