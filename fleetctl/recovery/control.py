"""The control plane of a `fleetctl run` job: who is which rank, and what happens when one is lost.

It lives in one torch TCPStore, served by the launcher of slot 0 (the job's first task; the store is
torch's own, as torchrun's c10d rendezvous uses). A *slot* is one launched task (SLURM_PROCID); a
*rank* is a place in the training group. Slots 0..N-1 start as ranks 0..N-1; the others stand by.

Keys (all small JSON or counters):
    hello/<slot>          the training process is up: its node, replica server address and port
    beat/<slot>           a counter its heartbeat thread adds to every 0.25 s
    exit/<slot>           the launcher saw its child end: {"code": C}
    failed/<gen>/<slot>   a survivor left generation <gen>: why, its own copies, the replicas it holds
    done/<slot>           training finished on this rank
    kill/<slot>           the controller asks that slot's launcher to kill its child (a frozen rank)
    leave/<slot>          `fleetctl migrate` asks that rank to leave at its next step boundary
    progress/<slot>       its rank's progress (recovery.progress's document, with "gen"), sent on change
    trouble/<gen>         a rank of generation <gen> is lost: survivors abort a collective stuck on it (NCCL)
    slots, count/joined   the job's own slots, and how many standbys joined it since (`fleetctl run --join`:
                          a replacement standby from another Slurm job takes slot `slots` + n - 1)
    plan/<gen>, gen       the plans, and the number of the newest (written plan first, then gen)
    count/exit, count/done, count/failed/<gen>
                          counters added to after each exit, done and failed key (`post_*`): the
                          controller scans those keys only when a counter moved

The controller (`Controller.poll`, in the launcher of slot 0) writes plan 0 once the N active slots
said hello, and a new plan when a rank is lost: a standby takes the lost rank's number, every rank
resumes from the newest iteration that all of them (the lost one through its replica holder) have.
With no standby left, or no common iteration, the plan ends the run with "requeue": the job falls back
to swap + requeue from its disk snapshot. A rank that failed by its own error (not a peer's loss) ends
the run with "abort": a software bug is not fixed by another node.

A hang is judged from the ranks' progress as `fleetctl job watch` judges it (recovery.signals: no
iteration for 3x the median iteration time + 10 s): a rank stuck in its own work while the others wait
in the collective is lost like a dead one (its launcher kills it, a standby takes its rank). Cost: one
store read a second (rank 0's progress) while the job moves; every rank's every 10 s (stragglers) and
when rank 0 stalls. Wall clocks of the nodes are compared (NTP's milliseconds against a 10 s floor).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace

from fleetctl.errors import RecoveryError
from fleetctl.recovery import signals

log = logging.getLogger("fleetctl.recovery")
PLAN_VERSION = 1
VALUE_MAX = 8 << 20  # a plan of 100,000 ranks is ~3 MB
BEAT_EVERY_S = 0.25
LOOK_EVERY_S = 1.0  # rank 0's progress: is the job moving?
FULL_LOOK_EVERY_S = 10.0  # every rank's progress: stragglers (a hang is looked at as soon as rank 0 stalls)
JOIN_LOOK_EVERY_S = 1.0  # count/joined: a replacement standby joined
TERM_GRACE_S = 2.0  # a rank ended by SIGTERM is lost only if task 0 was not told to end as well
JOINED_MAX = 1024  # standbys that may join one run (each is a Slurm job a launcher submitted)
ENDS = ("done", "requeue", "abort")


def hello_key(slot: int) -> str: return f"hello/{slot}"
def beat_key(slot: int) -> str: return f"beat/{slot}"
def exit_key(slot: int) -> str: return f"exit/{slot}"
def failed_key(gen: int, slot: int) -> str: return f"failed/{gen}/{slot}"
def done_key(slot: int) -> str: return f"done/{slot}"
def kill_key(slot: int) -> str: return f"kill/{slot}"
def plan_key(gen: int) -> str: return f"plan/{gen}"
def leave_key(slot: int) -> str: return f"leave/{slot}"
def progress_key(slot: int) -> str: return f"progress/{slot}"
def failed_count_key(gen: int) -> str: return f"count/failed/{gen}"
def trouble_key(gen: int) -> str: return f"trouble/{gen}"


EXITS, DONES, JOINED = "count/exit", "count/done", "count/joined"


def join_slot(store) -> int:
    """A new slot for a standby joining a running job (`fleetctl run --join`)."""
    base = int(store.get("slots"))
    n = int(store.add(JOINED, 1))
    if n > JOINED_MAX:
        raise RecoveryError(f"{n - 1} standbys joined this run already (at most {JOINED_MAX})")
    return base + n - 1


def joined_count(store) -> int:
    """How many standbys joined the run (bounded, whatever the counter says)."""
    return min(int(store.add(JOINED, 0)), JOINED_MAX)


def slot_count(store) -> int:
    """The job's own slots plus the standbys that joined it."""
    base = int(store.get("slots")) if store.check(["slots"]) else 0
    return base + joined_count(store)


