"""A lab for the length of a `with` block: exclusive across processes, always torn down.

Used by the pytest session fixture and the benchmarks. The session lock (/run/fleetctl-lab.lock) makes
two test runs on one machine take turns instead of tearing down each other's lab; SIGTERM and SIGHUP
are turned into KeyboardInterrupt so that the teardown runs when a run is killed politely.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.lab import lifecycle, paths, state
from fleetctl.lab.topology import LabLayout, LabParams, build_layout


@dataclass
class Lab:
    """What a test needs to use the running lab."""

    params: LabParams
    layout: LabLayout
    state: dict
    lab_dir: Path
    site_file: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def cluster(self):
        from fleetctl.config import load_site

        return load_site(self.site_file)

    @property
    def nodes(self) -> list[str]:
        return [h.name for h in self.layout.hosts]

    def netns(self, node_or_switch: str) -> str:
        return self.state["addresses"]["netns"][node_or_switch]

    def run_in(self, where: str, cmd: list[str], *, timeout: float = 60, check: bool = True,
               **kwargs) -> subprocess.CompletedProcess:
        """Run a command in a host's or switch's network namespace (and the host's hostname)."""
        prefix = ["nsenter", f"--net=/run/netns/{self.netns(where)}"]
        uts = self.state.get("uts", {}).get(where)
        if uts:
            prefix.append(f"--uts={uts}")
        return subprocess.run(prefix + cmd, capture_output=True, text=True, timeout=timeout,
                              check=check, env={**os.environ, **self.env}, **kwargs)

    def command_env(self) -> dict[str, str]:
        """os.environ plus SLURM_CONF and FLEETCTL_SITE of the lab, for subprocesses."""
        return {**os.environ, **self.env}


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


class LabSession:
    def __init__(self, params: LabParams, lock_timeout: float = 1800.0):
        self.params = params
        self.lock_timeout = lock_timeout
        self._fd: int | None = None
        self._old_handlers: dict = {}

    def __enter__(self) -> Lab:
        self._fd = os.open(state.SESSION_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks while another session runs
        os.environ["FLEETCTL_LAB_SESSION"] = "1"
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)
        try:
            current = state.load()
            if current and current.get("params") != self.params.to_dict():
                lifecycle.down()
            st = lifecycle.up(self.params)
        except BaseException:
            self._release()
            raise
        return Lab(self.params, build_layout(self.params), st, paths.lab_dir(), paths.site_file(),
                   lifecycle.env())

    def __exit__(self, *exc) -> None:
        try:
            lifecycle.down()
        finally:
            self._release()

    def _release(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        os.environ.pop("FLEETCTL_LAB_SESSION", None)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
