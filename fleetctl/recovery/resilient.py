"""The training side of `fleetctl run`: a loop that survives the loss of a rank without a rollback
to disk, a requeue or a new allocation (docs/recovery.md, "No rollback").

    job = Resilient(model, optimizer, extra_state={"sampler": sampler})
    def train(job):                          # called again after each in-process restart
        ddp = DDP(model)                     # the process group is new each time
        for it in range(job.start, steps):
            ...forward, backward, optimizer.step()...
            job.step(it)                     # every iteration boundary, on every rank
    job.run(train)

Under `srun fleetctl run --standbys K -- python train.py` the first N tasks train and K stand by:
their process is up, imports done, model built, joined to the control store, heartbeating. Every
`every` iterations (or K agreed from the copy's cost: `every="auto"`, recovery/cadence.py) each rank
copies its state (model, optimizer, RNG, extra state; the clone is all the loop waits for) and a
thread pushes it to the replica server of a rank on another node.

When a rank is lost (its process ended or froze, its node went away), the survivors' collective fails
(gloo reports the peer's closed connection at once; a frozen peer is killed by its launcher so that it
does) or `step()` sees a new plan; each survivor reports what it can resume from and waits. The
controller picks a standby for the lost rank and the newest iteration every rank has (the survivors
from their own last three copies, the lost rank from its holder's); every rank rebuilds the process
group, restores that iteration (the standby from the holder's replica, over TCP) and `train` runs
again from `job.start`. Same seed, same data order: the result is bit-identical to a run without the
fault (tests/integration/test_run_lab.py checks it).

An exception that is not a collective's failure (a bug in the loop, a bad batch) is the rank's own
error: the run ends ("abort"), since another node would fail the same way.

NCCL (`backend="nccl"`, one GPU per task at LOCAL_RANK): a collective with a lost peer does not fail
on its own; it waits in its kernel until the group's timeout. So the controller posts
`trouble/<gen>` once it knows a rank is lost, and each survivor's heartbeat thread aborts the
process group (torch's `_abort_process_group`, ncclCommAbort underneath) when its loop is still in
that generation ABORT_AFTER_S later: the collective raises, the survivor reports, and the restart
goes on as with gloo. TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (abort the communicator, keep the process)
is set unless given. Run on one GPU machine so far (benchmarks/device/README.md): the abort frees
the collective in 0.5 s, but shutting the aborted group down hung, so aborted groups are kept
referenced and never shut down (_ABORTED_GROUPS); the restart with that change is not yet run on
a GPU. Replicas are host memory either way (hostcopy.py: pinned buffers for GPU tensors).
"""

from __future__ import annotations

import copy
import datetime
import io
import logging
import os
import queue
import socket
import threading
import time
from collections import deque
from typing import Any, Callable

import torch
import torch.distributed as dist

from fleetctl.errors import RecoveryError
from fleetctl.recovery import control, replica
from fleetctl.recovery.cadence import Cadence
from fleetctl.recovery.hostcopy import HostCopier
from fleetctl.recovery.progress import ProgressRecord
from fleetctl.snapshot.rankstate import ExtraState, capture_rng, restore_rng

log = logging.getLogger("fleetctl.recovery")
ENV_STORE, ENV_SLOT, ENV_RUN, ENV_ADDR, ENV_NODE = ("FLEETCTL_RUN_STORE", "FLEETCTL_RUN_SLOT", "FLEETCTL_RUN_ID",
                                                    "FLEETCTL_RUN_ADDR", "FLEETCTL_RUN_NODE")
ENV_TIMEOUT = "FLEETCTL_RUN_TIMEOUT"
ABORT_AFTER_S = 0.5  # a survivor still in a troubled generation this long: its group is aborted
# Process groups aborted in this process, referenced until it ends: on the first GPU run (H200,
# torch 2.11, NCCL 2.28.9: benchmarks/device/nccl_abort_probe.py) the shutdown of a group aborted
# with a dead peer hung, both in destroy_process_group() and in the group's destructor (run when
# the collective's exception, the last holder, was released). Their NCCL resources were freed by
# the abort; what stays is a small object and its watchdog thread per restart.
_ABORTED_GROUPS: list = []
OWN_COPIES = 3  # with one push in flight a lost rank's holder is at most two copies behind a survivor
# the text of collective failures that torch raises as a plain RuntimeError (gloo's transport errors)
PEER_FAILURE_WORDS = ("gloo", "nccl", "connection reset", "connection closed", "timed out", "timeout",
                      "broken pipe", "processgroup", "process group", "socket")


