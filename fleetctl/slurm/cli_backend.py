"""The default Slurm backend: scontrol, sinfo and squeue run as subprocesses (argv lists, no shell).

Works with Slurm 22.05 and 24.11: it only uses `scontrol show ... --oneliner`, `scontrol update /
create / delete / requeue` and `squeue -h -o` with a delimiter (see parse.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

from fleetctl.errors import SlurmError, UsageError
from fleetctl.nodeset import fold
from fleetctl.slurm import parse
from fleetctl.slurm.base import (DrainResult, NodeLookup, Reservation, ResumeResult, SlurmBackend,
                                 SlurmJob, SlurmNode, SlurmUnreachable)
from fleetctl.slurm.reasons import is_ours, make_reason

# stderr fragments that mean slurmctld (or the configuration) cannot be reached at all.
_UNREACHABLE = ("unable to contact slurm controller", "socket timed out", "connection refused",
                "could not establish a configuration source", "slurm_load_partitions",
                "zero bytes were transmitted", "unable to establish controller", " is down")
# scontrol prints this on stdout (exit 1) for each name of a node list it does not know, and the
# records of the others (src/scontrol/info_node.c, 22.05 and 24.11).
_NOT_FOUND = re.compile(r"^Node (\S+) not found$")
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
        proc = self._call(program, *args)
        if proc.returncode != 0:
            raise self._error(" ".join([program, *args]), proc.stderr or proc.stdout)
        return proc.stdout

    def _call(self, program: str, *args: str, clean_job_env: bool = False) -> subprocess.CompletedProcess:
        env = self._env()
        if clean_job_env:
            env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
                   or k == "SLURM_CONF"}
        _check_conf(env.get("SLURM_CONF", ""), "slurm.conf in the site file" if self.slurm_conf else "SLURM_CONF")
        argv = [self._exe(program), *args]
        shown = " ".join([program, *args])
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            said = _last_line(exc.stderr) or _last_line(exc.stdout)
            raise SlurmUnreachable(f"`{shown}` timed out after {self.timeout:g} s"
                                   + (f"; it said: {said}" if said else ": slurmctld not reachable?")) from None
        except OSError as exc:
            raise SlurmError(f"cannot run {program}: {exc}") from None

    def _error(self, shown: str, output: str) -> SlurmError:
        lines = [l.strip() for l in output.strip().splitlines() if l.strip()]
        unreachable = [l for l in lines if any(frag in l.lower() for frag in _UNREACHABLE)]
        detail = (unreachable or lines or ["no output"])[-1]
        if unreachable:
            where = f" (SLURM_CONF={self.slurm_conf})" if self.slurm_conf else ""
            return SlurmUnreachable(f"slurmctld not reachable{where}: {detail}",
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

    def lookup(self, nodes: list[str]) -> NodeLookup:
        """One `scontrol show node LIST`: Slurm prints the nodes it knows and `Node X not found`
        for the others (exit 1); both are kept, so one unknown name never hides the rest."""
        out = NodeLookup()
        if not nodes:
            return out
        shown = f"scontrol show node {fold(nodes)} --oneliner"
        proc = self._call("scontrol", "show", "node", fold(nodes), "--oneliner")
        records, missing = [], []
        for line in proc.stdout.splitlines():
            m = _NOT_FOUND.match(line.strip())
            if m:
                missing.append(m.group(1))
            elif line.strip():
                records.append(line)
        if proc.returncode != 0 and not missing:
            raise self._error(shown, proc.stderr or proc.stdout)
        out.found = {n.name: n for n in parse.parse_nodes("\n".join(records)) if n.name in nodes}
        out.unknown = [n for n in nodes if n not in out.found]
        return out

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
        known = self.lookup(nodes)
        for name in known.unknown:
            result.skipped[name] = "not known to Slurm (not in slurm.conf?): not drained"
        for node in known.found.values():
            if node.reason and not force and not is_ours(node.reason, self.drain_prefix):
                result.skipped[node.name] = (f"already {node.state_text.lower()} with reason "
                                             f"{node.reason!r} (not fleetctl's): left as is")
            else:
                result.drained.append(node.name)
        if result.drained:
            self.run("scontrol", "update", f"NodeName={fold(result.drained)}", "State=DRAIN",
                     f"Reason={result.reason}")
        return result

    def resume(self, nodes: list[str], *, wait_s: float = 10.0) -> ResumeResult:
        result = ResumeResult()
        prefix = f"{self.drain_prefix}:"
        ours: list[str] = []
        known = self.lookup(nodes)
        for name in known.unknown:
            result.refused[name] = "not known to Slurm (not in slurm.conf?)"
        for node in known.found.values():
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
            result.not_responding = self.wait_responding(ours, wait_s) if wait_s > 0 else []
        return result

    def wait_responding(self, names: list[str], wait_s: float = 10.0) -> list[str]:
        """The nodes still NOT_RESPONDING after up to `wait_s` seconds (polled every 0.2 s)."""
        deadline = time.monotonic() + wait_s
        while True:
            silent = [n.name for n in self.nodes(names) if "NOT_RESPONDING" in n.flags]
            if not silent or time.monotonic() >= deadline:
                return silent
            time.sleep(0.2)

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

    def reboot(self, nodes: list[str], reason: str) -> None:
        if not nodes:
            raise UsageError("reboot: no nodes given")
        if "\n" in reason or len(reason) > 1024:
            raise UsageError("reboot: the reason must be one line of at most 1024 characters")
        # ASAP: drained meanwhile, rebooted once its jobs end; nextstate=RESUME: back in service
        # when slurmd registers after the reboot (its health check runs first).
        self.run("scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", fold(nodes))

    def cancel_reboot(self, nodes: list[str]) -> None:
        if not nodes:
            raise UsageError("cancel_reboot: no nodes given")
        self.run("scontrol", "cancel_reboot", fold(nodes))

    def signal_job(self, job_id: str, signal: str) -> None:
        _check_job_id(job_id)
        if not re.fullmatch(r"[A-Z0-9]{1,8}", signal):
            raise UsageError(f"invalid signal name {signal[:16]!r}")
        self.run("scancel", f"--signal={signal}", str(job_id))

    # ---- jobs fleetctl submits for a user (`fleetctl run --replenish`: a replacement standby)
    def submit(self, script: str, args: list[str]) -> str:
        """`sbatch --parsable ARGS SCRIPT` (a file; sbatch copies it at submission); the new job's id.
        Called from inside a job: the caller's SLURM_*, SBATCH_*, SRUN_* and SALLOC_* variables are
        left out, or sbatch would read them as the new job's options and the job would see the old
        job's geometry."""
        if any(not isinstance(a, str) or "\n" in a or len(a) > 4096 for a in args) or len(args) > 64:
            raise UsageError("sbatch arguments: at most 64, each one line of at most 4096 characters")
        proc = self._call("sbatch", "--parsable", *args, script, clean_job_env=True)
        if proc.returncode != 0:
            raise self._error(" ".join(["sbatch", *args]), proc.stderr or proc.stdout)
        job_id = proc.stdout.strip().split(";")[0]  # "ID" or "ID;cluster"
        _check_job_id(job_id)
        return job_id

    def cancel(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            _check_job_id(job_id)
        if job_ids:
            self.run("scancel", "--quiet", *job_ids)  # --quiet: one that ended is no error

    # ---- moving a job off a node (fleetctl spares swap); Slurm 22.05 and 24.11 alike
    def job_record(self, job_id: str) -> dict[str, str]:
        """The job's `scontrol show job --oneliner` fields ({} when Slurm no longer knows it)."""
        _check_job_id(job_id)
        proc = self._call("scontrol", "show", "job", str(job_id), "--oneliner")
        if proc.returncode != 0:
            text = (proc.stderr or proc.stdout).lower()
            if "invalid job id" in text:
                return {}
            raise self._error(f"scontrol show job {job_id}", proc.stderr or proc.stdout)
        lines = [l for l in proc.stdout.splitlines() if l.strip()]
        return parse.parse_record(lines[0]) if lines else {}

    def requeue_excluding(self, job_id: str, exclude: list[str], *, wait_s: float = 30.0,
                          hold_until_eligible_s: float = 300.0, allow: list[str] = ()) -> None:
        """Requeue a running batch job so that it never lands on `exclude` again.

        ExcNodeList can only be changed while a job is pending, so: requeuehold (the job leaves its
        nodes and waits, held), add the nodes to its ExcNodeList, release it."""
        _check_job_id(job_id)
        if not exclude:
            raise UsageError(f"requeue of job {job_id}: no node to exclude")
        before = self.job_record(job_id)
        # The excluded node is left out: the job never runs there again, and it may be unreachable.
        old_nodes = [n for n in parse.expand_nodelist(before.get("NodeList", "(null)"))
                     if n not in set(exclude)] if before else []
        self.run("scontrol", "requeuehold", str(job_id))
        deadline = time.monotonic() + wait_s
        while True:
            rec = self.job_record(job_id)
            if not rec:
                raise SlurmError(f"job {job_id} disappeared while being requeued")
            # Pending is not enough: its old nodes must be done with it (steps killed, epilogs run),
            # or slurmd refuses to launch the same job id again and the job fails.
            completing = [n.name for n in self.nodes(old_nodes) if "COMPLETING" in n.states] if old_nodes else []
            if rec.get("JobState", "").upper() == "PENDING" and not completing:
                break
            if time.monotonic() >= deadline:
                raise SlurmError(f"job {job_id} still {rec.get('JobState')} {wait_s:g} s after requeuehold "
                                 "(held: release it by hand with scontrol release)")
            time.sleep(0.2)
        current = rec.get("ExcNodeList", "")
        names = set(exclude)
        if current and current not in parse.NULL:
            names.update(parse.expand_nodelist(current))
        # A node excluded by an earlier swap may be back (repaired, a spare again) and be the very
        # spare released for this one: `allow` takes it off the list.
        names -= set(allow) - set(exclude)
        # Slurm holds a requeued job back for the credential lifetime (AuthInfo cred_expire, default
        # 120 s; slurmd refuses the same job id before): never force an earlier start, it fails the job.
        update = [f"ExcNodeList={fold(sorted(names))}"]
        required = rec.get("ReqNodeList", "")
        if required and required not in parse.NULL:  # a job pinned to the bad node (-w) could never start
            kept = [n for n in parse.expand_nodelist(required) if n not in names]
            if len(kept) != len(parse.expand_nodelist(required)):
                update.append(f"ReqNodeList={fold(kept) if kept else ''}")
        self.run("scontrol", "update", f"JobId={job_id}", *update)
        # Released at once, the job would start at Slurm's next scheduling pass after its eligible
        # time (up to sched_interval later); released when it becomes eligible, it is scheduled then.
        delay = _seconds_until(self.job_record(job_id).get("EligibleTime", ""))
        if 0 < delay <= hold_until_eligible_s:
            time.sleep(delay + 0.2)
        self.run("scontrol", "release", str(job_id))

    def release(self, job_id: str) -> None:
        _check_job_id(job_id)
        self.run("scontrol", "release", str(job_id))

    def _one_reservation(self, name: str) -> Reservation:
        found = self.reservations(name)
        if not found:
            raise SlurmError(f"reservation {name!r} not found after the change")
        return found[0]


def _check_conf(path: str, where: str) -> None:
    """A slurm.conf named explicitly must be there: Slurm's commands retry a missing one for 60 s
    before saying so. (Without a path Slurm finds its own, or asks slurmctld: configless mode.)"""
    if path and not os.path.isfile(path):
        why = "no such file" if not os.path.exists(path) else "not a regular file"
        raise SlurmError(f"slurm.conf {path}: {why} ({where})",
                         hint="point slurm.conf in the site file (or SLURM_CONF) at the cluster's slurm.conf")


def _last_line(output) -> str:
    if isinstance(output, bytes):
        output = output.decode("utf-8", "replace")
    lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _seconds_until(stamp: str) -> float:
    """Seconds from now to a Slurm time stamp (local time, 2026-12-01T06:38:41); 0 if none or past."""
    try:
        return max(0.0, time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) - time.time())
    except (ValueError, OverflowError):
        return 0.0


def _check_job_id(job_id: str) -> None:
    if not re.match(r"^[0-9]{1,20}(_[0-9]{1,20})?$", str(job_id)):
        raise UsageError(f"invalid job id {job_id!r}")


def _check_name(name: str) -> None:
    if not _RES_NAME.match(name or ""):
        raise UsageError(f"invalid reservation name {name!r}: letters, digits, '_', '.', '-' only")


def _flags(flags) -> str:
    for flag in flags:
        if not _RES_FLAGS.match(flag):
            raise UsageError(f"invalid reservation flag {flag!r}")
    return ",".join(f.upper() for f in flags)
