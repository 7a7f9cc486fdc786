"""Hang and straggler signals of a training job, judged from its ranks' progress files
(recovery.progress) and written to lens's event log as `hang` and `straggler` events on the rank's
host, with the job (docs/recovery.md).

- **Hang**: no iteration completed for T = hang_factor x the median iteration time + hang_floor_s
  (3x + 10 s by default). In synchronous training every rank stops when one does, so the culprit is
  the rank that stands out: one whose file stopped changing (killed, frozen) while others' still
  change, or one still in its own compute while the others wait in the collective. When no rank
  stands out (all waiting, e.g. a network fault under the collective, or all computing, e.g. a long
  checkpoint), nothing is raised until 3 T, and then one event that says the culprit is unknown
  (`measurement_trouble`: act logs it and does nothing).
- **Straggler**: a rank whose own compute time (the mean over its last 128 iterations or 20 s, at least
  `min_samples` of them) is `straggler_pct` % (20) above the median of the job's other ranks, and at
  least 0.2 ms above it (below that, the difference is the timer's and the scheduler's noise).

Nothing is judged from a rank before its first iterations, so a job's start raises nothing.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field

from fleetctl.errors import DataError
from fleetctl.nodeset import is_node_name

MAX_RANKS = 200_000
MAX_FILE = 4096
ALIVE_S = 5.0  # a rank's file not rewritten for this long (its writer ticks every second): stopped


@dataclass(frozen=True)
class Rank:
    rank: int
    node: str
    pid: int
    iteration: int
    time: float  # the file's last write: the rank's process is alive while this moves
    progress_time: float  # when its last iteration completed
    phase: str  # compute | collective
    iteration_s: float | None
    compute_s: float | None
    samples: int


@dataclass
class Thresholds:
    hang_factor: float = 3.0
    hang_floor_s: float = 10.0
    straggler_pct: float = 20.0
    min_samples: int = 16
    min_delta_s: float = 0.0002  # and at least this much slower: below it, timer and scheduler noise


@dataclass
class Signal:
    metric: str  # hang | straggler
    rank: int | None
    node: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return (self.metric, self.rank, self.node)


def read_ranks(directory: str, job: str) -> tuple[list[Rank], int]:
    """The job's ranks from `<directory>/<job>/rank-N.json` (bounded, validated); (ranks, skipped)."""
    if not job or not job.replace("_", "").replace(".", "").isalnum() or len(job) > 64:
        raise DataError(f"job id {job!r}: letters, digits, '_' and '.', at most 64")
    base = os.path.join(directory, job)
    try:
        names = [n for n in os.listdir(base) if n.startswith("rank-") and n.endswith(".json")]
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise DataError(f"cannot read the progress directory {base}: {exc.strerror or exc}") from None
    ranks, skipped = [], 0
    for name in sorted(names)[:MAX_RANKS]:
        rank = _read_rank(os.path.join(base, name))
        if rank is None:
            skipped += 1
        else:
            ranks.append(rank)
    return ranks, skipped


def _read_rank(path: str) -> Rank | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_FILE + 1)
        doc = json.loads(data) if len(data) <= MAX_FILE else None
    except (OSError, ValueError):
        return None
    return parse_rank(doc)


def parse_rank(doc) -> Rank | None:
    """A rank's progress document (a file, or `fleetctl run`'s store key), validated; None if bad."""
    if not isinstance(doc, dict) or doc.get("v") != 1:
        return None
    try:
        rank = Rank(_int(doc["rank"]), str(doc["node"]), _int(doc["pid"]), _int(doc["iteration"], -1),
                    _num(doc["time"]), _num(doc["progress_time"]), str(doc["phase"]),
                    _opt(doc.get("iteration_s")), _opt(doc.get("compute_s")), _int(doc.get("samples", 0)))
    except (KeyError, TypeError, ValueError):
        return None
    if not is_node_name(rank.node) or rank.phase not in ("compute", "collective"):
        return None
    return rank