class Restart(Exception):
    """Raised by `step()` when the controller published a new plan: leave at this boundary."""


class Migrate(Restart):
    """Raised by `step()` when this rank was asked to move to a standby (`fleetctl migrate`)."""


def peer_failure(exc: BaseException) -> bool:
    """Did this exception come from the group (a peer lost, a collective's timeout), not the loop?"""
    if isinstance(exc, (Restart, getattr(dist, "DistError", Restart))):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(w in text for w in PEER_FAILURE_WORDS)


def _clone(value: Any) -> Any:
    """A copy in host memory that later steps cannot change (pageable: a one-off copy)."""
    return HostCopier(pinned=False).copy(value)


class Resilient:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
                 extra_state: Any = None, every: int | str = 1, backend: str = "gloo",
                 collective_timeout_s: float | None = None, snapshot: dict | None = None,
                 env: dict | None = None, replica_budget: float = 0.05, mtbf_s: float | None = None):
        """`every`: iterations between replicas (1: at most one iteration lost in most faults), or
        "auto": the fewest iterations between replicas that keep the loop's cost of them within
        `replica_budget`, and Young's interval when the job's `mtbf_s` is given (recovery.cadence).
        `snapshot`: Snapshotter options (directory=...) for the disk fallback (swap + requeue)."""
        env = os.environ if env is None else env
        missing = [k for k in (ENV_STORE, ENV_SLOT, ENV_RUN) if not env.get(k)]
        if missing:
            raise RecoveryError(f"not started by `fleetctl run` ({', '.join(missing)} unset): launch with "
                                "`srun fleetctl run [--standbys K] -- python ...`")
        if every != "auto" and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise RecoveryError(f"every must be a positive integer or 'auto', not {every!r}")
        if not isinstance(replica_budget, (int, float)) or not 0.001 <= replica_budget <= 1.0:
            raise RecoveryError(f"replica_budget must be a fraction in [0.001, 1], not {replica_budget!r}")
        if mtbf_s is not None and (not isinstance(mtbf_s, (int, float)) or not 1.0 <= mtbf_s <= 1e9):
            raise RecoveryError(f"mtbf_s must be seconds in [1, 1e9], not {mtbf_s!r}")
        host, _, port = env[ENV_STORE].rpartition(":")
        if not host or not port.isdigit():
            raise RecoveryError(f"{ENV_STORE}={env[ENV_STORE]!r}: expected HOST:PORT")
        self.store_host, self.store_port = host.strip("[]"), int(port)
        self.slot, self.run_id = int(env[ENV_SLOT]), env[ENV_RUN]
        self.node = env.get(ENV_NODE) or socket.gethostname().split(".")[0]
        self.address = env.get(ENV_ADDR) or _route_address(self.store_host, self.store_port)
        self.timeout_s = float(collective_timeout_s or env.get(ENV_TIMEOUT) or 60.0)
        self.model, self.optimizer, self.extra = model, optimizer, ExtraState(extra_state)
        if backend not in ("gloo", "nccl"):
            raise RecoveryError(f"backend {backend!r}: gloo or nccl")
        self.cadence = Cadence(None if every == "auto" else every, float(replica_budget), mtbf_s)
        self.backend, self.snapshot_options = backend, snapshot
        self.device = _device(backend, env)
        self.rank, self.world, self.gen, self.start = -1, 0, -1, 0
        self.plan: control.Plan | None = None
        self.snapshotter = None
        self.copies: deque[tuple[int, dict]] = deque(maxlen=OWN_COPIES)  # (iteration, state)
        self.host = HostCopier()
        self.blocked_s = 0.0  # the loop's time spent on replicas (clone + waiting for the last push)
        self.waited_s = 0.0  # of which waiting for the previous push to finish
        self._holder_address: tuple[str, int] | None = None
        self.replicas, self.push_failures, self.restarts = 0, 0, 0
        self.history: list[dict] = []  # one record per generation this process trained in: when it
        # entered, its first and last step, why it left
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Event()  # no push in flight
        self._group_lock = threading.Lock()  # the heartbeat's abort against the loop's destroy
        self._idle.set()
        self._seen_gen = -1
        self._aborted_gen = -1  # the generation whose group the heartbeat thread aborted
        self._leaving = False  # the loop is leaving its generation (no abort needed)
        self._leave_reason: str | None = None  # set by the heartbeat thread from leave/<slot>
        self._store_error: str | None = None
        self._stop = threading.Event()
        self.progress = ProgressRecord(-1, self.node)  # sent to the controller: hangs, stragglers
        self._progress_sent = -1

    # ------------------------------------------------------------ the run
    def run(self, train: Callable[["Resilient"], Any]) -> str:
        """Train until done; returns how the run ended ("done"; "migrated" in a process whose rank
        moved to a standby on request), raises RecoveryError for "requeue" and "abort" (the launcher
        turns them into its exit status), re-raises the loop's own error."""
        self._connect()
        try:
            gen = -1
            while True:
                plan = self._await_plan(gen)
                if plan.end:
                    return self._ended(plan)
                gen = plan.gen
                t0 = time.monotonic()
                record = {"gen": gen, "rank": plan.ranks[self.slot], "resume": plan.resume, "enter_s": None,
                          "entered_at": None, "first_step_at": None, "last_step": None, "last_step_at": None}
                self.history.append(record)
                try:
                    self._enter(plan)  # inside: a peer lost while the group forms is a restart too
                    record.update(enter_s=round(time.monotonic() - t0, 6), entered_at=time.time())
                    train(self)
                except Migrate as exc:
                    self._leave(exc)
                    return "migrated"
                except BaseException as exc:
                    self._leave(exc)
                    continue
                self._finish_training()
        finally:
            self._stop.set()
            self.server.close()

    def step(self, iteration: int) -> None:
        """Call at every iteration boundary, on every rank, with the iteration just finished."""
        if self._store_error:
            raise RecoveryError(f"control store lost: {self._store_error}")
        self.progress.step(iteration)
        record = self.history[-1]
        if record["first_step_at"] is None:
            record["first_step_at"] = time.time()
        record["last_step"], record["last_step_at"] = iteration, time.time()
        if self.snapshotter is not None:
            self.snapshotter.step(iteration)
        self.cadence.observe_step(time.perf_counter())
        if self.cadence.agreement_due(iteration):  # every rank at the same iteration (cadence.py)
            wanted = torch.tensor([self.cadence.wanted()], dtype=torch.int64, device=self.device)
            dist.all_reduce(wanted, op=dist.ReduceOp.MAX)
            self.cadence.adopt(int(wanted.item()), iteration)
        if self.cadence.due(iteration):
            self._replicate(iteration, measure=True)
        if self._leave_reason is not None and self.cadence.due(iteration):  # where every rank has a copy
            raise Migrate(self._leave_reason)  # (with K > 1, up to K - 1 iterations after the request)
        if self._seen_gen > self.gen:
            raise Restart(f"generation {self._seen_gen} published")

    def average_gradients(self, module: torch.nn.Module) -> None:
        """All-reduce `module`'s gradients as one flat buffer in parameters() order, then divide by
        the world size. One fixed layout, so the same sums in the same order before and after any
        restart: bit-identical results. (DDP works too, but a new DDP groups its buckets differently
        in its first iteration, which changes the order of the sums: equal up to rounding only.)"""
        self.progress.compute_done()
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def compute_done(self) -> None:
        """This rank's own work of the iteration is done, its collective next (average_gradients
        says so itself). A loop that marks it lets a hang name its culprit: the rank still in its
        own work while the others wait; without it, a hang ends at the collective's timeout."""
        self.progress.compute_done()

    # ------------------------------------------------------------ joining and leaving
    def _connect(self) -> None:
        self.store = self._client()
        self.server = replica.ReplicaServer(self.address, self.run_id)
        self.store.set(control.hello_key(self.slot), control.encode(
            {"node": self.node, "address": self.address, "port": self.server.port, "pid": os.getpid()}))
        threading.Thread(target=self._beat, name="fleetctl-run-beat", daemon=True).start()
        threading.Thread(target=self._pusher, name="fleetctl-run-push", daemon=True).start()

    def _client(self):
        try:
            return dist.TCPStore(self.store_host, self.store_port, None, False,
                                 datetime.timedelta(seconds=30), wait_for_workers=False)
        except Exception as exc:  # torch raises several kinds for an unreachable store
            raise RecoveryError(f"control store {self.store_host}:{self.store_port} unreachable: {exc}") from None

    def _beat(self) -> None:
        store = self._client()
        while not self._stop.is_set():
            try:
                store.add(control.beat_key(self.slot), 1)
                if store.check(["gen"]):
                    self._seen_gen = int(store.get("gen"))
                if self._leave_reason is None and self.rank >= 0 and store.check([control.leave_key(self.slot)]):
                    self._leave_reason = store.get(control.leave_key(self.slot)).decode(errors="replace")[:200]
                if self.backend != "gloo" and self.rank >= 0 and self.gen > self._aborted_gen and \
                        not self._leaving and store.check([control.trouble_key(self.gen)]):
                    self._abort_stuck_group(store)
                version = self.progress.version
                if self.rank >= 0 and version != self._progress_sent:
                    store.set(control.progress_key(self.slot),
                              control.encode(self.progress.document(gen=self.gen)))
                    self._progress_sent = version
            except Exception as exc:  # the launcher of slot 0 is gone: no more recovery
                self._store_error = str(exc)[:200]
                return
            self._stop.wait(control.BEAT_EVERY_S)

    def _abort_stuck_group(self, store) -> None:
        """A rank of this generation is lost: a collective waiting for it would wait until the
        group's timeout (NCCL). Give the loop ABORT_AFTER_S to leave on its own, then abort."""
        gen = self.gen
        deadline = time.monotonic() + ABORT_AFTER_S
        while time.monotonic() < deadline and not self._leaving and self.gen == gen:
            time.sleep(0.05)
        with self._group_lock:
            if self._leaving or self.gen != gen:
                return
            self._aborted_gen = gen
            why = store.get(control.trouble_key(gen)).decode(errors="replace")[:200]
            log.warning("fleetctl run: rank %d: aborting generation %d's process group (%s)", self.rank, gen, why)
            self._abort_groups()  # the loop's collective raises at once

    def _await_plan(self, after: int) -> control.Plan:
        """The next plan that names this slot or ends the run (a standby waits here, warm). A
        standby, and a rank in its first 10 s of waiting (a restart in progress), ask the store every
        20 ms: the new group forms only once the standby joins. A rank still waiting after that
        (a controller deciding at its grace) is content with the heartbeat thread's look every 0.25 s."""
        gen, started = after, time.monotonic()
        while True:
            if self._store_error:
                raise RecoveryError(f"control store lost: {self._store_error}")
            newest = self._seen_gen
            if (self.rank < 0 or time.monotonic() - started < 10) and self.store.check(["gen"]):
                newest = max(newest, int(self.store.get("gen")))
            while gen < newest:
                gen += 1
                plan = control.Plan.parse(self.store.get(control.plan_key(gen)), gen)
                if plan.end or self.slot in plan.ranks:
                    return plan
            time.sleep(0.02)

    def _enter(self, plan: control.Plan) -> None:
        was_rank = self.rank
        self.plan, self.gen, self.rank, self.world = plan, plan.gen, plan.ranks[self.slot], plan.world
        self._holder_address = None
        os.environ.update({"RANK": str(self.rank), "WORLD_SIZE": str(self.world), "GROUP_RANK": str(self.rank)})
        self._leaving = False
        dist.init_process_group(self.backend, store=dist.PrefixStore(f"pg/{plan.gen}", self.store),
                                rank=self.rank, world_size=self.world,
                                timeout=datetime.timedelta(seconds=self.timeout_s),
                                **({"device_id": self.device} if self.backend == "nccl" else {}))
        if plan.resume is not None:
            self._restore(plan, own=was_rank == self.rank)
            self.start = plan.resume + 1
        else:
            self.start = 0
            if self.snapshot_options is not None:
                self._snapshotter()
                restored = self.snapshotter.restore()
                self.start = 0 if restored is None else restored + 1
        if self.snapshot_options is not None and self.snapshotter is None:
            self._snapshotter()
        self.progress.resume(self.rank, self.start - 1)
        self.cadence.restart(self.start, self.gen)
        self._replicate(self.start - 1)  # the holder has this rank's state before its first iteration

    def _snapshotter(self) -> None:
        from fleetctl.snapshot.snapshotter import Snapshotter

        options = dict(self.snapshot_options)
        options.setdefault("extra_state", self.extra_spec())
        # An asynchronous save's collectives run in a writer thread, on a group with torch's 30-minute
        # default timeout: when a peer is lost mid-save the survivors wait there and never report
        # (seen in the lab). Saved in the loop, a lost peer fails the save's collective at once.
        options.setdefault("use_async", False)
        self.snapshotter = Snapshotter(self.model, self.optimizer, **options)

    def extra_spec(self):
        return {name: pair for name, pair in self.extra.items.items()} or None

    def _leave(self, exc: BaseException) -> None:
        """A generation ended in an exception: report it, drop the group; re-raise the loop's own."""
        self._leaving = True
        own = not peer_failure(exc) and not isinstance(exc, RecoveryError) and self._aborted_gen != self.gen
        self.restarts += 1
        report = {"kind": "migrate" if isinstance(exc, Migrate) else "error" if own else "peer", "reason": f"{type(exc).__name__}: {exc}"[:300],
                  "have": [it for it, _ in self.copies], "holds": self.server.store.holds()}
        self.history[-1]["left"] = report["reason"]
        try:
            control.post_report(self.store, self.gen, self.slot, report)
        except Exception as store_exc:
            raise RecoveryError(f"control store lost while reporting: {store_exc}") from exc
        self._drop_group()
        if own or isinstance(exc, (KeyboardInterrupt, SystemExit, RecoveryError)):
            raise exc

    def _drop_group(self) -> None:
        self.snapshotter = None  # its groups die with the default group; a write in flight is abandoned
        self._idle.wait()
        with self._group_lock:
            if self.backend == "nccl":  # never shut down (_ABORTED_GROUPS): aborted, unregistered
                if dist.is_initialized():  # (not already by the heartbeat thread)
                    self._abort_groups()
                return
            try:
                dist.destroy_process_group()
            except Exception as exc:  # a group broken by the lost peer may complain: gone either way
                log.debug("destroy_process_group: %s", exc)

    def _abort_groups(self) -> None:
        """NCCL: abort every process group (ncclCommAbort) and unregister them all, so that a new
        default group can form, keeping them referenced so that none is ever shut down."""
        c10d = dist.distributed_c10d
        _ABORTED_GROUPS.extend(list(c10d._world.pg_names))
        abort = getattr(c10d, "_abort_process_group", None)
        try:
            if abort is not None:
                abort()
            else:  # an older torch: the backend's own abort, and the group destroyed
                c10d._get_default_group()._get_backend(self.device).abort()
                dist.destroy_process_group()
        except Exception as exc:  # the loop's collective fails at its timeout instead
            log.warning("fleetctl run: rank %d: abort failed: %s", self.rank, exc)

    def _finish_training(self) -> None:
        if self.snapshotter is not None:
            self.snapshotter.close()
            self.snapshotter = None
        self._idle.wait()
        control.post_done(self.store, self.slot)
        try:
            dist.destroy_process_group()
        except Exception:
            pass

    def _ended(self, plan: control.Plan) -> str:
        if plan.end == "done":
            return "done"
        raise RecoveryError(f"run ended ({plan.end}): {plan.reason}")

    # ------------------------------------------------------------ state
    def _capture(self) -> dict:
        state = {"model": self.model.state_dict()}
        if self.optimizer is not None:
            state["optim"] = self.optimizer.state_dict()
        state = self.host.copy(state)  # GPU tensors into reused pinned buffers (hostcopy.py)
        state["rng"] = capture_rng()  # fresh objects already: cloning its 1,250 ints would cost ~1 ms
        state["extra"] = copy.deepcopy(self.extra.capture())
        return state

    def _load(self, state: dict) -> None:
        state = {**state, **_clone({k: state[k] for k in ("model", "optim") if k in state})}  # the
        # optimizer may keep the tensors it is given: never our copies
        self.model.load_state_dict(state["model"])
        self.model.zero_grad(set_to_none=True)  # the abandoned step's gradients would add to the replayed one's
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])
            self.optimizer.zero_grad(set_to_none=True)
        restore_rng(state["rng"])
        self.extra.restore(state["extra"])

    def _replicate(self, iteration: int, measure: bool = False) -> None:
        t0 = time.perf_counter()
        if not self._idle.is_set():
            self._idle.wait()  # one push in flight at most: the holder is never far behind
            self.waited_s += time.perf_counter() - t0
        state = self._capture()
        dropped = self.copies[0][1] if len(self.copies) == self.copies.maxlen else None
        self.copies.append((iteration, state))
        if dropped is not None:  # no push in flight (waited above): its buffers are free
            self.host.give_back(dropped)
        holder = self._holder()
        if holder is not None:
            self._idle.clear()
            self._outbox.put_nowait((holder, iteration, state))  # a standing thread: starting one per
            # push cost milliseconds on a busy machine, waiting to be scheduled
        blocked = time.perf_counter() - t0
        self.blocked_s += blocked
        if measure:  # (not the replica on entering a generation: its first pinned allocation)
            self.cadence.observe_replica(blocked)

    def _pusher(self) -> None:
        while True:
            holder, iteration, state = self._outbox.get()
            try:
                self._push(holder, iteration, state)
            finally:
                self._idle.set()

    def _holder(self) -> tuple[str, int] | None:
        """Where this rank's replicas go in this generation (read once per generation)."""
        slot = self.plan.holders.get(self.rank)
        if slot is None or slot == self.slot:
            return None
        if self._holder_address is None:
            hello = control.Hello.parse(self.store.get(control.hello_key(slot)), slot)
            self._holder_address = (hello.address, hello.port)
        return self._holder_address

    def _push(self, holder: tuple[str, int], iteration: int, state: dict) -> None:
        buf = io.BytesIO()
        torch.save(state, buf)
        try:
            replica.push(holder[0], holder[1], self.run_id, self.rank, iteration, buf.getvalue(),
                         timeout_s=self.timeout_s)
            self.replicas += 1
        except RecoveryError as exc:  # the holder died too: its loss shows through the controller
            self.push_failures += 1
            log.warning("fleetctl run: rank %d: %s", self.rank, exc.message)

    def _restore(self, plan: control.Plan, own: bool) -> None:
        if own:
            state = dict(self.copies).get(plan.resume)
            if state is None:
                raise RecoveryError(f"rank {self.rank}: no own copy of iteration {plan.resume}")
            self._load(state)
            return
        source = plan.sources.get(self.rank)
        if source is None:
            raise RecoveryError(f"plan {plan.gen}: no replica source for rank {self.rank}")
        hello = control.Hello.parse(self.store.get(control.hello_key(source)), source)
        body = replica.fetch(hello.address, hello.port, self.run_id, self.rank, plan.resume,
                             timeout_s=self.timeout_s)
        self._load(torch.load(io.BytesIO(body), weights_only=True))
        for _, old in self.copies:  # another rank's copies now: their pinned buffers serve the next
            self.host.give_back(old)
        self.copies.clear()


def _device(backend: str, env) -> torch.device:
    """Where this task's tensors live: the GPU at LOCAL_RANK for NCCL (one GPU per task)."""
    if backend != "nccl":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RecoveryError("backend nccl needs a CUDA GPU, and torch sees none")
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")  # abort the communicator, keep the process
    text = str(env.get("LOCAL_RANK", "0") or "0")
    local = int(text) if text.isdigit() and len(text) <= 4 else -1
    if not 0 <= local < torch.cuda.device_count():
        raise RecoveryError(f"LOCAL_RANK={text[:20]!r}: not one of this node's {torch.cuda.device_count()} GPU(s)")
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def _route_address(host: str, port: int) -> str:
    """The address this node reaches the store from: where its peers reach it back."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, port))
            return probe.getsockname()[0]
        except OSError as exc:
            raise RecoveryError(f"no route to the control store {host}: {exc.strerror}") from None
