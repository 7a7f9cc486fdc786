"""The event state machine: per fabric location, windows in, event records out.

Each analysis window gives a verdict per location: bad (a finding: element, metric, severity,
confidence, evidence) or, by its absence, good. Per location:
- hysteresis: an event opens after `k_open` bad windows in a row for loss (a finding there has
  passed a binomial test against the background at 1e-6), `k_open_down` for a `down` one (a path
  set that lost every probe), `k_open_gray` for excess delay and clock (judged against learnt
  baselines, noisier); it closes after `m_close` good ones;
- flapping: a location that went from good to bad `flap_count` times within `flap_window_s` is
  one event with metric `flapping`, its count and period (mean time between bad starts), whether
  or not any bad run was long enough to open an event; it closes only after the location stayed
  good for `m_close` windows and three periods;
- explained: a finding whose bad paths nearly all cross the element of an open event, and whose
  other paths show nothing significant (`explained_by_open_event` with `outside_open_event`,
  window.py), opens nothing while that event is open: a twin of the open fault, named because
  they share nearly every path, is not a second fault however long it lasts (the coordinator
  tests its paths away from the event, and raises a second fault from those at once); a merge's
  explained finding (shard.py, no such test) opens after `k_open_gray` bad windows; the event's
  place such a finding names is not judged good that window (its fault was seen, by another
  name), only neither good nor bad; a link of a
  shared switch that the shards' merge suspects (`suspect_switch`, analysis/shards.py) only
  after `k_open_suspect`: the switch's fault is usually named whole within a few windows; the one
  link of such a switch the merge saw lossy (`lone_link_of`) after `k_open_lone` (2): in a spine's
  first window one shard may see one of its links before the others' are in; a finding that a
  stronger one of the same window explains (`explained_by_window_finding`, window.py) opens
  nothing that window: the stronger one opens, and the rule above judges it from then on;
- escalation: an open event whose metric or severity changes gets an `update` record (also when
  the flap count passes 10, 30, 100, ...), never a second event;
- refinement: a finding on a finer element inside an open event's (a link of the switch the
  event names, its bad paths the event's) moves that event to the finer element with an `update`
  record (`refined_from` names the element it had): one fault, named more sharply.
A location is the element, with a NIC's cable folded into the NIC (a cable down is seen as
the NIC in one window and as one direction of its cable in another: one fault, one event).
Records follow docs/lens.md ("Event records"); `jobs_for(element)` lists the affected jobs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from fleetctl.lens.eventlog import problem
from fleetctl.model.severity import EVENT_SEVERITY, EVENT_SEVERITY_RANK

METRIC_RANK = {"delay": 1, "loss": 2, "down": 3, "clock": 1, "flapping": 4}
FLAP_MILESTONES = (10, 30, 100, 300, 1000, 3000, 10000)
MAX_EPISODES = 64  # bad starts remembered per location (the flap window needs a few)
MAX_EVIDENCE_CHARS = 4000
MAX_LOCATION_KEY = 600  # "<type>:<id>", an id of at most eventlog.MAX_TEXT characters


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class EventRules:
    k_open: int = 1
    k_open_down: int = 1
    k_open_gray: int = 2  # delay and clock: judged against learnt baselines, noisier than loss
    # links of a shared switch the merge suspects (analysis/shards.py): a spine's fault took up
    # to 4 windows to be named whole in the lab (each shard sees its links of it one by one)
    k_open_suspect: int = 6
    k_open_lone: int = 2  # the one link of a shared switch the merge saw lossy: the switch's first window?
    m_close: int = 3
    flap_count: int = 3
    flap_window_s: float = 30.0


class EventTracker:
    def __init__(self, rules: EventRules | None = None, location=None, jobs_for=None):
        self.rules = rules or EventRules()
        self.locate = location or _plain_location  # the topology's (Topology.location)
        self.jobs_for = jobs_for or (lambda _el: [])
        self.loc: dict[str, dict] = {}  # location key -> its state
        self.seq = 0

    # ------------------------------------------------------------------ keys
    def location(self, element: dict) -> str:
        return self.locate(element)

    # ------------------------------------------------------------------ windows
    def window(self, t_start: float, t_end: float, findings: list[dict],
               silent: set[str] = frozenset(), now: float | None = None) -> list[dict]:
        """Feed one window's findings; return the records to append. Locations in `silent`
        (keys) had no usable probes this window: neither good nor bad, their streaks hold."""
        now = time.time() if now is None else now
        # an open event's place whose fault a finding elsewhere was explained by (window.py,
        # shard.py) was seen this window under another name: it is not judged good (a 5 % loss
        # on a lab cable once read good for one window so, and came back as a second bad start)
        silent = set(silent) | {e for f in findings
                                if isinstance(e := (f.get("evidence") or {})
                                              .get("explained_by_open_event"), str)}
        bad: dict[str, dict] = {}
        for f in findings:
            key = self.location(f["element"])
            prev = bad.get(key)
            if prev is None or _rank(f) > _rank(prev):
                bad[key] = f
        out: list[dict] = []
        for key, f in bad.items():
            out += self._refine(key, f.pop("refines", None), f, t_end, now)
        for key, f in bad.items():
            st = self.loc.setdefault(key, {"bad": 0, "good": 0, "episodes": [], "event": None})
            starts = [float(x) for x in f.pop("down_starts", None) or []
                      if t_start - 1.0 <= float(x) <= t_end + 1.0]
            if st["bad"] == 0 and not starts:
                starts = [t_start]
            for x in sorted(starts):  # bad starts, within the window too (fast flaps)
                if not st["episodes"] or x > st["episodes"][-1] + 0.3:
                    st["episodes"] = (st["episodes"] + [x])[-MAX_EPISODES:]
            st["bad"] += 1
            st["good"] = 0
            st["last"] = f
            st["last_seen"] = t_end
            st.setdefault("first_seen", t_start)
            out += self._on_bad(key, st, f, t_start, t_end, now)
        for key, st in list(self.loc.items()):
            if key in bad or key in silent:
                continue
            st["bad"] = 0
            st["good"] += 1
            if st["event"] is not None:
                out += self._on_good(st, t_end, now)
            elif not self._recent(st, t_end):
                del self.loc[key]  # nothing open, nothing recent: forget it (bounded memory)
        return out

    def _refine(self, key: str, coarse_key, f: dict, t_end: float, now: float) -> list[dict]:
        """A finding on a finer element inside an open event's coarser one (window.py's
        `refines`: every path through it crosses the event's element, and the event explains its
        bad paths): the open event moves to the finer element with an `update` record, one fault
        named more sharply, never a second event beside the first."""
        if not isinstance(coarse_key, str) or coarse_key == key:
            return []
        old = self.loc.get(coarse_key)
        ev = old and old["event"]
        here = self.loc.get(key)
        if ev is None or (here is not None and here["event"] is not None) or \
                _elem_rank(f["element"]) >= _elem_rank(ev["element"]) or \
                ev["metric"] == "flapping":
            return []
        old["event"] = None
        st = self.loc.setdefault(key, {"bad": 0, "good": 0, "episodes": [], "event": None})
        st["event"] = ev
        st["episodes"] = sorted(set(st["episodes"]) | set(old["episodes"]))[-MAX_EPISODES:]
        st["bad"] = max(st["bad"], old["bad"])
        ev["refined_from"] = dict(ev["element"])
        ev["element"] = dict(f["element"])
        ev["last_seen"] = iso(t_end)
        ev["evidence"] = _evidence(f, t_end)
        ev["jobs"] = self.jobs_for(ev["element"])
        return [self._record(ev, "update", now)]

    def _flap(self, st: dict, t_end: float) -> dict | None:
        r = self.rules
        eps = [t for t in st["episodes"] if t >= t_end - r.flap_window_s]
        if len(eps) < r.flap_count:
            return None
        period = (eps[-1] - eps[0]) / (len(eps) - 1) if len(eps) > 1 else 0.0
        total = len(st["episodes"]) if st["event"] is None else \
            max(len(eps), (st["event"].get("flap") or {}).get("count", 0))
        return {"count": total, "period_s": round(period, 3)}

    def _on_bad(self, key, st, f, t_start, t_end, now) -> list[dict]:
        r = self.rules
        ev = st["event"]
        flap = self._flap(st, t_end)
        if ev is None:
            need = r.k_open_down if f["metric"] == "down" else \
                r.k_open_gray if f["metric"] in ("delay", "clock") else r.k_open
            evidence = f.get("evidence") or {}
            if evidence.get("explained_by_open_event") and "outside_open_event" in evidence:
                return []  # judged on its paths away from the event: nothing there (window.py)
            if evidence.get("explained_by_window_finding"):
                return []  # a stronger finding of this window explains it: that one opens
            if evidence.get("explained_by_open_event") and st["bad"] < max(need, r.k_open_gray):
                return []  # a merge's (shard.py): a new fault only if it persists
            if evidence.get("suspect_switch") and st["bad"] < max(need, r.k_open_suspect):
                return []  # part of a switch's fault being named: a fault of its own if it stays
            if evidence.get("lone_link_of") and st["bad"] < max(need, r.k_open_lone):
                return []  # the same, seen on one link so far: a lone cable if it stays a window more
            if flap is None and st["bad"] < need:
                return []
            metric = "flapping" if flap else f["metric"]
            first = st["episodes"][-1] if not flap else st["episodes"][-flap["count"]:][0] \
                if flap["count"] <= len(st["episodes"]) else st["episodes"][0]
            self.seq = (self.seq + 1) % 10000
            ev = {"v": 1, "id": f"ev-{datetime.fromtimestamp(now, timezone.utc):%Y%m%dT%H%M%S}-"
                              f"{self.seq:04d}",
                  "kind": "open", "state": "open", "element": dict(f["element"]),
                  "metric": metric, "severity": _sev(f, metric),
                  "confidence": f.get("confidence", 0.0), "evidence": _evidence(f, t_end),
                  "first_seen": iso(first), "last_seen": iso(t_end), "flap": flap,
                  "jobs": self.jobs_for(f["element"])}
            st["event"] = ev
            return [self._record(ev, "open", now)]
        # an open event: escalate or extend
        ev["last_seen"] = iso(t_end)
        changed = False
        metric = "flapping" if flap or ev["metric"] == "flapping" else f["metric"]
        if METRIC_RANK.get(metric, 0) > METRIC_RANK.get(ev["metric"], 0):
            ev["metric"], changed = metric, True
        sev = _sev(f, ev["metric"])
        if EVENT_SEVERITY_RANK[sev] > EVENT_SEVERITY_RANK[ev["severity"]]:
            ev["severity"], changed = sev, True
        if _elem_rank(f["element"]) > _elem_rank(ev["element"]):
            ev["element"], changed = dict(f["element"]), True
        if flap:
            old = (ev.get("flap") or {}).get("count", 0)
            if ev.get("flap") is None or any(old < m <= flap["count"] for m in FLAP_MILESTONES):
                changed = True
            ev["flap"] = flap
        ev["confidence"] = max(ev["confidence"], f.get("confidence", 0.0))
        if changed:
            ev["evidence"] = _evidence(f, t_end)
            ev["jobs"] = self.jobs_for(ev["element"])
            return [self._record(ev, "update", now)]
        return []

    def _on_good(self, st, t_end, now) -> list[dict]:
        ev = st["event"]
        need = self.rules.m_close
        if ev["metric"] == "flapping":
            period = (ev.get("flap") or {}).get("period_s") or 0.0
            if st["episodes"] and t_end - st["episodes"][-1] < 3 * period:
                return []
        if st["good"] < need:
            return []
        st["event"] = None
        ev["state"] = "closed"
        rec = self._record(ev, "close", now)
        if not self._recent(st, t_end):
            self.loc.pop(self.location(ev["element"]), None)
        return [rec]

    def _recent(self, st: dict, t_end: float) -> bool:
        return bool(st["episodes"]) and st["episodes"][-1] >= t_end - self.rules.flap_window_s

    def _record(self, ev: dict, kind: str, now: float) -> dict:
        rec = dict(ev)
        rec["kind"] = kind
        rec["time"] = iso(now)
        return rec

    # ------------------------------------------------------------------ state
    def open_events(self) -> list[dict]:
        return [dict(st["event"]) for st in self.loc.values() if st["event"] is not None]

    def to_state(self) -> dict:
        return {"seq": self.seq, "loc": self.loc}

    def load_state(self, state: dict) -> list[str]:
        """A saved state (to_state()), read from a file anybody may have damaged: each invalid
        part is left out; returns one line per part dropped, naming it."""
        dropped = []
        seq = state.get("seq", 0)
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            self.seq = seq % 10000
        else:
            dropped.append("tracker.seq: not an integer >= 0")
        loc = state.get("loc", {})
        if not isinstance(loc, dict):
            dropped.append("tracker.loc: not an object")
            loc = {}
        self.loc = {}
        for key, st in loc.items():
            why = _loc_problem(key, st)
            if why:
                dropped.append(f"tracker.loc[{key[:80]!r}]: {why}")
                continue
            self.loc[key] = {"bad": st["bad"], "good": st["good"],
                             "episodes": [float(x) for x in st["episodes"]][-MAX_EPISODES:],
                             "event": st.get("event")}
            for name in ("first_seen", "last_seen"):
                if _is_time(st.get(name)):
                    self.loc[key][name] = float(st[name])
        return dropped

    def adopt(self, records: list[dict]) -> None:
        """Open events of the event log that the saved state lacks (the coordinator died between
        writing the log and saving its state): tracked again, so they close, never reopen."""
        for rec in records:
            if rec.get("state") != "open":
                continue
            key = self.location(rec["element"])
            st = self.loc.setdefault(key, {"bad": 0, "good": 0, "episodes": [], "event": None})
            if st["event"] is None or st["event"].get("id") != rec.get("id"):
                ev = {k: v for k, v in rec.items() if k not in ("kind", "time")}
                st["event"] = ev
        ids = [r.get("id", "") for r in records]
        for i in ids:
            try:
                self.seq = max(self.seq, int(str(i).rsplit("-", 1)[-1]))
            except ValueError:
                pass


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def _is_time(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _loc_problem(key, st) -> str | None:
    """Why a saved location state is unusable, or None. Its event must be a valid open event of
    the event log's format (eventlog.problem: the one definition of a valid record)."""
    if len(key) > MAX_LOCATION_KEY:
        return "key too long"
    if not isinstance(st, dict):
        return "not an object"
    for name in ("bad", "good"):
        if not _is_count(st.get(name)):
            return f"{name}: not an integer >= 0"
    episodes = st.get("episodes")
    if not isinstance(episodes, list) or not all(_is_time(x) for x in episodes):
        return "episodes: not a list of times"
    ev = st.get("event")
    if ev is not None:
        if not isinstance(ev, dict):
            return "event: not an object"
        why = problem({**ev, "kind": "update", "time": ev.get("last_seen")})
        if why or ev.get("state") != "open":
            return f"event: {why or 'not open'}"
    return None


def _rank(f: dict) -> tuple:
    return (METRIC_RANK.get(f["metric"], 0), f.get("confidence", 0.0))


def _elem_rank(el: dict) -> int:
    return {"link": 1, "port": 1, "nic": 2, "host": 3, "switch": 3}.get(el.get("type"), 0)


def _plain_location(element: dict) -> str:
    return f"{element['type']}:{element['id']}"


def _sev(f: dict, metric: str) -> str:
    if metric in ("down", "flapping"):
        return "critical"
    sev = f.get("severity", "warning")
    return sev if sev in EVENT_SEVERITY_RANK else EVENT_SEVERITY.get(sev, "warning")


def _evidence(f: dict, t_end: float) -> dict:
    ev = dict(f.get("evidence") or {})
    ev["window_end"] = iso(t_end)
    if len(repr(ev)) > MAX_EVIDENCE_CHARS:  # bounded: keep the figures, drop long lists
        ev = {k: v for k, v in ev.items() if not isinstance(v, (list, dict))}
    return ev
