"""The Snapshotter: coordinated, verified, asynchronous snapshots from inside a training loop.

One snapshot, step N, on every rank:
 1. agree: each `step(N)` does one small all-reduce MAX on a side gloo group (works beside NCCL) of
    [snapshot wanted, save still running, N, -N]; a request seen by any rank (REQUEST file, SIGUSR2)
    or a periodic deadline on rank 0 makes every rank snapshot at the same N;
 2. rank 0 creates step_N.tmp/; each rank writes its RNG/extra state file; torch.distributed.checkpoint
    writes the shards (async_save: only the staging copy blocks the loop; the write runs in a thread,
    its collectives on a second gloo group so they never interleave with the loop's);
 3. when every rank's write is done (seen by a later step's all-reduce, or close()), each rank hashes
    its own files; rank 0 gathers every rank's digests (its confirmation), writes MANIFEST.json last,
    renames step_N.tmp to step_N, moves LATEST, applies keep-N; a final all-reduce tells every rank.
A crash anywhere before the rename leaves only step_N.tmp, which is never read; LATEST only ever
names a directory that every rank confirmed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from fleetctl.errors import SnapshotError
from fleetctl.snapshot import catalog, manifest
from fleetctl.snapshot.interval import DEFAULT_COST_S, clamp, mtbf_from_env, young
from fleetctl.snapshot.layout import step_name, take_request, write_latest, write_status
from fleetctl.snapshot.rankstate import ExtraState, capture_rng, restore_rng

log = logging.getLogger("fleetctl.snapshot")
ENV_DIR = "FLEETCTL_SNAPSHOT_DIR"
ENV_SPANK_DIR = "FLEET_SNAPSHOT_DIR"  # set in the task by `srun --fleet-snapshot=DIR` (SPANK)
_PERIODIC, _SIGNAL, _FORCED, _REQUEST = 1, 2, 3, 4
_REASONS = {_PERIODIC: "periodic", _SIGNAL: "signal", _FORCED: "forced", _REQUEST: "request"}


class _Pending:
    """A save in flight on this rank: the DCP future, then this rank's digests (in a thread)."""

    def __init__(self, step: int, tmp: Path, rank: int, future, reason: str, request: str | None,
                 t0: float):
        self.step, self.tmp, self.rank, self.reason, self.request, self.t0 = step, tmp, rank, reason, request, t0
        self.blocking_s = 0.0
        self.files: dict | None = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._finish, args=(future,), daemon=True,
                                        name=f"fleetctl-snapshot-{step}")
        self._thread.start()

    def _finish(self, future) -> None:
        try:
            if future is not None:
                future.result()
            prefix = f"__{self.rank}_"
            names = [n for n in os.listdir(self.tmp)
                     if n.startswith(prefix) or n == manifest.rank_state_name(self.rank)
                     or (self.rank == 0 and n == manifest.DCP_METADATA)]
            self.files = manifest.digest_files(self.tmp, names, self.rank)
        except BaseException as exc:  # reported to rank 0 through the gather, never raised in a thread
            self.error = f"rank {self.rank}: {type(exc).__name__}: {exc}"

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()


@dataclass
class SnapshotOptions:
    """The Snapshotter's keyword options, checked once."""

    extra_state: Any = None
    directory: str | os.PathLike | None = None
    keep: int = 3
    group: Any = None  # the gloo group for the loop's control collectives (default: a new one)
    periodic: bool = True
    interval_s: float | None = None
    mtbf_s: float | None = None
    use_async: bool = True
    poll_every: int = 1
    signal_number: int | None = signal.SIGUSR2
    job_id: str | None = None
    registry: str | None = None

    @classmethod
    def from_keywords(cls, options: dict) -> "SnapshotOptions":
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise SnapshotError(f"unknown Snapshotter option(s): {', '.join(unknown)}")
        o = cls(**options)
        o.directory = o.directory or os.environ.get(ENV_DIR) or os.environ.get(ENV_SPANK_DIR)
        if not o.directory:
            raise SnapshotError(f"no snapshot directory: pass directory=, set {ENV_DIR} or run "
                                "the job with --fleet-snapshot=DIR")
        if not isinstance(o.keep, int) or o.keep < 1:
            raise SnapshotError(f"keep must be a positive integer, not {o.keep!r}")
        if not isinstance(o.poll_every, int) or o.poll_every < 1:
            raise SnapshotError(f"poll_every must be a positive integer, not {o.poll_every!r}")
        return o