def _int(value, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2 ** 53:
        raise ValueError(value)
    return value


def _num(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e11:
        raise ValueError(value)
    return float(value)


def _opt(value) -> float | None:
    return None if value is None else _num(value)


def hang_limit(iteration_s: float, th: Thresholds) -> float:
    """Seconds without an iteration that make a hang: 3x the median iteration time + 10 s."""
    return th.hang_factor * iteration_s + th.hang_floor_s


def judge(ranks: list[Rank], now: float, th: Thresholds = Thresholds()) -> list[Signal]:
    """The job's hang and straggler signals now."""
    timed = [r.iteration_s for r in ranks if r.iteration_s is not None and r.samples >= 2]
    if not ranks or not timed:
        return []  # the job has not started iterating: nothing to judge yet
    limit = hang_limit(statistics.median(timed), th)
    newest = max(r.progress_time for r in ranks)
    if now - newest > limit:
        return _hang(ranks, now, now - newest, limit)
    return _stragglers(ranks, th)


def _hang(ranks: list[Rank], now: float, stalled: float, limit: float) -> list[Signal]:
    alive = {r.rank: now - r.time <= ALIVE_S for r in ranks}
    stopped = [r for r in ranks if not alive[r.rank]]
    computing = [r for r in ranks if alive[r.rank] and r.phase == "compute"]
    waiting = [r for r in ranks if alive[r.rank] and r.phase == "collective"]
    base = {"seconds_without_progress": round(stalled, 1), "threshold_s": round(limit, 1), "ranks": len(ranks)}
    if stopped and len(stopped) < len(ranks):
        return [_rank_signal("hang", r, "critical", f"rank {r.rank} stopped (its process wrote nothing for "
                             f"{now - r.time:.0f} s) and the job made no progress for {stalled:.0f} s",
                             dict(base, alive=False)) for r in stopped]
    if computing and waiting:
        return [_rank_signal("hang", r, "critical", f"rank {r.rank} is stuck in its own work for "
                             f"{stalled:.0f} s while {len(waiting)} ranks "
                             "wait for it in the collective", dict(base, alive=True, phase="compute"))
                for r in computing]
    if stalled <= 3 * limit:
        return []  # no rank stands out (a long checkpoint, a slow collective): not yet
    first = min(ranks, key=lambda r: r.rank)
    why = ("every rank stopped writing" if len(stopped) == len(ranks) else
           f"all {len(waiting)} ranks wait in the collective" if waiting else "all ranks are in their own work")
    return [Signal("hang", None, first.node, "critical",
                   f"the job made no progress for {stalled:.0f} s and no rank stands out ({why})",
                   dict(base, measurement_trouble=f"culprit unknown: {why}", culprit_unknown=True))]


def _stragglers(ranks: list[Rank], th: Thresholds) -> list[Signal]:
    measured = [r for r in ranks if r.compute_s is not None and r.samples >= th.min_samples]
    if len(measured) < 2:
        return []
    overall = statistics.median(r.compute_s for r in measured)
    out = []
    for r in measured:
        # compared with the others: in a small job the rank itself moves the median (with 2 ranks it
        # is their mean, and a rank 30 % slower than the other is only 14 % above it)
        median = overall if len(measured) > 4 else statistics.median(x.compute_s for x in measured if x is not r)
        if median > 0 and r.compute_s >= median * (1 + th.straggler_pct / 100.0) and \
                r.compute_s - median >= th.min_delta_s:
            slower = 100.0 * (r.compute_s / median - 1)
            out.append(_rank_signal("straggler", r, "warning", f"rank {r.rank} computes {slower:.0f} % slower "
                                    f"than the job's median ({r.compute_s * 1000:.1f} ms against "
                                    f"{median * 1000:.1f} ms per iteration)",
                                    {"compute_s": r.compute_s, "median_compute_s": round(median, 6),
                                     "slower_pct": round(slower, 1), "samples": r.samples}))
    return out


def _rank_signal(metric: str, r: Rank, severity: str, message: str, evidence: dict) -> Signal:
    return Signal(metric, r.rank, r.node, severity, message,
                  dict(evidence, rank=r.rank, pid=r.pid, iteration=r.iteration))
