"""`fleetctl run`: one launcher per Slurm task, the training process its child.

    srun --ntasks-per-node=1 fleetctl run --standbys 1 -- python train.py

Slot = SLURM_PROCID of SLURM_NTASKS; the first NTASKS - standbys slots train, the rest stand by. The
launcher of slot 0 serves the control store (torch's TCPStore) and runs the controller
(fleetctl.recovery.control) in a thread; it outlives its own child, so losing rank 0's process loses
nothing. Losing slot 0's node loses the store: the others see it and the job falls back to
swap + requeue, as with torchrun's c10d store.

A standby used is replaced when slot 0 was given `--replenish N` (recovery.replenish): it submits a
one-node job whose launcher joins the run (`--join STORE`) as the next slot.

Every launcher starts its child in its own process group, with the environment torchrun gives
(MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE; RANK and WORLD_SIZE are set by the library
once the slot has a rank) plus FLEETCTL_RUN_*, forwards SIGTERM, SIGINT and SIGUSR2 to it, reports
its end to the store, and kills it (SIGKILL to its group) when the controller asks: a frozen process
must close its sockets so that its peers' collectives fail now rather than at their timeout.
"""

from __future__ import annotations

import datetime
import logging
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace

from fleetctl.errors import EXIT_FAILURES, EXIT_OK, RecoveryError, UsageError
from fleetctl.recovery import control, signals
from fleetctl.recovery.resilient import (ENV_ADDR, ENV_NODE, ENV_RUN, ENV_SLOT, ENV_STORE, ENV_TIMEOUT,
                                         _route_address)

log = logging.getLogger("fleetctl.recovery")
POLL_S = 0.05
END_GRACE_S = 10.0  # a training process still running this long after the run ended is killed
BASE_PORT = 29400


@dataclass
class LaunchOptions:
    standbys: int = 0
    store: str | None = None  # HOST or HOST:PORT; default MASTER_ADDR/MASTER_PORT, else the first node
    timing: control.Timing = field(default_factory=control.Timing)
    collective_timeout_s: float = 60.0
    events: str | None = None  # lens's event log: a `rank_lost` event per node when the run ends for requeue
    requeue_wait_s: float = 0.0  # then task 0 keeps the job running this long for act's swap to requeue it
    thresholds: signals.Thresholds = field(default_factory=signals.Thresholds)  # hang and straggler
    join: str | None = None  # HOST:PORT: stand by for a running job (a replacement standby's own job)
    replenish: int = 0  # slot 0: at most this many replacement standbys submitted (recovery.replenish)
    replenish_args: list[str] = field(default_factory=list)  # their sbatch options


@dataclass
class LaunchResult:
    slot: int
    role: str  # "active" | "standby"
    end: str | None  # the run's end as the controller published it, "replaced" (this slot's rank went
    # to a standby and training went on), None (not known here)
    child_code: int | None
    exit_code: int
    generations: list[dict] = field(default_factory=list)  # slot 0 only: the controller's history
    replenish: dict | None = None  # slot 0 with --replenish: the replacement standby jobs submitted

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def task_geometry(env) -> tuple[int, int]:
    try:
        slot, slots = int(env.get("SLURM_PROCID", "0")), int(env.get("SLURM_NTASKS", "1"))
    except ValueError:
        raise UsageError("SLURM_PROCID / SLURM_NTASKS are not numbers") from None
    if not 0 <= slot < slots:
        raise UsageError(f"SLURM_PROCID={slot} outside SLURM_NTASKS={slots}")
    return slot, slots


def store_address(options: LaunchOptions, env) -> tuple[str, int]:
    text = options.store or env.get("MASTER_ADDR") or _first_node(env)
    host, port = text, None
    if text.count(":") == 1 or text.startswith("["):
        host, _, tail = text.rpartition(":")
        if not tail.isdigit() or not 0 < int(tail) < 65536:
            raise UsageError(f"--store {text!r}: the port must be a number in 1..65535")
        port = int(tail)
    if port is None:
        port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT", "").isdigit() else \
            BASE_PORT + int(env.get("SLURM_JOB_ID", "0") or 0) % 20000
    return host.strip("[]"), port


def _first_node(env) -> str:
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodes:
        raise UsageError("no control store address: give --store HOST[:PORT], set MASTER_ADDR, or run under Slurm")
    from fleetctl.nodeset import expand

    return expand(nodes)[0]


