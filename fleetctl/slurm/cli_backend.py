"""The default Slurm backend: scontrol, sinfo and squeue run as subprocesses (argv lists, no shell).

Works with Slurm 22.05 and 24.11: it only uses `scontrol show ... --oneliner`, `scontrol update /
create / delete / requeue` and `squeue -h -o` with a delimiter (see parse.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from fleetctl.errors import SlurmError, UsageError
from fleetctl.nodeset import fold
from fleetctl.slurm import parse
from fleetctl.slurm.base import (DrainResult, Reservation, ResumeResult, SlurmBackend, SlurmJob,
                                 SlurmNode)
from fleetctl.slurm.reasons import is_ours, make_reason

# stderr fragments that mean slurmctld (or the configuration) cannot be reached at all.
_UNREACHABLE = ("unable to contact slurm controller", "socket timed out", "connection refused",
                "could not establish a configuration source", "slurm_load_partitions",
                "zero bytes were transmitted", "unable to establish controller", " is down")
_RES_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_RES_FLAGS = re.compile(r"^[A-Za-z_]+$")


class CliBackend(SlurmBackend):
    name = "cli"

    def __init__(self, *, drain_prefix: str = "fleetctl", slurm_conf: str = "",
                 timeout: float = 30.0, bindir: str = ""):
        super().__init__(drain_prefix=drain_prefix)
        self.slurm_conf = slurm_conf
        self.timeout = timeout
        self.bindir = bindir

    # ---- running commands
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        # Stable, unlocalised output and no user-configured output formats.
        env["LC_ALL"] = "C"
        for var in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SINFO_FORMAT", "SQUEUE_SORT", "SLURM_TIME_FORMAT"):
            env.pop(var, None)
        return env

    def _exe(self, program: str) -> str:
        path = os.path.join(self.bindir, program) if self.bindir else shutil.which(program)
        if not path or not os.path.exists(path):
            raise SlurmError(f"{program} not found{' in ' + self.bindir if self.bindir else ' on PATH'}",
                             hint="install the Slurm client commands (Debian: slurm-client)")
        return path

    def run(self, program: str, *args: str) -> str:
        argv = [self._exe(program), *args]
        shown = " ".join([program, *args])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  env=self._env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"`{shown}` timed out after {self.timeout:g} s: slurmctld not reachable?") from None
        except OSError as exc:
            raise SlurmError(f"cannot run {program}: {exc}") from None
        if proc.returncode != 0:
            raise self._error(shown, proc.stderr or proc.stdout)
        return proc.stdout

    def _error(self, shown: str, output: str) -> SlurmError:
        lines = [l.strip() for l in output.strip().splitlines() if l.strip()]
        unreachable = [l for l in lines if any(frag in l.lower() for frag in _UNREACHABLE)]
        detail = (unreachable or lines or ["no output"])[-1]
        if unreachable:
            where = f" (SLURM_CONF={self.slurm_conf})" if self.slurm_conf else ""
            return SlurmError(f"slurmctld not reachable{where}: {detail}",
                              hint="is slurmctld running, and is slurm.conf (slurm.conf in the site "
                                   "file, or SLURM_CONF) the right one?")
        return SlurmError(f"`{shown}` failed: {detail}")

    # ---- reading
    def ping(self) -> str:
        out = self.run("scontrol", "ping")
        if " is UP" not in out:
            raise SlurmError(f"slurmctld not reachable: {out.strip() or 'scontrol ping says nothing'}")
        text = self.run("scontrol", "--version").strip()  # "slurm 24.11.1", Debian: "slurm-wlm 22.05.8"
        m = re.search(r"\d+\.\d+[\w.\-]*", text)
        return m.group(0) if m else text

    def nodes(self, nodes: list[str] | None = None) -> list[SlurmNode]:
        args = ["show", "node", "--oneliner"]
        if nodes is not None:
            if not nodes:
                return []
            args.insert(2, fold(nodes))
        return parse.parse_nodes(self.run("scontrol", *args))

    def jobs(self, *, job_ids: list[str] | None = None, nodes: list[str] | None = None,
             states: list[str] | None = None) -> list[SlurmJob]:
        args = ["-h", "-o", parse.SQUEUE_FORMAT]
        if job_ids:
            args += ["-j", ",".join(str(j) for j in job_ids)]
        if nodes:
            args += ["-w", fold(nodes)]
        if states:
            args += ["-t", ",".join(states)]
        return parse.parse_squeue(self.run("squeue", *args))

    def reservations(self, name: str | None = None) -> list[Reservation]:
        args = ["show", "reservation", "--oneliner"]
        if name:
            _check_name(name)
            args.insert(2, name)
        try:
            return parse.parse_reservations(self.run("scontrol", *args))
        except SlurmError as exc:
            if name and "not found" in exc.message.lower():
                return []
            raise

    # ---- changing
    def drain(self, nodes: list[str], code: str, text: str = "", *, force: bool = False) -> DrainResult:
        if not nodes:
            raise UsageError("drain: no nodes given")
        result = DrainResult(make_reason(self.drain_prefix, code, text))
        for node in self.nodes(nodes):
            if node.reason and not force and not is_ours(node.reason, self.drain_prefix):
                result.skipped[node.name] = (f"already {node.state_text.lower()} with reason "
                                             f"{node.reason!r} (not fleetctl's): left as is")
            else:
                result.drained.append(node.name)
        if result.drained:
            self.run("scontrol", "update", f"NodeName={fold(result.drained)}", "State=DRAIN",
                     f"Reason={result.reason}")
        return result

    def resume(self, nodes: list[str]) -> ResumeResult:
        result = ResumeResult()
        prefix = f"{self.drain_prefix}:"
        ours: list[str] = []
        for node in self.nodes(nodes):
            if not is_ours(node.reason, self.drain_prefix):
                why = (f"reason {node.reason!r} was not written by fleetctl (no {prefix!r} prefix)"
                       if node.reason else "no drain reason: not drained by fleetctl")
                result.refused[node.name] = why
            elif not (node.drained or node.state in ("DOWN", "FAIL") or "FAIL" in node.flags):
                result.refused[node.name] = f"state {node.state_text}: not drained or down"
            else:
                ours.append(node.name)
        if ours:
            self.run("scontrol", "update", f"NodeName={fold(ours)}", "State=RESUME")
            result.resumed = ours
        return result

    def create_reservation(self, name: str, nodes: list[str], *, flags=(), users=(),
                           start: str = "now", duration: str = "infinite",
                           partition: str = "") -> Reservation:
        _check_name(name)
        if not nodes:
            raise UsageError(f"reservation {name}: no nodes given")
        args = ["create", "reservation", f"ReservationName={name}", f"Nodes={fold(nodes)}",
                f"StartTime={start}", f"Duration={duration}",
                f"Users={','.join(users) if users else 'root'}"]
        if flags:
            args.append(f"Flags={_flags(flags)}")
        if partition:
            args.append(f"PartitionName={partition}")
        self.run("scontrol", *args)
        return self._one_reservation(name)

    def update_reservation(self, name: str, *, nodes=None, flags=None, users=None,
                           duration=None) -> Reservation:
        _check_name(name)
        args = ["update", f"ReservationName={name}"]
        if nodes is not None:
            args.append(f"Nodes={fold(nodes)}")
        if flags is not None:
            args.append(f"Flags={_flags(flags)}")
        if users is not None:
            args.append(f"Users={','.join(users)}")
        if duration is not None:
            args.append(f"Duration={duration}")
        if len(args) == 2:
            raise UsageError(f"reservation {name}: nothing to update")
        self.run("scontrol", *args)
        return self._one_reservation(name)

    def delete_reservation(self, name: str) -> None:
        _check_name(name)
        self.run("scontrol", "delete", f"ReservationName={name}")

    def requeue(self, job_id: str, *, hold: bool = False) -> None:
        if not re.match(r"^[0-9]+(_[0-9]+)?$", str(job_id)):
            raise UsageError(f"invalid job id {job_id!r}")
        self.run("scontrol", "requeuehold" if hold else "requeue", str(job_id))

    def _one_reservation(self, name: str) -> Reservation:
        found = self.reservations(name)
        if not found:
            raise SlurmError(f"reservation {name!r} not found after the change")
        return found[0]


def _check_name(name: str) -> None:
    if not _RES_NAME.match(name or ""):
        raise UsageError(f"invalid reservation name {name!r}: letters, digits, '_', '.', '-' only")


def _flags(flags) -> str:
    for flag in flags:
        if not _RES_FLAGS.match(flag):
            raise UsageError(f"invalid reservation flag {flag!r}")
    return ",".join(f.upper() for f in flags)
