"""Long-running commands with their output read line by line while they run (the lens agents).

    stream = open_stream(transport, "node3", ["python3", "-"], stdin=script)
    for line in stream.lines():      # blocks; ends when the command's output ends
        ...
    stream.stop()

`Transport.run` waits for every node to finish; a continuous probe agent never does. A stream is
one node's command over the same transport and options (local with its network namespace, ssh
with the site's keys and host-key policy, srun as one task). The standard input is written once
and closed; standard error is kept (bounded) for the report when the command dies.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import threading
from collections import deque

from fleetctl.errors import TransportError
from fleetctl.fanout.result import Command

MAX_LINE = 1 << 20  # a longer line is cut: a stream's lines are short by contract
STDERR_LINES = 50


class Stream:
    """One node's running command. `lines()` yields its stdout lines; `exit_code()` is None while
    it runs; `stop()` ends it (idempotent); `stderr_tail()` its last lines of standard error."""

    def __init__(self, node: str):
        self.node = node
        self._err: deque[str] = deque(maxlen=STDERR_LINES)

    def lines(self):
        raise NotImplementedError

    def exit_code(self) -> int | None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def stderr_tail(self) -> list[str]:
        return list(self._err)

    def _drain_err(self, readline) -> None:
        for raw in iter(readline, b""):
            self._err.append(raw[:500].decode(errors="replace").rstrip())


class ProcessStream(Stream):
    """A local process (local transport, or srun on this machine)."""

    def __init__(self, node: str, argv: list[str], stdin: bytes | None, env: dict | None = None,
                 label: bool = False):
        super().__init__(node)
        self.label = label  # srun --label: strip the "0: " prefix
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            raise TransportError(f"{node}: cannot run {argv[0]!r}: {exc.strerror or exc}") \
                from None
        threading.Thread(target=self._feed, args=(stdin or b"",), daemon=True).start()
        threading.Thread(target=self._drain_err, args=(self.proc.stderr.readline,),
                         daemon=True).start()

    def _feed(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.close()
        except OSError:
            pass

    def lines(self):
        for raw in iter(lambda: self.proc.stdout.readline(MAX_LINE), b""):
            line = raw.decode(errors="replace")
            if self.label:
                head, sep, rest = line.partition(": ")
                line = rest if sep and head.strip().isdigit() else line
            yield line

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


class SshStream(Stream):
    """A command over the ssh transport's own connection (keys, host-key policy, jump host)."""

    def __init__(self, transport, node: str, command: Command, stdin: bytes | None):
        super().__init__(node)
        import time

        from fleetctl.fanout.ssh import HostFailure

        transport._prepare()
        try:
            self.t = transport._connect(node, time.monotonic()
                                        + transport.options.connect_timeout)
            self.chan = self.t.open_session(timeout=max(0.1, transport.options.connect_timeout))
            self.token = secrets.token_hex(8)
            self.chan.exec_command(f"FLEETCTL_NODE={shlex.quote(node)}; FLEETCTL_RUN={self.token};"
                                   f" export FLEETCTL_NODE FLEETCTL_RUN; {command.as_shell()}")
            if stdin:
                self.chan.sendall(stdin)
            self.chan.shutdown_write()
        except HostFailure as exc:
            raise TransportError(f"{node}: {exc.message}") from None
        except Exception as exc:  # noqa: BLE001 - paramiko's errors: one line naming the node
            raise TransportError(f"{node}: cannot start the command over ssh: {exc}") from None
        self._stopped = False
        threading.Thread(target=self._drain_err, args=(self._err_lines,), daemon=True).start()

    def _err_lines(self):
        try:
            return self.chan.makefile_stderr("rb").readline() if not self._stopped else b""
        except Exception:  # noqa: BLE001 - a closed channel ends the tail
            return b""

    def lines(self):
        f = self.chan.makefile("rb")
        while True:
            try:
                raw = f.readline(MAX_LINE)
            except Exception:  # noqa: BLE001 - a dropped connection ends the stream
                return
            if not raw:
                return
            yield raw.decode(errors="replace")

    def exit_code(self) -> int | None:
        if self.chan.exit_status_ready():
            return self.chan.recv_exit_status()
        return -1 if self.chan.closed or not self.t.is_active() else None

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        from fleetctl.fanout.ssh import _kill, _reap

        if not self.chan.exit_status_ready():
            _kill(self.chan)
            _reap(self.t, self.token)
        self.t.close()


def open_stream(transport, node: str, argv: list[str], stdin: bytes | str | None = None) -> Stream:
    """Start `argv` on `node` over `transport` (a fanout Transport) and return its Stream."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    command = Command.of(argv)
    name = getattr(transport, "name", "")
    if name == "local":
        env = dict(os.environ, FLEETCTL_NODE=node)
        netns = transport.netns_of(node)
        full = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv] if netns else list(argv)
        return ProcessStream(node, full, data, env)
    if name == "ssh":
        return SshStream(transport, node, command, data)
    if name == "srun":
        full = transport.build_argv([node], command, 30 * 86400, data is not None)
        full = [a for a in full if not a.startswith("--time=")]  # a service: no time limit
        return ProcessStream(node, full, data, label=True)
    raise TransportError(f"transport {name!r} cannot stream a long-running command")