def launch(argv: list[str], options: LaunchOptions, env=None) -> LaunchResult:
    env = dict(os.environ if env is None else env)
    if not argv:
        raise UsageError("no training command: fleetctl run [OPTIONS] -- COMMAND ...")
    if options.join:
        return _join(argv, options, env)
    slot, slots = task_geometry(env)
    active = slots - options.standbys
    if active < 1:
        raise UsageError(f"--standbys {options.standbys} leaves no training rank of {slots} tasks")
    host, port = store_address(options, env)
    store = _store(host, port, is_master=slot == 0)
    controller = replenisher = None
    if slot == 0:
        store.set("run", secrets.token_hex(8))
        store.set("slots", str(slots))
        store.set("active", str(active))
        controller = control.Controller(store.clone(), active, slots, options.timing,
                                        thresholds=options.thresholds)
        if options.replenish:
            from fleetctl.recovery.replenish import Replenisher

            replenisher = Replenisher(options.replenish, options.replenish_args, f"{host}:{port}", argv,
                                      env.get("SLURM_JOB_ID", ""), options.collective_timeout_s)
    return _run(argv, options, env, store, host, port, slot, slots, active, controller, replenisher)


def _join(argv: list[str], options: LaunchOptions, env: dict) -> LaunchResult:
    """A replacement standby (recovery.replenish): the next slot of a running job's store."""
    if ":" not in options.join:  # a default port would be this (the standby's own) job's
        raise UsageError(f"--join {options.join!r}: give HOST:PORT, the running job's control store")
    host, port = store_address(replace(options, store=options.join), env)
    store = _store(host, port, is_master=False, timeout_s=10.0)  # a run that ended: say so soon
    if not store.check(["run", "slots"]):
        raise RecoveryError(f"{host}:{port} is not a `fleetctl run` control store (no run id)")
    slot = control.join_slot(store)
    active = int(store.get("active")) if store.check(["active"]) else 0
    log.info("fleetctl run: joined the run on %s:%d as slot %d (a standby)", host, port, slot)
    return _run(argv, options, env, store, host, port, slot, slot + 1, active, None, None)


def _run(argv, options, env, store, host, port, slot, slots, active, controller, replenisher) -> LaunchResult:
    run_id = store.get("run").decode()
    child_env = {**env, ENV_STORE: f"{host}:{port}", ENV_SLOT: str(slot), ENV_RUN: run_id,
                 ENV_TIMEOUT: str(options.collective_timeout_s), "MASTER_ADDR": host, "MASTER_PORT": str(port),
                 "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
                 "LOCAL_WORLD_SIZE": env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0],
                 "FLEETCTL_RUN_SLOTS": str(slots), "FLEETCTL_RUN_ACTIVE": str(active)}
    child_env.setdefault(ENV_ADDR, _route_address(host, port))
    if env.get("SLURMD_NODENAME"):
        child_env.setdefault(ENV_NODE, env["SLURMD_NODENAME"])
    role = "active" if slot < active and not options.join else "standby"
    child = _Child(argv, child_env)
    try:
        code, end = _supervise(child, store, slot, controller, options, env.get("SLURM_JOB_ID", ""), replenisher)
    finally:
        if replenisher is not None:
            replenisher.cancel()
    if controller is not None and end == "requeue" and controller.plan.lost and options.requeue_wait_s:
        _wait_for_requeue(options.requeue_wait_s)
    exit_code = EXIT_OK if end in ("done", "replaced") or (end is None and code == 0) else EXIT_FAILURES
    return LaunchResult(slot, role, end, code, exit_code, controller.history if controller else [],
                        replenisher.to_dict() if replenisher else None)


def _rank_lost_events(controller: control.Controller, job: str, path: str) -> None:
    """The disk fallback: a `rank_lost` event on each lost rank's node for act. A policy on
    `host.rank_lost` with `swap` drains the node, releases a spare and requeues the job, which then
    restores its newest snapshot."""
    from fleetctl.lens.eventlog import EventLog, new_event_id, utc_iso

    events = EventLog(path)
    now = time.time()
    for rank, slot in sorted(controller.plan.lost.items()):
        hello = controller.hellos.get(slot)
        if hello is None:
            continue
        message = f"job {job}: rank {rank} (task {slot}) lost, no standby left: {controller.plan.reason}"[:480]
        events.append({"id": new_event_id(now), "kind": "open", "state": "open", "time": utc_iso(now),
                       "element": {"type": "host", "id": hello.node}, "metric": "rank_lost",
                       "severity": "critical", "confidence": 0.9,
                       "evidence": {"job": job, "rank": rank, "slot": slot, "message": message,
                                    "why": controller.gone.get(slot, "")[:300]},
                       "first_seen": utc_iso(now), "last_seen": utc_iso(now), "flap": None,
                       "jobs": [{"job_id": job}] if job else []})
        log.warning("fleetctl run: %s (event for act in %s)", message, path)


def _signal_writer(options: LaunchOptions, job: str):
    """The controller's hang and straggler signals as lens events in --events (as `fleetctl job
    watch` writes them): act and `fleetctl explain` see a `fleetctl run` job's trouble too."""
    if not options.events:
        return None
    from fleetctl.lens.eventlog import EventLog
    from fleetctl.recovery.watch import JobWatcher

    return JobWatcher("", job or "local", EventLog(options.events))


