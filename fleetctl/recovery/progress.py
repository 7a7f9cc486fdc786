"""Each rank's progress, from inside the training loop: the iteration it reached, when, and how long
its own compute took, written where `fleetctl job watch` reads it (docs/recovery.md).

    progress = Progress.from_env()          # FLEETCTL_PROGRESS_DIR, SLURM_JOB_ID, RANK, the node
    for it in range(start, steps):
        loss = model(batch).backward()      # this rank's own work
        progress.compute_done()             # optional: before the collective, names a straggler
        opt.step()                          # the all-reduce: every rank waits for the slowest
        progress.step(it)

In synchronous data-parallel training every rank's iteration takes as long as the slowest rank's:
iteration times cannot name a straggler, the time before the collective can. A rank that never
calls `compute_done` still reports its iterations (hang detection), not its compute.

Standard library only (no torch): it runs in the job's interpreter. One small file per rank,
replaced atomically every `interval_s` (default 1 s) by a daemon thread: <dir>/<job>/rank-<N>.json.
The thread writes while the loop is stuck too, so the watcher tells a rank that is alive and waiting
in the collective from one that stopped (killed, frozen: its file stops changing).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
from collections import deque

ENV_DIR = "FLEETCTL_PROGRESS_DIR"
RECENT = 32  # iterations kept for the median iteration time (hang threshold)
RECENT_COMPUTE = 128  # iterations kept for the mean compute time (straggler): a slowdown that hits
# some iterations hard (a throttled or preempted CPU) moves the mean, not the median; one long pause
# among 128 iterations moves it little
# ... and at least this long: 128 iterations of 2 ms are a quarter of a second, which the
# scheduler's noise on a busy node makes 20 % slower now and then (28 false event records in a
# clean 30 minutes of the lab's benchmark, most likely so); a slowdown worth naming lasts longer
COMPUTE_SPAN_S = 20.0
MAX_COMPUTE_SAMPLES = 1 << 16  # the span's bound for very fast loops


class ProgressRecord:
    """One rank's progress in memory: what a progress file holds (`document`), and what
    `fleetctl run`'s heartbeat publishes to its control store (recovery.resilient)."""

    def __init__(self, rank: int, node: str = ""):
        self.rank = rank
        self.node = node or socket.gethostname().split(".")[0]
        self.started = time.time()
        self._mark = time.monotonic()  # start of the current iteration
        self._compute: deque[tuple[float, float]] = deque()  # (when, compute s): _add_compute
        self._compute_sum = 0.0
        self._iteration: deque[float] = deque(maxlen=RECENT)
        self.iteration = -1
        self.progress_time = 0.0  # when the last iteration completed (wall clock)
        self.phase, self.phase_since = "compute", time.time()  # compute | collective
        self.version = 0  # moves with every change: a publisher sends only what changed
        self._lock = threading.Lock()

    def compute_done(self) -> None:
        """This rank's own work of the iteration is done (before the collective)."""
        now = time.monotonic()
        with self._lock:
            self._add_compute(now, now - self._mark)
            self.phase, self.phase_since = "collective", time.time()
            self.version += 1

    def _add_compute(self, now: float, seconds: float) -> None:
        """Keep the last RECENT_COMPUTE iterations' compute times, or COMPUTE_SPAN_S of them if
        that is more (at most MAX_COMPUTE_SAMPLES), with their running sum."""
        window = self._compute
        window.append((now, seconds))
        self._compute_sum += seconds
        while len(window) > RECENT_COMPUTE and (now - window[0][0] > COMPUTE_SPAN_S or
                                                len(window) > MAX_COMPUTE_SAMPLES):
            self._compute_sum -= window.popleft()[1]

    def step(self, iteration: int) -> None:
        """Iteration `iteration` is complete."""
        now = time.monotonic()
        with self._lock:
            self._iteration.append(now - self._mark)
            self._mark = now
            self.iteration = iteration
            self.progress_time = time.time()
            self.phase, self.phase_since = "compute", self.progress_time
            self.version += 1

    def resume(self, rank: int, iteration: int) -> None:
        """Training starts again (a new generation of `fleetctl run`), as `rank`, after `iteration`:
        the pause is no iteration's time."""
        with self._lock:
            self.rank, self.iteration = rank, iteration
            self._mark = time.monotonic()
            self.progress_time = time.time()
            self.phase, self.phase_since = "compute", self.progress_time
            self.version += 1

    def document(self, **extra) -> dict:
        with self._lock:
            return {"v": 1, **extra, "rank": self.rank, "node": self.node, "pid": os.getpid(),
                    "iteration": self.iteration, "time": time.time(), "started": self.started,
                    "progress_time": self.progress_time or self.started, "phase": self.phase,
                    "phase_since": self.phase_since, "iteration_s": _median(self._iteration),
                    "compute_s": self._compute_mean(), "samples": len(self._iteration)}

    def _compute_mean(self) -> float | None:
        if not self._compute:
            return None
        return round(max(0.0, self._compute_sum) / len(self._compute), 6)


class Progress:
    def __init__(self, directory: str, job: str, rank: int, node: str = "", interval_s: float = 1.0):
        if not job or not str(job).replace("_", "").replace(".", "").isalnum() or len(str(job)) > 64:
            raise ValueError(f"job id {job!r}: letters, digits, '_' and '.', at most 64")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 1_000_000:
            raise ValueError(f"rank {rank!r}: an integer from 0")
        self.dir = os.path.join(directory, str(job))
        os.makedirs(self.dir, exist_ok=True)
        self.path = os.path.join(self.dir, f"rank-{rank}.json")
        self.job, self.rank = str(job), rank
        self.record = ProgressRecord(rank, node)
        self.node = self.record.node
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="fleetctl-progress", daemon=True)
        self._thread.start()

    @classmethod
    def from_env(cls, interval_s: float = 1.0) -> "Progress | None":
        """From FLEETCTL_PROGRESS_DIR, SLURM_JOB_ID and RANK (or SLURM_PROCID); None when the job
        runs without a progress directory (nothing is written)."""
        directory = os.environ.get(ENV_DIR, "")
        if not directory:
            return None
        rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
        job = os.environ.get("SLURM_JOB_ID", "local")
        return cls(directory, job, rank, os.environ.get("SLURMD_NODENAME", ""), interval_s)

    def compute_done(self) -> None:
        """This rank's own work of the iteration is done (before the collective)."""
        self.record.compute_done()

    def step(self, iteration: int) -> None:
        """Iteration `iteration` is complete."""
        self.record.step(iteration)

    def close(self) -> None:
        """Stop the writer (the file stays: the watcher sees the rank stopped)."""
        self._stop.set()
        self._thread.join(timeout=2 * self.interval_s)
        self.write()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.write()
            except OSError:
                pass  # a full or unreachable directory must never stop training

    def write(self) -> None:
        doc = self.record.document(job=self.job)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(json.dumps(doc))
        os.replace(tmp, self.path)


def _median(values) -> float | None:
    return round(statistics.median(values), 6) if values else None
