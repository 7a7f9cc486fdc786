"""The coordinator's resume state, `state.json` (written after every window) and
`baselines.json` (the per-path delay baselines, written once a BASELINES_SAVE_S: half a million
numbers at 1,280 hosts x 8, ~4.6 MB, were rewritten and fsynced with state.json every second,
~400 GB a day), read at start.

    state = read_state(path, now=time.time(), log=log)      # validated; never raises
    saved = read_baselines(baselines_path, log=log)         # likewise
    resumed = resume(path, state, tracker, baselines, fingerprint, log=log, saved_baselines=saved)
    next_end = first_window_end(time.time(), window_s, resumed.last_window_end)

The file is input like any other: a user may have planted or damaged it, and the clock may have
stepped back since it was written. It is read with the file kit (a regular file, at most
MAX_STATE_BYTES, JSON nesting bounded), every field is validated, and whatever is invalid is
dropped with one logged line naming it (at most MAX_LOGGED lines, then a count): lens always
starts, with what was valid. A `last_window_end` later than the clock (a clock stepped back) is
dropped, and windows are scheduled from the clock, so no value in the file can stop them closing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from fleetctl.errors import DataError
from fleetctl.filekit import clean_text, read_json

STATE_VERSION = 1
MAX_STATE_BYTES = 64 << 20  # baselines of ~10^6 paths; the tracker's locations are few
MAX_WINDOWS = 2**53  # the window counter: an exact integer in JSON
MAX_FINGERPRINT = 256
MAX_LOGGED = 20  # dropped fields logged one per line; the rest counted in one more line
START_DELAY_S = 1.0  # agents start 0.5 s after the coordinator: the first window ends after that


@dataclass
class Resumed:
    last_window_end: float | None = None
    windows: int = 0


def _count(value, top: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= top


def _time(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value > 0


def read_state(path: str | Path, *, now: float, log) -> dict:
    """The valid top-level fields of state.json ({} when missing or unusable), each invalid one
    logged and left out: `last_window_end` (> 0, not after `now`), `windows`, `fingerprint`,
    `tracker` and `baselines` (objects, checked by their owners in resume())."""
    try:
        doc = read_json(path, "lens state", max_bytes=MAX_STATE_BYTES, missing_ok=True, kind=dict,
                        error=DataError)
    except DataError as exc:
        log(f"{exc.message}; starting without it")
        return {}
    if doc is None:
        return {}
    version = doc.get("version")
    if version != STATE_VERSION or isinstance(version, bool):
        log(f"{path}: version {clean_text(version, 20)!r} is not {STATE_VERSION}; "
            "starting without it")
        return {}
    out: dict = {}
    problems = []
    last = doc.get("last_window_end")
    if last is not None:
        if not _time(last):
            problems.append("last_window_end: not a time")
        elif last > now:
            problems.append(f"last_window_end: {last - now:.0f} s in the future (the clock "
                            "stepped back?)")
        else:
            out["last_window_end"] = float(last)
    for key, ok, why in (
            ("windows", lambda v: _count(v, MAX_WINDOWS), "not an integer >= 0"),
            ("fingerprint", lambda v: isinstance(v, str) and len(v) <= MAX_FINGERPRINT,
             f"not a string of at most {MAX_FINGERPRINT} characters"),
            ("tracker", lambda v: isinstance(v, dict), "not an object"),
            ("baselines", lambda v: isinstance(v, dict), "not an object")):
        if key in doc:
            if ok(doc[key]):
                out[key] = doc[key]
            else:
                problems.append(f"{key}: {why}")
    log_dropped(path, problems, log)
    return out


def read_baselines(path: str | Path, *, log) -> dict:
    """`baselines.json` (written apart from state.json, once a BASELINES_SAVE_S): {"fingerprint",
    "baselines"} when valid, else {} with one logged line. The baselines themselves are
    checked by their owner (PathBaselines.load_state) against the plan's paths."""
    try:
        doc = read_json(path, "lens baselines", max_bytes=MAX_STATE_BYTES, missing_ok=True,
                        kind=dict, error=DataError)
    except DataError as exc:
        log(f"{exc.message}; the delay baselines are learnt again")
        return {}
    if doc is None:
        return {}
    fingerprint, baselines = doc.get("fingerprint"), doc.get("baselines")
    if doc.get("version") != STATE_VERSION or isinstance(doc.get("version"), bool) or \
            not isinstance(fingerprint, str) or len(fingerprint) > MAX_FINGERPRINT or \
            not isinstance(baselines, dict):
        log(f"{path}: not a version {STATE_VERSION} baselines file; the delay baselines are "
            "learnt again")
        return {}
    return {"fingerprint": fingerprint, "baselines": baselines}


def log_dropped(path, problems: list[str], log) -> None:
    for why in problems[:MAX_LOGGED]:
        log(f"{path}: {clean_text(why, 300)}: dropped")
    if len(problems) > MAX_LOGGED:
        log(f"{path}: {len(problems) - MAX_LOGGED} more invalid fields dropped")


def resume(path, state: dict, tracker, baselines, fingerprint: str, *, log,
           saved_baselines: dict | None = None) -> Resumed:
    """Load a read_state() result into the event tracker and (same plan only) the baselines:
    those of a read_baselines() result, else those an older state.json carried; what they
    refuse is logged and dropped like the top-level fields."""
    problems = tracker.load_state(state["tracker"]) if "tracker" in state else []
    if saved_baselines:
        if saved_baselines.get("fingerprint") == fingerprint:
            problems += baselines.load_state(saved_baselines["baselines"])
    elif "baselines" in state and state.get("fingerprint") == fingerprint:
        problems += baselines.load_state(state["baselines"])
    log_dropped(path, problems, log)
    return Resumed(last_window_end=state.get("last_window_end"), windows=state.get("windows", 0))


def first_window_end(now: float, window_s: float, last: float | None = None) -> float:
    """The end of the first window a (re)started coordinator closes: aligned to the clock, after
    its agents have started; after `last` (the last window it closed) only when that lies behind
    the clock, so whatever the state file held, the first window ends within START_DELAY_S plus
    two windows of `now`."""
    first = math.ceil((now + START_DELAY_S) / window_s) * window_s + window_s
    if last is not None and math.isfinite(last) and last <= now:
        first = max(first, last + window_s)
    return first