def post_exit(store, slot: int, code: int) -> None:
    """A launcher saw its child end (the key, then the counter the controller watches)."""
    store.set(exit_key(slot), encode({"code": code}))
    store.add(EXITS, 1)


def post_done(store, slot: int) -> None:
    store.set(done_key(slot), "1")
    store.add(DONES, 1)


def post_report(store, gen: int, slot: int, report: dict) -> None:
    store.set(failed_key(gen, slot), encode(report))
    store.add(failed_count_key(gen), 1)


def encode(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def decode(raw: bytes | str, what: str) -> dict:
    """A JSON object from the store, bounded: every value read is input."""
    if len(raw) > VALUE_MAX:
        raise RecoveryError(f"{what}: {len(raw)} bytes, over {VALUE_MAX}")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RecoveryError(f"{what}: not JSON") from None
    if not isinstance(doc, dict):
        raise RecoveryError(f"{what}: not a JSON object")
    return doc


def _nonneg(value, what: str, high: int = 10 ** 12) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise RecoveryError(f"{what}: must be an integer in [0, {high}], not {value!r}")
    return value


def _iterations(value, what: str) -> set[int]:
    if not isinstance(value, list) or len(value) > 64:
        raise RecoveryError(f"{what}: must be a list of at most 64 iterations")
    out = set()
    for it in value:
        if isinstance(it, bool) or not isinstance(it, int) or not -1 <= it <= 10 ** 12:
            raise RecoveryError(f"{what}: {it!r} is not an iteration")
        out.add(it)
    return out


@dataclass
class Hello:
    slot: int
    node: str
    address: str
    port: int

    @classmethod
    def parse(cls, raw, slot: int) -> "Hello":
        doc = decode(raw, f"hello of slot {slot}")
        node, address = doc.get("node"), doc.get("address")
        if not isinstance(node, str) or not 0 < len(node) <= 255 or not isinstance(address, str) \
                or not 0 < len(address) <= 255:
            raise RecoveryError(f"hello of slot {slot}: node and address must be short strings")
        return cls(slot, node, address, _nonneg(doc.get("port"), f"hello of slot {slot}: port", 65535))


@dataclass
class Report:
    """A survivor's account of why it left a generation and what state it can resume from."""

    slot: int
    kind: str  # "peer" (a collective failed, or a new plan came) | "error" (its own exception) |
    # "migrate" (it left on request at a step boundary; its holder has its state of that step)
    reason: str
    have: set[int]  # iterations of its own state it kept
    holds: dict[int, set[int]]  # rank -> iterations of that rank's replica it holds

    @classmethod
    def parse(cls, raw, slot: int) -> "Report":
        what = f"failure report of slot {slot}"
        doc = decode(raw, what)
        kind = doc.get("kind")
        if kind not in ("peer", "error", "migrate"):
            raise RecoveryError(f"{what}: kind must be peer, error or migrate, not {kind!r}")
        holds_doc = doc.get("holds", {})
        if not isinstance(holds_doc, dict) or len(holds_doc) > 4096:
            raise RecoveryError(f"{what}: holds must be an object of at most 4096 ranks")
        holds = {}
        for rank, its in holds_doc.items():
            if not str(rank).isdigit():
                raise RecoveryError(f"{what}: rank {rank!r} is not a number")
            holds[int(rank)] = _iterations(its, f"{what}: holds[{rank}]")
        return cls(slot, kind, str(doc.get("reason", ""))[:300], _iterations(doc.get("have", []), f"{what}: have"),
                   holds)


@dataclass
class Plan:
    gen: int
    world: int
    ranks: dict[int, int]  # slot -> rank, the active slots
    holders: dict[int, int]  # rank -> slot that holds its replica
    resume: int | None = None  # the iteration every rank restores (state after it); None: start fresh
    lost: dict[int, int] = field(default_factory=dict)  # rank -> slot lost in the generation before
    sources: dict[int, int] = field(default_factory=dict)  # lost rank -> slot holding its replica
    end: str | None = None  # None (train), or one of ENDS
    reason: str = ""

    def to_doc(self) -> dict:
        return {"version": PLAN_VERSION, "gen": self.gen, "world": self.world,
                "ranks": {str(s): r for s, r in self.ranks.items()},
                "holders": {str(r): s for r, s in self.holders.items()}, "resume": self.resume,
                "lost": {str(r): s for r, s in self.lost.items()},
                "sources": {str(r): s for r, s in self.sources.items()}, "end": self.end, "reason": self.reason}

    @classmethod
    def parse(cls, raw, gen: int) -> "Plan":
        what = f"plan {gen}"
        doc = decode(raw, what)
        if doc.get("version") != PLAN_VERSION or doc.get("gen") != gen:
            raise RecoveryError(f"{what}: version {doc.get('version')!r} / gen {doc.get('gen')!r} unexpected")
        world = _nonneg(doc.get("world"), f"{what}: world", 10 ** 6)

        def mapping(key: str) -> dict[int, int]:
            value = doc.get(key)
            if not isinstance(value, dict) or len(value) > 10 ** 6:
                raise RecoveryError(f"{what}: {key} must be an object")
            out = {}
            for k, v in value.items():
                if not str(k).isdigit():
                    raise RecoveryError(f"{what}: {key} key {k!r} is not a number")
                out[int(k)] = _nonneg(v, f"{what}: {key}[{k}]", 10 ** 7)
            return out
        ranks, holders, lost, sources = mapping("ranks"), mapping("holders"), mapping("lost"), mapping("sources")
        if doc.get("end") is None and sorted(ranks.values()) != list(range(world)):
            raise RecoveryError(f"{what}: ranks are not 0..{world - 1}")
        resume = doc.get("resume")
        if resume is not None and (isinstance(resume, bool) or not isinstance(resume, int) or resume < -1):
            raise RecoveryError(f"{what}: resume {resume!r} is not an iteration")
        end = doc.get("end")
        if end is not None and end not in ENDS:
            raise RecoveryError(f"{what}: end {end!r} is not one of {', '.join(ENDS)}")
        return cls(gen, world, ranks, holders, resume, lost, sources, end, str(doc.get("reason", ""))[:500])

    def slot_of(self, rank: int) -> int:
        return next(s for s, r in self.ranks.items() if r == rank)


def holders_for(ranks: dict[int, int], nodes: dict[int, str]) -> dict[int, int]:
    """rank -> the slot holding its replica: the next rank round the ring on another node (the same
    node only when the job has one node)."""
    by_rank = sorted((r, s) for s, r in ranks.items())
    out = {}
    for i, (rank, slot) in enumerate(by_rank):
        others = [by_rank[(i + j) % len(by_rank)] for j in range(1, len(by_rank))]
        apart = [s for _, s in others if nodes.get(s) != nodes.get(slot)]
        out[rank] = (apart or [s for _, s in others] or [slot])[0]
    return out


def resume_point(plan: Plan, reports: dict[int, Report], lost: set[int]) -> int | None:
    """The newest iteration every rank of `plan` can restore: survivors from their own copies, a
    lost rank from its holder's replicas. None when there is none (or a holder is lost too)."""
    common: set[int] | None = None
    for slot, rank in plan.ranks.items():
        if slot in lost:
            holder = reports.get(plan.holders.get(rank, -1))
            its = holder.holds.get(rank, set()) if holder else set()
        else:
            its = reports[slot].have
        common = set(its) if common is None else common & its
    return max(common) if common else None


@dataclass
class Timing:
    dead_after_s: float = 5.0  # no heartbeat for this long: the process is gone or frozen
    grace_s: float = 90.0  # a rank that neither reports nor dies while the others wait: the culprit
    start_s: float = 600.0  # the active ranks must all say hello within this


class Controller:
    """Decides the generations. `poll()` is called every ~0.1 s by the launcher of slot 0; it returns
    the end ("done", "requeue", "abort") once the run is over, else None. Stateless toward the store
    except through the keys above, so its decisions are tested with any store object."""

    def __init__(self, store, active: int, slots: int, timing: Timing | None = None, clock=time.monotonic,
                 thresholds: signals.Thresholds | None = None, wall=time.time):
        if not 0 < active <= slots:
            raise RecoveryError(f"{active} active ranks of {slots} slots: need 1 <= active <= slots")
        self.store, self.active, self.slots = store, active, slots
        self.own_slots = slots  # the job's tasks; slots grows by the standbys that joined
        self._next_join_look = 0.0
        self.timing, self.clock, self.wall = timing or Timing(), clock, wall
        self.thresholds = thresholds or signals.Thresholds()
        self.signals: list[signals.Signal] = []  # hang and straggler, from the last look at every rank
        self._next_look = self._next_full_look = 0.0
        self._gen_wall = wall()  # when the current plan was published: a pause before it is no hang
        self._counters: dict[str, int] = {}  # the count/* values last seen
        self._reported: dict[int, Report] = {}  # this generation's reports read so far
        self._trouble_gen = -1  # the last generation whose trouble key was posted
        self.started = clock()
        self.plan: Plan | None = None
        self.hellos: dict[int, Hello] = {}
        self.beats: dict[int, tuple[int, float]] = {}  # slot -> (counter, when it last changed)
        self.gone: dict[int, str] = {}  # slot -> why (exit, no heartbeat, killed)
        self.done: set[int] = set()  # active slots whose training finished (their exit is no loss)
        self._terminated: dict[int, tuple[float, bytes]] = {}  # slot -> (when, exit) ended by SIGTERM/SIGINT
        self.trouble_since: float | None = None
        self.history: list[dict] = []  # one record per generation change, for the log and the tests
        self.end: str | None = None

    # ---- what the store says
    def _has(self, key: str) -> bool:
        return self.store.check([key])

    def _moved(self, counter: str) -> bool:
        """Whether a count/* counter moved since the last look (one store round trip)."""
        n = int(self.store.add(counter, 0))
        if n == self._counters.get(counter, 0):
            return False
        self._counters[counter] = n
        return True

    def _read_joined(self, now: float) -> None:
        if self.plan is None or now < self._next_join_look:
            return
        self._next_join_look = now + JOIN_LOOK_EVERY_S
        self.slots = self.own_slots + joined_count(self.store)

    def _read_hellos(self) -> None:
        if len(self.hellos.keys() | self.gone.keys()) >= self.slots:  # (a lost slot is in both)
            return
        for slot in range(self.slots):
            if slot not in self.hellos and slot not in self.gone and self._has(hello_key(slot)):
                try:
                    self.hellos[slot] = Hello.parse(self.store.get(hello_key(slot)), slot)
                    self.store.add(beat_key(slot), 0)  # the key exists from now on: read in one batch
                except RecoveryError as exc:
                    self._lose(slot, exc.message)

    def _read_liveness(self, now: float) -> None:
        """Done, exit and heartbeat of every watched slot: the done and exit keys only when their
        counters moved, the heartbeats in one batched read. A few round trips a poll, whatever the
        job's size (benchmarks/recovery_controller.py)."""
        exits = self._moved(EXITS)  # read before the done counter: a slot posts done before its exit
        dones = self._moved(DONES)
        watched = [s for s in self.hellos if s not in self.gone and s not in self.done]
        if dones:
            for slot in watched:
                if slot in self.plan.ranks and self._has(done_key(slot)):
                    self.done.add(slot)
        if exits:
            for slot in watched:
                if slot not in self.done and slot not in self._terminated and self._has(exit_key(slot)):
                    raw = self.store.get(exit_key(slot))
                    if _exit_code(raw) in (-15, -2):  # SIGTERM/SIGINT: Slurm ending the job sends it to every
                        self._terminated[slot] = (now, raw)  # task; task 0's own may come a moment later
                    else:
                        self._lose(slot, f"process ended ({_exit_text(raw)})")
        for slot, (when, raw) in list(self._terminated.items()):
            if now - when > TERM_GRACE_S and slot not in self.gone:
                self._lose(slot, f"process ended ({_exit_text(raw)}; the job itself went on)")
        watched = [s for s in watched if s not in self.gone and s not in self.done]
        for slot, count in zip(watched, self._beat_counts(watched)):
            last = self.beats.get(slot)
            if last is None or last[0] != count:
                self.beats[slot] = (count, now)
            elif now - last[1] > self.timing.dead_after_s:
                self._lose(slot, f"no heartbeat for {now - last[1]:.1f} s (frozen or its node is gone)")
                self.store.set(kill_key(slot), "no heartbeat")  # its launcher kills it: its peers unblock

    def _read_many(self, keys: list[str]) -> list[bytes | None]:
        """The values of `keys` (None where a key is missing): one batched read when they all
        exist (torch >= 2.5's multi_get; two round trips), else one round trip a key."""
        if not keys:
            return []
        if hasattr(self.store, "multi_get") and self.store.check(keys):
            return list(self.store.multi_get(keys))
        return [self.store.get(k) if self._has(k) else None for k in keys]

    def _beat_counts(self, slots: list[int]) -> list[int]:
        try:  # every heartbeat key exists (created at the slot's hello)
            return [int(v) for v in self._read_many([beat_key(s) for s in slots])]
        except (TypeError, ValueError):
            raise RecoveryError("a heartbeat counter in the control store is not a number") from None

    def _look_at_progress(self, now: float) -> None:
        """Hang and straggler signals (recovery.signals.judge) from the ranks' progress; a rank
        hung in its own work while the others wait is lost (killed by its launcher)."""
        if now < self._next_look:
            return
        self._next_look = now + LOOK_EVERY_S
        wall = self.wall()
        if now < self._next_full_look:
            first = self._progresses([self.plan.slot_of(0)], wall)[0] if 0 in self.plan.ranks.values() else None
            if first is None or first.iteration_s is None or \
                    wall - first.progress_time <= signals.hang_limit(first.iteration_s, self.thresholds):
                return  # moving (or not started): nothing to judge
        self._next_full_look = now + FULL_LOOK_EVERY_S
        slots = [s for s in self.plan.ranks if s not in self.gone and s not in self.done]
        ranks = [r for r in self._progresses(slots, wall) if r is not None]
        self.signals = signals.judge(ranks, wall, self.thresholds)
        for sig in self.signals:
            if sig.metric == "hang" and sig.rank is not None and sig.rank in self.plan.ranks.values():
                slot = self.plan.slot_of(sig.rank)
                if slot not in self.gone:
                    self._lose(slot, f"hung: {sig.message}")
                    self.store.set(kill_key(slot), "hung")  # its launcher kills it: its peers unblock
                    self._next_full_look = 0.0  # look again at once: the signal ends with the rank

    def _progresses(self, slots: list[int], wall: float) -> list[signals.Rank | None]:
        """Each slot's progress in this generation (one batched read), alive (its heartbeat says
        so) and no older than the plan (restoring is no iteration); None where it sent none yet,
        or a bad one (over 4 KiB, not JSON, another generation's or another rank's)."""
        out = []
        for slot, raw in zip(slots, self._read_many([progress_key(s) for s in slots])):
            doc = None
            if raw is not None and len(raw) <= signals.MAX_FILE:
                try:
                    doc = decode(raw, progress_key(slot))
                except RecoveryError:
                    pass
            rank = signals.parse_rank(doc)
            if rank is None or doc.get("gen") != self.plan.gen or rank.rank != self.plan.ranks.get(slot):
                out.append(None)
            else:
                out.append(replace(rank, time=wall, progress_time=max(rank.progress_time, self._gen_wall)))
        return out

    def _lose(self, slot: int, why: str) -> None:
        if slot not in self.gone:
            self.gone[slot] = why
            log.warning("fleetctl run: slot %d lost: %s", slot, why)

    def _reports(self) -> dict[int, Report]:
        """This generation's reports (read again only when its counter moved)."""
        if not self._moved(failed_count_key(self.plan.gen)):
            return dict(self._reported)
        for slot in self.plan.ranks:
            key = failed_key(self.plan.gen, slot)
            if slot in self._reported or not self._has(key):
                continue  # (also from a slot gone since: its report says why: its own error?)
            try:
                report = self._reported[slot] = Report.parse(self.store.get(key), slot)
            except RecoveryError as exc:
                self._lose(slot, exc.message)
                continue
            if report.kind == "migrate":  # planned: its rank goes to a standby like a lost one
                self._lose(slot, f"moved to a standby on request ({report.reason})")
        return dict(self._reported)

    # ---- decisions
    def poll(self) -> str | None:
        if self.end:
            return self.end
        now = self.clock()
        self._read_joined(now)
        self._read_hellos()
        if self.plan is None:
            return self._first_plan(now)
        reports = self._reports()  # first: a rank that left on request then ended was moved, not lost
        self._read_liveness(now)
        self._look_at_progress(now)
        active = set(self.plan.ranks)
        if active <= self.done:
            return self._publish_end("done", "training finished")
        lost = active & set(self.gone)
        if not lost and not reports:
            self.trouble_since = None
            return None
        if self.trouble_since is None:
            self.trouble_since = now
        if lost and self._trouble_gen < self.plan.gen:  # survivors waiting in a collective on the lost
            # rank leave it (an NCCL collective waits until its timeout otherwise)
            self._trouble_gen = self.plan.gen
            self.store.set(trouble_key(self.plan.gen),
                           "; ".join(f"slot {s}: {self.gone[s]}" for s in sorted(lost))[:300])
        if len(self._standbys()) < len(lost):  # a standby that joined within the last look counts too
            self._next_join_look = 0.0
            self._read_joined(now)
            self._read_hellos()
        if len(self._standbys()) < len(lost) and not any(r.kind == "error" for r in reports.values()):
            # decided without the survivors' reports: they may be stuck in a collective with the lost
            # rank (a disk snapshot's writer), and the disk fallback needs none of their state
            return self._publish_end("requeue", f"{len(lost)} rank(s) lost, {len(self._standbys())} standby left",
                                     {self.plan.ranks[s]: s for s in sorted(lost)})
        waiting = active - lost - set(reports)
        if waiting:
            if now - self.trouble_since < self.timing.grace_s:
                return None
            for slot in waiting:  # alive, yet neither failing nor reporting while all others wait
                self._lose(slot, f"did not leave generation {self.plan.gen} within {self.timing.grace_s:.0f} s "
                                 "while the others waited (hung)")
                self.store.set(kill_key(slot), "hung")
            lost |= waiting
        return self._next_plan(reports, lost)

    def _first_plan(self, now: float) -> str | None:
        if not all(s in self.hellos for s in range(self.active)):
            if now - self.started > self.timing.start_s:
                missing = [s for s in range(self.active) if s not in self.hellos]
                return self._publish_end("abort", f"slots {missing[:8]} never started")
            return None
        ranks = {s: s for s in range(self.active)}
        self._publish(Plan(0, self.active, ranks, holders_for(ranks, self._nodes()), reason="start"))
        return None

    def _next_plan(self, reports: dict[int, Report], lost: set[int]) -> str | None:
        plan = self.plan
        errors = [r for r in reports.values() if r.kind == "error"]
        if errors:
            return self._publish_end("abort", f"rank {plan.ranks[errors[0].slot]} (slot {errors[0].slot}) "
                                              f"failed by its own error: {errors[0].reason}")
        if not lost:  # every rank left, none is lost: a fault under the collective, restart in place
            if sum(1 for h in self.history if not h["lost"]) >= 3:
                return self._publish_end("requeue", "3 restarts in place without a lost rank")
        resume = resume_point(plan, reports, lost)
        spares = self._standbys()
        lost_ranks = {plan.ranks[s]: s for s in sorted(lost)}
        if len(spares) < len(lost_ranks):
            return self._publish_end("requeue", f"{len(lost_ranks)} rank(s) lost, {len(spares)} standby left",
                                     lost_ranks)
        if resume is None:
            return self._publish_end("requeue", "no iteration that every rank (or its replica) has", lost_ranks)
        ranks = {s: r for s, r in plan.ranks.items() if s not in lost}
        for rank, spare in zip(sorted(lost_ranks), spares):
            ranks[spare] = rank
        why = "; ".join(f"rank {r}: slot {s} {self.gone[s]}" for r, s in lost_ranks.items()) or \
            "; ".join(sorted({r.reason for r in reports.values()}))[:300]
        sources = {r: plan.holders[r] for r in lost_ranks}
        self._publish(Plan(plan.gen + 1, plan.world, ranks, holders_for(ranks, self._nodes()), resume,
                           lost_ranks, sources, reason=why))
        return None

    def stop(self, reason: str) -> str:
        """The job is ending (task 0's launcher got SIGTERM): end the run, whatever comes next."""
        if self.end:
            return self.end
        return self._publish_end("requeue", reason)

    def _standbys(self) -> list[int]:
        return sorted(s for s in self.hellos if s not in self.plan.ranks and s not in self.gone)

    def awaited_slots(self) -> list[int]:
        """The slots whose launchers read the run's end from the store: the job's own, and the
        joined standbys that started (a replacement still queued is cancelled, never awaited)."""
        return sorted(set(range(self.own_slots)) | set(self.hellos))

    def _nodes(self) -> dict[int, str]:
        return {s: h.node for s, h in self.hellos.items()}

    def _publish(self, plan: Plan) -> None:
        self.store.set(plan_key(plan.gen), encode(plan.to_doc()))
        self.store.set("gen", str(plan.gen))
        if self.plan is not None:
            self.history.append({"gen": plan.gen, "at": self.clock(), "since": self.trouble_since,
                                 "lost": dict(plan.lost), "resume": plan.resume, "end": plan.end,
                                 "reason": plan.reason})
            (log.info if plan.end == "done" else log.warning)(
                "fleetctl run: generation %d%s: %s", plan.gen, f" ({plan.end})" if plan.end else "", plan.reason)
        self.plan, self.trouble_since = plan, None
        self._gen_wall, self.signals, self._reported = self.wall(), [], {}
        if plan.end:
            self.end = plan.end

    def _publish_end(self, end: str, reason: str, lost: dict[int, int] | None = None) -> str:
        gen = self.plan.gen + 1 if self.plan else 0
        world = self.plan.world if self.plan else self.active
        self._publish(Plan(gen, world, {}, {}, None, lost or {}, {}, end=end, reason=reason))
        return end


def _exit_code(raw) -> int | None:
    try:
        code = decode(raw, "exit").get("code")
    except RecoveryError:
        return None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _exit_text(raw) -> str:
    code = _exit_code(raw)
    if code is None:
        return "exit status unreadable"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit status {code}"
