"""The srun transport: one Slurm job step, one task per node, output split per node.

    srun -w NODES -N n --ntasks-per-node=1 --label --kill-on-bad-exit=0 ... /bin/sh -c WRAPPER - CMD...

Each task runs a small wrapper that prints a marker line with its node name first (so the task
number of `--label` maps to a node) and a marker with the command's exit status last, on stderr.
The command itself comes to the wrapper as positional arguments ("$@"), never pasted into the text.

Limits (docs/exec.md): srun allocates all nodes or none, so a down, drained or busy node fails the
whole run (every node gets srun's error); the nodes must be free for a new job (or the run happens
inside a job that holds them); a last output line without a newline gets one; a node's stdout and
stderr are kept apart but their relative order is not; the whole run gets timeout + connect_timeout,
since allocation and launch happen inside it; each node keeps the command's own deadline with
timeout(1) (SIGKILL 1 s after its SIGTERM), so a hung node is told apart from srun trouble.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import time

from fleetctl.fanout.base import OnResult, Transport
from fleetctl.fanout.result import ERROR, FAILED, OK, TIMEOUT, Command, HostResult

MARK = "\x1ffleetctl-"  # unit separator: never starts a line of ordinary output
TIMED_OUT = "timeout"  # the rc marker's value when the node's own deadline stopped the command
KILL_AFTER_S = 1  # SIGKILL this long after the deadline's SIGTERM when the command ignores it
WRAPPER = (
    't="$1"; tcs="$2"; shift 2; '  # the deadline in seconds (for timeout(1)) and in centiseconds
    'n="${SLURMD_NODENAME:-$(hostname -s)}"; '
    f"printf '{MARK}node:%s\\n' \"$n\"; "
    'FLEETCTL_NODE="$n"; export FLEETCTL_NODE; '
    # The deadline is kept on the node by timeout(1): srun's forwarding of our SIGTERM reaches the
    # step's processes one by one, and a shell whose `sleep` died first went on to `echo done` and
    # reported success (seen in CI). A command stopped by the deadline reports "timeout"; one that
    # exits 124 by itself earlier is told apart by the elapsed time (/proc/uptime, 10 ms).
    "stopped=0; trap 'stopped=1' TERM; "
    'u=0.00; read -r u _ </proc/uptime; s="${u%.*}${u#*.}"; '
    'if command -v timeout >/dev/null 2>&1; then '
    f'timeout -k {KILL_AFTER_S} "$t" "$@"; else "$@"; fi; rc=$?; '
    'u=0.00; read -r u _ </proc/uptime; e=$(( ${u%.*}${u#*.} - s )); '
    f'if {{ [ "$rc" = 124 ] || [ "$rc" = 137 ]; }} && [ "$e" -ge "$tcs" ]; then rc={TIMED_OUT}; '
    # A command that outlives srun's forwarded SIGTERM must not end as a success either.
    'elif [ "$stopped" != 0 ]; then rc=143; fi; '
    f"printf '{MARK}rc:%s\\n' \"$rc\" >&2; "
    "exit 0"  # per-node status travels in the marker; srun's own status then means srun trouble
)
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_RC = re.compile(re.escape(MARK) + r"rc:(\d+|" + TIMED_OUT + r")$")
_NODE = re.compile(re.escape(MARK) + r"node:(\S+)$")


class SrunTransport(Transport):
    name = "srun"

    def build_argv(self, nodes: list[str], command: Command, timeout: float, stdin: bool) -> list[str]:
        o = self.options
        from fleetctl.nodeset import fold

        minutes = math.ceil((timeout + o.connect_timeout) / 60) + 1  # Slurm's own backstop
        argv = ["srun", f"--nodelist={fold(nodes)}", f"--nodes={len(nodes)}", "--ntasks-per-node=1",
                "--label", "--kill-on-bad-exit=0", "--wait=0", "--quiet", "--job-name=fleetctl",
                f"--time={minutes}", f"--immediate={max(1, math.ceil(o.connect_timeout))}",
                f"--input={'all' if stdin else 'none'}"]
        if o.srun_partition:
            argv.append(f"--partition={o.srun_partition}")
        argv += list(o.srun_extra_args)
        deadline = f"{timeout:.2f}"
        return argv + ["/bin/sh", "-c", WRAPPER, "fleetctl-srun", deadline, str(round(timeout * 100)),
                       *command.as_argv()]

    def _run(self, nodes: list[str], command: Command, timeout: float, stdin: bytes | None,
             on_result: OnResult) -> list[HostResult]:
        argv = self.build_argv(nodes, command, timeout, stdin is not None)
        env = dict(os.environ)
        if self.options.slurm_conf:
            env["SLURM_CONF"] = self.options.slurm_conf
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        except OSError as exc:
            return _all(nodes, ERROR, f"cannot run srun: {exc.strerror or exc}", 0.0, on_result)
        timed_out = False
        try:
            # The nodes keep the deadline themselves; srun is stopped only when that fails too.
            out, err = proc.communicate(stdin, timeout=timeout + self.options.connect_timeout
                                        + KILL_AFTER_S + 2)
        except subprocess.TimeoutExpired:
            timed_out = True
            out, err = _stop(proc)
        duration = time.monotonic() - start
        tasks = parse_labelled(out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        srun_msgs = [line for line in err.decode("utf-8", "replace").splitlines()
                     if line and not _LABEL.match(line)]
        results = []
        by_node = {t.node: t for t in tasks.values() if t.node}
        for node in nodes:
            task = by_node.get(node)
            # After the timeout srun forwards SIGTERM: a task that then reports 128+signal was
            # killed by us, not failed by itself.
            killed = timed_out and task is not None and task.rc is not None and task.rc >= 128
            if task is not None and task.timed_out:
                r = HostResult(node, TIMEOUT, None, task.stdout(), task.stderr(), duration,
                               f"command timed out after {timeout:g} s")
            elif task is not None and task.rc is not None and not killed:
                r = HostResult(node, OK if task.rc == 0 else FAILED, task.rc, task.stdout(), task.stderr(),
                               duration)
            elif timed_out:
                r = HostResult(node, TIMEOUT, None, task.stdout() if task else "",
                               task.stderr() if task else "", duration,
                               f"command timed out after {timeout:g} s"
                               + ("" if task else " (the task never started)"))
            else:
                why = _srun_error(srun_msgs) or f"srun exited with status {proc.returncode}"
                r = HostResult(node, ERROR, None, task.stdout() if task else "",
                               task.stderr() if task else "", duration,
                               f"no exit status from srun for this node: {why}")
            on_result(r)
            results.append(r)
        return results


class _Task:
    def __init__(self) -> None:
        self.node = ""
        self.rc: int | None = None
        self.timed_out = False  # the node's deadline stopped the command
        self.out: list[str] = []
        self.err: list[str] = []
        self.partial = ""  # the command's last stderr line when it had no newline

    def stdout(self) -> str:
        return "".join(line + "\n" for line in self.out)

    def stderr(self) -> str:
        return "".join(line + "\n" for line in self.err) + self.partial


def parse_labelled(stdout: str, stderr: str) -> dict[int, _Task]:
    """Split `--label` output into tasks, reading the wrapper's node and exit-status markers."""
    tasks: dict[int, _Task] = {}
    for stream, text in (("out", stdout), ("err", stderr)):
        for line in text.splitlines():
            m = _LABEL.match(line)
            if not m:
                continue
            task = tasks.setdefault(int(m.group(1)), _Task())
            content = m.group(2)
            head, sep, tail = content.partition(MARK)
            if sep:
                marker = MARK + tail
                if (node := _NODE.match(marker)) and stream == "out" and not head:
                    task.node = node.group(1)
                    continue
                if (rc := _RC.match(marker)) and stream == "err":
                    task.timed_out = rc.group(1) == TIMED_OUT
                    task.rc = None if task.timed_out else int(rc.group(1))
                    task.partial = head
                    continue
            (task.out if stream == "out" else task.err).append(content)
    return tasks


def _stop(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """Stop srun after the timeout: SIGTERM is forwarded to the tasks; SIGKILL if srun lingers."""
    proc.terminate()
    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _srun_error(lines: list[str]) -> str:
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1].strip()


def _all(nodes: list[str], status: str, message: str, duration: float,
         on_result: OnResult) -> list[HostResult]:
    results = [HostResult(node, status, duration_s=duration, error=message) for node in nodes]
    for r in results:
        on_result(r)
    return results
