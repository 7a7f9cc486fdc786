"""Replacing a used standby (`fleetctl run --replenish N`).

A Slurm job step cannot take a node back, so a standby used is gone for the rest of the allocation.
The launcher of slot 0 asks Slurm for a new one the way any user would: one `sbatch` per standby
used (at most N over the run), a one-node job whose script runs

    fleetctl run --join STORE -- COMMAND ...

with the same training command. When it starts, its launcher takes the next slot from the control
store (`control.join_slot`) and its process stands by warm like the job's own standbys; the
controller sees it within a second. Where its node comes from is the site's choice, given in
`--replenish-args` (a partition, a reservation of spares the user may use, a time limit, an
account). The run's end cancels the replacement jobs still queued or standing by; one that became a
training rank ends with the run like any other.

Submission runs in a thread: the controller never waits for slurmctld.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import tempfile
import threading

from fleetctl.errors import FleetctlError

log = logging.getLogger("fleetctl.recovery")
SUBMIT_WAIT_S = 30.0  # at the run's end, for a submission in flight (its job is then cancelled too)


def join_script(store: str, command: list[str], collective_timeout_s: float, python: str = sys.executable) -> str:
    """The replacement job's batch script: one `exec` of quoted words, nothing a shell expands."""
    argv = [python, "-m", "fleetctl", "run", "--join", store, "--collective-timeout", f"{collective_timeout_s:g}",
            "--", *command]
    return "#!/bin/sh\n# a replacement standby for a `fleetctl run` job (fleetctl.recovery.replenish)\n" \
           f"exec {shlex.join(argv)}\n"


class Replenisher:
    def __init__(self, budget: int, sbatch_args: list[str], store: str, command: list[str], job: str,
                 collective_timeout_s: float, backend=None):
        if backend is None:
            from fleetctl.slurm.cli_backend import CliBackend

            backend = CliBackend()
        self.budget, self.backend = budget, backend
        name = f"{job or 'fleetctl-run'}.standby"[:64]
        self.args = ["-N1", "-n1", f"--job-name={name}", *sbatch_args]
        self.script = join_script(store, command, collective_timeout_s)
        self.submitted: list[str] = []  # job ids
        self.failures: list[str] = []
        self._seen_gen = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def after(self, plan) -> None:
        """Called with the controller's newest plan: one replacement per standby it used."""
        if plan is None or plan.gen <= self._seen_gen or plan.end:
            return
        self._seen_gen = plan.gen
        used = len(plan.lost)
        with self._lock:
            n = min(used, self.budget - len(self.submitted) - len(self._threads))
        for _ in range(max(0, n)):
            thread = threading.Thread(target=self._submit, name="fleetctl-replenish", daemon=True)
            with self._lock:
                self._threads.append(thread)
            thread.start()

    def _submit(self) -> None:
        path = None
        try:
            with tempfile.NamedTemporaryFile("w", prefix="fleetctl-standby-", suffix=".sh", delete=False) as f:
                f.write(self.script)
                path = f.name
            job_id = self.backend.submit(path, self.args)
            with self._lock:
                self.submitted.append(job_id)
            log.warning("fleetctl run: a standby was used: submitted job %s for a new one", job_id)
        except (FleetctlError, OSError) as exc:
            text = getattr(exc, "message", None) or str(exc)
            with self._lock:
                self.failures.append(text[:300])
            log.warning("fleetctl run: could not submit a replacement standby: %s", text[:300])
        finally:
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            with self._lock:
                self._threads = [t for t in self._threads if t is not threading.current_thread()]

    def cancel(self) -> None:
        """The run ended: cancel every replacement job (queued, standing by, or already ended)."""
        for thread in list(self._threads):
            thread.join(SUBMIT_WAIT_S)
        with self._lock:
            ids = list(self.submitted)
        if not ids:
            return
        try:
            self.backend.cancel(ids)
        except FleetctlError as exc:
            log.warning("fleetctl run: could not cancel the replacement standby jobs %s: %s", ",".join(ids),
                        exc.message[:300])

    def to_dict(self) -> dict:
        with self._lock:
            return {"budget": self.budget, "submitted": list(self.submitted), "failures": list(self.failures)}
