"""Asking jobs for snapshots and waiting for the answers: the one request-and-wait loop, used by
`fleetctl snapshot take --wait` (one job) and act's snapshot action (every job on a failing node at
once: the requests go out together and the wait is one deadline for all, so 64 jobs cost one
timeout, not 64).

An answer to request R is the snapshot LATEST names when its manifest carries R; without a request
(a signal only), the first snapshot LATEST names that is newer than the one before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fleetctl.errors import FleetctlError, SnapshotError
from fleetctl.snapshot import manifest
from fleetctl.snapshot.layout import REQUEST, read_latest, step_name, write_request

POLL_S = 0.2


@dataclass
class Ask:
    """One job asked for a snapshot: where, with which request, and what came of it."""

    root: Path
    request_id: str | None = None
    newer_than: int | None = None  # signal only: the step LATEST named before
    answer: dict | None = None  # {"step", "path"} once published
    problem: str | None = None  # why it was not asked (the request could not be written)

    def check(self) -> bool:
        """Whether the answer is there now (one read of LATEST and, with a request, its manifest)."""
        try:
            latest = read_latest(self.root)
        except FleetctlError:
            return False
        if latest is None:
            return False
        path = self.root / step_name(latest)
        if self.request_id is None:
            if self.newer_than is None or latest > self.newer_than:
                self.answer = {"step": latest, "path": str(path)}
        else:
            try:
                doc = manifest.load(path)
            except FleetctlError:
                return False
            if doc.get("request") == self.request_id:
                self.answer = {"step": latest, "path": str(path)}
        return self.answer is not None

    def timeout_error(self, timeout_s: float) -> SnapshotError:
        if self.request_id is None:
            return SnapshotError(f"no new snapshot within {timeout_s:g} s after the signal",
                                 hint="does every step of the job run the Snapshotter with its "
                                      "SIGUSR2 handler?")
        queued = (self.root / REQUEST).exists()
        return SnapshotError(f"no snapshot answered request {self.request_id} within {timeout_s:g} s "
                             "(the job goes on from its previous snapshot)",
                             hint="the job has not picked the request up (is it running, and does it "
                                  "call Snapshotter.step()?)" if queued else
                                  "the job took the request; the snapshot is still being written or "
                                  "failed (see the job's log)")


def ask(root: Path, reason: str = "request", *, write: bool = True) -> Ask:
    """Write a request into `root` (or, with write=False, note LATEST for a signal-only ask). A
    request that cannot be written is the Ask's `problem`, never an exception."""
    root = Path(root)
    if not write:
        try:
            return Ask(root, newer_than=read_latest(root))
        except FleetctlError as exc:
            return Ask(root, problem=exc.message)
    try:
        return Ask(root, request_id=write_request(root, reason))
    except FleetctlError as exc:
        return Ask(root, problem=exc.message)
    except OSError as exc:
        return Ask(root, problem=f"{root}: cannot write the request: {exc.strerror or exc}")


def wait_all(asks: list[Ask], timeout_s: float, *, poll_s: float = POLL_S, clock=time.monotonic,
             sleep=time.sleep) -> None:
    """Poll every open ask until each has its answer or `timeout_s` has passed (one deadline for
    all). Asks with a problem are not waited for."""
    deadline = clock() + max(0.0, timeout_s)
    while True:
        open_asks = [a for a in asks if a.problem is None and a.answer is None and not a.check()]
        if not open_asks or clock() >= deadline:
            return
        sleep(min(poll_s, max(0.0, deadline - clock())))


def request_snapshot(root: Path, *, reason: str = "request", job_id: str | None = None, backend=None,
                     write: bool = True, wait_s: float | None = None) -> dict:
    """`fleetctl snapshot take`: write a request (unless `write` is False), signal the job's steps
    with SIGUSR2 through `backend` when given, and wait up to `wait_s` for the answer. The backend is
    checked before anything is written."""
    if not write and backend is None:
        raise SnapshotError("--no-request needs --signal (otherwise nothing asks the job)")
    if backend is not None and job_id is None:
        raise SnapshotError("--signal needs a job id, not a directory")
    asked = ask(root, reason, write=write)
    if asked.problem:
        raise SnapshotError(asked.problem)
    if backend is not None:
        backend.signal_job(job_id, "USR2")
    out = {"job_id": job_id, "directory": str(root), "request": asked.request_id,
           "signalled": backend is not None, "snapshot": None}
    if wait_s is not None:
        wait_all([asked], wait_s)
        if asked.answer is None:
            raise asked.timeout_error(wait_s)
        out["snapshot"] = asked.answer
    return out