class Snapshotter:
    """Snapshots of `model` + `optimizer` + RNG + `extra_state` into `directory`, keeping `keep`.

    Call `restore()` once at start (after the process group and the optimizer exist), `step(it)` at
    every iteration boundary (on every rank, with the same `it`), and `close()` at the end."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 **options):
        """`options` (keywords, SnapshotOptions): extra_state, directory, keep, group, periodic,
        interval_s, mtbf_s, use_async, poll_every, signal_number, job_id, registry."""
        o = SnapshotOptions.from_keywords(options)
        extra_state, directory, keep, group = o.extra_state, o.directory, o.keep, o.group
        periodic, interval_s, mtbf_s, use_async = o.periodic, o.interval_s, o.mtbf_s, o.use_async
        poll_every, signal_number, job_id, registry = o.poll_every, o.signal_number, o.job_id, o.registry
        self.root = Path(directory)
        self.model, self.optimizer = model, optimizer
        self.extra = ExtraState(extra_state)
        self.keep, self.periodic, self.use_async, self.poll_every = keep, periodic, use_async, poll_every
        self.distributed = dist.is_available() and dist.is_initialized()
        if not self.distributed:  # DCP warns that it saves "in a single process": that is meant
            warnings.filterwarnings("ignore", message="torch.distributed is disabled.*")
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1
        # Two gloo groups: the loop's control collectives and the background writer's must never
        # interleave on one group (they run in different threads).
        self.ctl = (group or dist.new_group(backend="gloo")) if self.distributed else None
        self.io = dist.new_group(backend="gloo") if self.distributed else None
        self.job_id = job_id or os.environ.get("SLURM_JOB_ID")
        self.nodes = _int_env("SLURM_JOB_NUM_NODES", "SLURM_NNODES")
        if mtbf_s is None:
            self.mtbf_s, self.mtbf_source = mtbf_from_env(self.nodes)
        else:
            self.mtbf_s, self.mtbf_source = float(mtbf_s), "argument"
        self.fixed_interval_s = interval_s
        self.cost_s: float | None = None  # measured blocking time (moving average)
        self.last: dict | None = None  # figures of the last committed snapshot
        self.restored: dict | None = None
        self._pending: _Pending | None = None
        self._writer = None
        self._request: dict | None = None
        self._signalled = False
        self._calls = 0
        self._since = time.monotonic()
        self._old_handler = None
        self._signal_number = signal_number
        if self.rank == 0:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SnapshotError(f"cannot create snapshot directory {self.root}: {exc.strerror}") from None
            self._register(registry)
        self._barrier()
        if signal_number is not None and threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(signal_number, self._on_signal)

    # ------------------------------------------------------------ collectives
    def _max(self, values: list[int]) -> list[int]:
        if not self.distributed:
            return values
        t = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.ctl)
        return t.tolist()

    def _barrier(self) -> None:
        if self.distributed:
            self._max([0])

    def _on_signal(self, signum, frame) -> None:
        self._signalled = True  # only a flag: the next step() acts on it
        if callable(self._old_handler):
            self._old_handler(signum, frame)

    def _register(self, registry: str | None) -> None:
        if not self.job_id:
            return
        from fleetctl.snapshot.registry import register

        try:
            register(self.job_id, self.root, self.world, registry)
        except Exception as exc:  # the CLI can still be given the directory; training goes on
            log.warning("fleetctl.snapshot: job %s not registered: %s", self.job_id,
                        getattr(exc, "message", exc))

    # ------------------------------------------------------------ state
    def _model_optim_state(self) -> dict:
        optims = [self.optimizer] if self.optimizer is not None else []
        model_sd, optim_sd = get_state_dict(self.model, optims)
        state = {"model": model_sd}
        if self.optimizer is not None:
            state["optim"] = optim_sd
        return state

    def interval(self) -> float:
        """Seconds between periodic snapshots: Young's sqrt(2 C M), C measured once known."""
        if self.fixed_interval_s is not None:
            return float(self.fixed_interval_s)
        return clamp(young(self.cost_s or DEFAULT_COST_S, self.mtbf_s))

    # ------------------------------------------------------------ the loop's side
    def step(self, iteration: int, *, force: bool = False) -> int | None:
        """Call at every iteration boundary on every rank. Returns `iteration` when a snapshot of it
        started, else None. `force` asks for one now (all ranks must pass the same `force`)."""
        self._calls += 1
        if not force and self._calls % self.poll_every:
            return None
        want = 0  # why a snapshot is wanted, by priority; the all-reduce MAX keeps the strongest
        if self.rank == 0:
            request = take_request(self.root)
            if request:
                self._request = request
            if self._request:
                want = _REQUEST
            elif self.periodic and time.monotonic() - self._since >= self.interval():
                want = _PERIODIC
        if self._signalled:
            want = max(want, _SIGNAL)
        if force:
            want = max(want, _FORCED)
        pending = self._pending
        busy = 1 if pending is not None and not pending.done() else 0
        agreed = self._max([want, busy, int(iteration), -int(iteration)])
        if agreed[2] != -agreed[3]:
            raise SnapshotError(f"ranks called step() with different iterations "
                                f"({-agreed[3]}..{agreed[2]}): snapshots need a common boundary")
        if pending is not None and (not agreed[1] or agreed[0]):
            pending.wait()
            self._commit(pending)
        if not agreed[0]:
            return None
        self._signalled = False
        request, self._request = self._request, None
        reason = (request or {}).get("reason") or _REASONS[agreed[0]]
        return self._start(int(iteration), reason, (request or {}).get("id"))

    def _start(self, step: int, reason: str, request_id: str | None) -> int | None:
        t0 = time.perf_counter()
        final, tmp = self.root / step_name(step), self.root / f"{step_name(step)}.tmp"
        skip = 0
        if self.rank == 0:
            if final.is_dir():
                skip = 1  # already snapshotted (e.g. the step a restore resumed from)
            else:
                catalog.remove(catalog.Entry(step, tmp, False))
                tmp.mkdir()
        if self._max([skip])[0]:  # also the barrier: step_N.tmp exists before anyone writes
            self._since = time.monotonic()
            return None
        torch.save({"iteration": step, "world_size": self.world, "rank": self.rank,
                    "rng": capture_rng(), "extra": self.extra.capture()},
                   tmp / manifest.rank_state_name(self.rank))
        _fsync(tmp / manifest.rank_state_name(self.rank))
        state = self._model_optim_state()
        kwargs = {"storage_writer": self._writer_for(tmp)}
        if self.distributed:
            kwargs["process_group"] = self.io
        else:
            kwargs["no_dist"] = True
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*single process.*")  # no_dist is meant
            if self.use_async and hasattr(dcp, "async_save"):
                response = dcp.async_save(state, **kwargs)  # returns once the state is staged (copied)
                future = getattr(response, "upload_completion", response)
            else:
                dcp.save(state, **kwargs)
                future = None
        pending = _Pending(step, tmp, self.rank, future, reason, request_id, t0)
        pending.blocking_s = time.perf_counter() - t0
        self._pending = pending
        self._since = time.monotonic()
        return step

    def _writer_for(self, tmp: Path):
        """One DCP writer for the job's life, pointed at each new step_N.tmp. On a GPU machine, with async
        saves, it keeps its pinned staging buffers between snapshots (no allocation, no page faults at
        every save); DCP pins that cache, which needs an accelerator, so CPU jobs stage afresh."""
        if self._writer is None:
            self._writer = dcp.FileSystemWriter(str(tmp), sync_files=True,
                                                cache_staged_state_dict=self.use_async
                                                and torch.cuda.is_available())
        else:
            self._writer.reset(str(tmp))
        return self._writer

    def _commit(self, pending: _Pending) -> None:
        """Every rank, once every rank's write is done: gather digests, rank 0 publishes."""
        self._pending = None
        mine = {"files": pending.files, "error": pending.error}
        if self.distributed:
            gathered: list = [None] * self.world
            dist.all_gather_object(gathered, mine, group=self.ctl)
        else:
            gathered = [mine]
        failed = 0
        if self.rank == 0:
            try:
                self._publish(pending, gathered)
            except Exception as exc:
                failed = 1
                log.warning("fleetctl.snapshot: step %d not published: %s", pending.step,
                            getattr(exc, "message", exc))
        failed = self._max([failed])[0]
        total_s = time.perf_counter() - pending.t0
        if not failed:
            self.cost_s = pending.blocking_s if self.cost_s is None else \
                0.5 * self.cost_s + 0.5 * pending.blocking_s
            self.last = {"step": pending.step, "blocking_s": pending.blocking_s, "total_s": total_s,
                         "reason": pending.reason}

    def _publish(self, pending: _Pending, gathered: list[dict]) -> None:
        errors = [g["error"] for g in gathered if g["error"]]
        if errors:
            raise SnapshotError("; ".join(errors[:4]))
        files: dict = {}
        for g in gathered:
            files.update(g["files"])
        present = set(os.listdir(pending.tmp))
        if present != set(files):
            raise SnapshotError(f"files written but not confirmed: {sorted(present - set(files))[:5]}; "
                                f"confirmed but absent: {sorted(set(files) - present)[:5]}")
        size = sum(f["size"] for f in files.values())
        doc = manifest.build(pending.step, self.world, files, job_id=self.job_id, reason=pending.reason,
                             request=pending.request, torch=torch.__version__,
                             blocking_s=round(pending.blocking_s, 6))
        manifest.write(pending.tmp, doc)
        final = self.root / step_name(pending.step)
        os.rename(pending.tmp, final)
        _fsync_dir(self.root)
        write_latest(self.root, pending.step)
        removed = catalog.prune(self.root, self.keep, newest_good=pending.step)
        total_s = time.perf_counter() - pending.t0
        write_status(self.root, {
            "job_id": self.job_id, "world_size": self.world, "nodes": self.nodes, "step": pending.step, "bytes": size,
            "blocking_s": round(pending.blocking_s, 6), "total_s": round(total_s, 6),
            "cost_s": round(self.cost_s or pending.blocking_s, 6), "mtbf_s": self.mtbf_s,
            "mtbf_source": self.mtbf_source, "interval_s": round(self.interval(), 3),
            "updated": time.time()})
        log.info("fleetctl.snapshot: step %d published (%d bytes, blocking %.3f s, total %.3f s, "
                 "pruned %d)", pending.step, size, pending.blocking_s, total_s, len(removed))

    def wait(self) -> None:
        """Finish a save in flight (collective: every rank calls it)."""
        busy = 1 if self._pending is not None else 0
        if self._max([busy])[0] and self._pending is not None:
            self._pending.wait()
            self._commit(self._pending)

    def close(self) -> None:
        self.wait()
        if self._old_handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(self._signal_number, self._old_handler)
            self._old_handler = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.close()

    # ------------------------------------------------------------ restore
    def restore(self) -> int | None:
        """Load the newest verified snapshot (collective); its iteration, or None when there is none.

        Rank 0 verifies every file against the manifest and checks that the snapshot is this user's
        alone (owner, no write bit for others: its index is a pickle), passing over snapshots that
        fail; every rank then loads the one chosen. A snapshot that verifies but fails to load on
        any rank (a DCP CheckpointException, a damaged rank state) is passed over too, for the next
        older one, and the reason logged."""
        below, skipped = None, []
        while True:
            info = self._choose(below)
            skipped += info["skipped"]
            if info["step"] is None:
                self._restored(None, skipped)
                return None
            problem = self._load(info)
            problems = self._gather_text(problem)
            if not any(problems):
                self._restored(info["step"], skipped)
                return info["step"]
            why = "; ".join(p for p in problems if p)[:500]
            log.warning("fleetctl.snapshot: step %d verified but did not load: %s", info["step"], why)
            skipped.append({"step": info["step"], "path": str(self.root / step_name(info["step"])),
                            "reason": f"failed to load: {why}"})
            below = info["step"]

    def _choose(self, below: int | None) -> dict:
        """Rank 0's choice, broadcast: {"step", "skipped", "world"}."""
        payload = [None]
        if self.rank == 0:
            try:
                choice = catalog.choose(self.root, owner=os.geteuid(), below=below)
                world = None
                if choice.step is not None:
                    world = manifest.load(Path(choice.path))["world_size"]
                payload = [{"step": choice.step, "skipped": choice.skipped, "world": world}]
            except SnapshotError as exc:
                payload = [{"error": exc.message}]
        if self.distributed:
            dist.broadcast_object_list(payload, src=0, group=self.ctl)
        info = payload[0]
        if "error" in info:
            raise SnapshotError(f"restore from {self.root}: {info['error']}")
        for skipped in info["skipped"]:
            log.warning("fleetctl.snapshot: not restoring step %s: %s", skipped["step"], skipped["reason"])
        if info["step"] is not None and info["world"] != self.world:
            raise SnapshotError(f"{self.root}/step_{info['step']} was taken by {info['world']} ranks; this "
                                f"job has {self.world} (per-rank RNG and data positions cannot be mapped)")
        return info

    def _load(self, info: dict) -> str:
        """Load step info["step"] into the model, optimizer, RNG and extra state; "" or the problem."""
        from torch.distributed.checkpoint.api import CheckpointException

        from fleetctl.snapshot.safeload import SafeReader

        path = self.root / step_name(info["step"])
        try:
            state = self._model_optim_state()
            kwargs = {"storage_reader": SafeReader(str(path))}
            if self.distributed:
                kwargs["process_group"] = self.io
            else:
                kwargs["no_dist"] = True
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*single process.*")
                dcp.load(state, **kwargs)
            mine = torch.load(path / manifest.rank_state_name(self.rank), weights_only=True)
            if not isinstance(mine, dict) or mine.get("iteration") != info["step"] \
                    or mine.get("rank") != self.rank:
                return f"rank {self.rank}: its rank state does not match the snapshot"
            if self.optimizer is not None:
                set_state_dict(self.model, [self.optimizer], model_state_dict=state["model"],
                               optim_state_dict=state["optim"])
            else:
                set_state_dict(self.model, [], model_state_dict=state["model"], optim_state_dict={})
            restore_rng(mine["rng"])
            self.extra.restore(mine.get("extra") or {})
        except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
            return f"rank {self.rank}: {_describe(exc)}"
        return ""

    def _gather_text(self, text: str) -> list[str]:
        if not self.distributed:
            return [text]
        out: list = [None] * self.world
        dist.all_gather_object(out, text, group=self.ctl)
        return [str(t or "") for t in out]

    def _restored(self, step: int | None, skipped: list[dict]) -> None:
        self.restored = {"step": step, "skipped": skipped, "world": self.world}
        self._since = time.monotonic()
        self._barrier()
        if step is not None:
            log.info("fleetctl.snapshot: restored step %d from %s", step, self.root / step_name(step))


def _describe(exc: BaseException) -> str:
    """One line for a load failure; a DCP CheckpointException by the first error of each rank
    (its str() is every rank's whole traceback)."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        parts = []
        for rank, wrapped in sorted(failures.items())[:4]:
            inner = getattr(wrapped, "exc", wrapped)
            parts.append(f"rank {rank}: {type(inner).__name__}: {str(inner).splitlines()[0][:200] if str(inner) else ''}")
        return f"{type(exc).__name__} ({'; '.join(parts)})"
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def _int_env(*names: str) -> int:
    for name in names:
        raw = os.environ.get(name, "")
        if raw.isdigit() and 0 < int(raw) <= 1_000_000:
            return int(raw)
    return 1


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync(path)
    except OSError:
        pass
