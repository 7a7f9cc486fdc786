"""`fleetctl job watch`: follow one job's progress files, turn its hang and straggler signals into
lens events (opened once, closed when the condition clears) for act and `fleetctl explain`. A
`fleetctl run` job's controller judges the same signals from its store; its launcher writes them
through `JobWatcher.update` (`fleetctl run --events`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleetctl.lens.eventlog import EventLog, new_event_id, read_events, utc_iso
from fleetctl.recovery.signals import Signal, Thresholds, judge, read_ranks


@dataclass
class JobWatcher:
    directory: str
    job: str
    events: EventLog | None
    thresholds: Thresholds = field(default_factory=Thresholds)
    clock: object = time.time
    open: dict = field(default_factory=dict)  # signal key -> its open event record
    skipped: int = 0  # progress files that could not be read (counted, never fatal)

    def __post_init__(self) -> None:
        """A watcher started again (a restart, `--once` from cron) takes over the job's events that
        are still open in the log instead of opening them twice."""
        if self.events is None or not self.events.path.exists():
            return
        for rec in read_events(self.events.path, open_only=True):
            ev = rec.get("evidence") or {}
            if rec["metric"] in ("hang", "straggler") and ev.get("job") == self.job:
                rank = ev.get("rank") if isinstance(ev.get("rank"), int) else None
                self.open[(rec["metric"], rank, rec["element"]["id"])] = rec

    def poll(self) -> list[dict]:
        """One look at the job: the event records written (opened and closed)."""
        ranks, skipped = read_ranks(self.directory, self.job)
        self.skipped += skipped
        now = self.clock()
        return self.update(judge(ranks, now, self.thresholds), now)

    def update(self, judged: list[Signal], now: float) -> list[dict]:
        """The job's signals now (from its files, or `fleetctl run`'s controller): events opened
        for new ones, closed for those gone."""
        signals = {s.key: s for s in judged}
        out = []
        for key, sig in signals.items():
            if key not in self.open:
                self.open[key] = self._write(self._record(sig, now, "open"))
                out.append(self.open[key])
        for key in [k for k in self.open if k not in signals]:
            rec = self.open.pop(key)
            out.append(self._write({**rec, "kind": "close", "state": "closed", "time": utc_iso(now),
                                    "last_seen": utc_iso(now)}))
        return out

    def _record(self, sig: Signal, now: float, kind: str) -> dict:
        return {"v": 1, "id": new_event_id(now), "kind": kind, "time": utc_iso(now), "state": "open",
                "element": {"type": "host", "id": sig.node}, "metric": sig.metric, "severity": sig.severity,
                "confidence": 0.5 if sig.evidence.get("culprit_unknown") else 0.95,
                "evidence": dict(sig.evidence, message=sig.message, job=self.job),
                "first_seen": utc_iso(now), "last_seen": utc_iso(now), "flap": None,
                "jobs": [{"job_id": self.job}]}

    def _write(self, rec: dict) -> dict:
        return self.events.append(rec) if self.events is not None else rec