def _wait_for_requeue(seconds: float) -> None:
    """Keep the job running: a swap moves a running job; its requeue ends this process (SIGTERM)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)


def _store(host: str, port: int, *, is_master: bool, timeout_s: float = 300.0):
    import torch.distributed as dist

    try:
        return dist.TCPStore(host, port, None, is_master, datetime.timedelta(seconds=timeout_s),
                             wait_for_workers=False)
    except Exception as exc:
        what = "serve" if is_master else "reach"
        raise RecoveryError(f"cannot {what} the control store on {host}:{port}: {exc}") from None


class _Child:
    def __init__(self, argv: list[str], env: dict):
        try:
            self.proc = subprocess.Popen(argv, env=env, start_new_session=True)
        except OSError as exc:
            raise UsageError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        self.ending: int | None = None  # SIGTERM or SIGINT received: the job is ending (scancel, preemption)
        self._old = {s: signal.signal(s, self._forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}

    def _forward(self, signum, _frame) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.ending = signum
        self.signal(signum)

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def restore_handlers(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def _supervise(child: _Child, store, slot: int, controller, options: LaunchOptions,
               job: str, replenisher=None) -> tuple[int | None, str | None]:
    """Until the child ended and (slot 0) the controller reached an end, or (other slots) the
    controller decided what the child's end means."""
    code, end, reported_at_gen = None, None, None
    next_poll = next_end_check = 0.0
    ended_at = None
    watcher = _signal_writer(options, job) if controller is not None else None
    try:
        while True:
            if controller is not None and end is None and child.ending:  # every task got it: the
                # processes ending now are no lost ranks (no standby takes them, no replacement job)
                end = controller.stop(f"the job is ending ({signal.Signals(child.ending).name} to task 0)")
            if controller is not None and time.monotonic() >= next_poll:
                first = end is None
                end = controller.poll() or end
                next_poll = time.monotonic() + 0.1
                if replenisher is not None:
                    replenisher.after(controller.plan)
                if watcher is not None:
                    watcher.update(controller.signals, time.time())
                if first and end == "requeue" and controller.plan.lost and options.events:
                    _rank_lost_events(controller, job, options.events)  # act may swap while we wind down
            if code is None:
                code = child.proc.poll()
                if code is not None:
                    control.post_exit(store, slot, code)
                    reported_at_gen = _gen(store)
                elif store.check([control.kill_key(slot)]):
                    log.warning("fleetctl run: slot %d: killing the training process (%s)", slot,
                                store.get(control.kill_key(slot)).decode(errors="replace")[:80])
                    child.signal(signal.SIGKILL)
            if code is not None:
                if controller is not None:
                    if end is not None:
                        _await_exits(store, controller.awaited_slots(), slot)
                        return code, end
                else:  # the run's verdict on this slot: the end, or a plan after its child ended
                    gen = _gen(store)
                    plan_end = _end_of(store, gen)
                    if plan_end or code == 0:
                        return code, plan_end
                    if gen > reported_at_gen:  # training went on without this slot
                        return code, "replaced"
            elif time.monotonic() >= next_end_check:  # a run that ended for requeue or abort: a child
                # stuck in a collective with a lost peer would otherwise linger until Slurm ends the job
                next_end_check = time.monotonic() + 1.0
                gen = _gen(store)
                if _end_of(store, gen) in ("requeue", "abort"):
                    ended_at = ended_at or time.monotonic()
                    if time.monotonic() - ended_at > END_GRACE_S:
                        child.signal(signal.SIGKILL)
            time.sleep(POLL_S)
    except RecoveryError:
        raise
    except Exception as exc:  # the store (slot 0's launcher) is gone
        if code is None:
            child.signal(signal.SIGTERM)
            code = child.proc.wait()
        log.warning("fleetctl run: slot %d: control store lost: %s", slot, exc)
        return code, "requeue"
    finally:
        child.restore_handlers()


def _await_exits(store, slots: list[int], own: int, timeout_s: float = 30.0) -> None:
    """Serve the store until every other launcher saw its child end (they read the end from it)."""
    deadline = time.monotonic() + timeout_s
    others = [control.exit_key(s) for s in slots if s != own]
    while others and time.monotonic() < deadline:
        others = [k for k in others if not store.check([k])]
        time.sleep(POLL_S)


def _gen(store) -> int:
    return int(store.get("gen")) if store.check(["gen"]) else -1


def _end_of(store, gen: int) -> str | None:
    if gen < 0:
        return None
    return control.Plan.parse(store.get(control.plan_key(gen)), gen).end
