"""The local transport: run each node's command on this machine.

With `access.local.netns` set (the emulated lab), each node's command runs inside that node's network
namespace through `nsenter --net=/run/netns/<name>` (not `ip netns exec`, whose private mount namespace
hides /sys/fs/cgroup from Slurm tools). Without it, the command simply runs here once per node: the
single-node `--local` case. FLEETCTL_NODE tells the command which node it stands for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from fleetctl.fanout.base import OnResult, Transport, run_parallel
from fleetctl.fanout.result import ERROR, FAILED, OK, TIMEOUT, UNREACHABLE, Command, HostResult, decode

NETNS_DIR = Path("/run/netns")


class LocalTransport(Transport):
    name = "local"

    def netns_of(self, node: str) -> str:
        """The namespace name of a node ('' when namespaces are not used)."""
        template = self.options.local_netns
        return template.replace("{node}", node) if template else ""

    def _run(self, nodes: list[str], command: Command, timeout: float, stdin: bytes | None,
             on_result: OnResult) -> list[HostResult]:
        return run_parallel(nodes, lambda node: self._one(node, command, timeout, stdin),
                            self.options.concurrency, on_result)

    def _one(self, node: str, command: Command, timeout: float, stdin: bytes | None) -> HostResult:
        start = time.monotonic()
        argv = command.as_argv()
        netns = self.netns_of(node)
        if netns:
            path = NETNS_DIR / netns
            if not path.exists():
                return HostResult(node, UNREACHABLE, error=f"network namespace {netns!r} does not exist "
                                  f"({path})")
            argv = ["nsenter", f"--net={path}", "--", *argv]
        env = dict(os.environ, FLEETCTL_NODE=node)
        try:
            # A session of its own so that a timeout kills the whole process group (a shell's children).
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    start_new_session=True)
        except OSError as exc:
            return HostResult(node, ERROR, duration_s=time.monotonic() - start,
                              error=f"cannot run {argv[0]!r}: {exc.strerror or exc}")
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return HostResult(node, TIMEOUT, None, decode(out), decode(err), time.monotonic() - start,
                              f"command timed out after {timeout:g} s")
        code = proc.returncode
        if code < 0:  # killed by a signal: report it the way a shell would (128 + signal)
            return HostResult(node, FAILED, 128 - code, decode(out), decode(err), time.monotonic() - start,
                              f"killed by signal {signal.Signals(-code).name}")
        return HostResult(node, OK if code == 0 else FAILED, code, decode(out), decode(err),
                          time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
