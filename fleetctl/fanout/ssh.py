"""The ssh transport, on paramiko, one connection per node, at most `access.concurrency` at once.

Costs that matter at fan-out scale and how they are kept down: paramiko is imported only here (and
without `invoke`, which it imports for `Match exec` in ssh_config files that we never read: ~140 ms);
keys and known_hosts are read once per transport, not per host; the jump host is one connection shared
by every node's direct-tcpip channel; threads are sized to the node count.

Timeouts: connecting (TCP, ssh handshake, authentication, opening the session) must finish within
`connect_timeout`; the command then has `timeout` seconds. A command past its time is reported as
`timeout` and killed: the ssh `signal` request (OpenSSH honours it only for non-root logins), then a
second session on the same connection that SIGKILLs every process carrying the run's token in its
environment (Linux /proc), which also covers root sessions.
"""

from __future__ import annotations

import errno
import logging
import secrets
import select
import shlex
import socket
import sys
import threading
import time

from fleetctl.fanout.base import OnResult, Transport, run_parallel
from fleetctl.fanout.hostkeys import HostKeyRefused, KnownHosts, known_hosts_name
from fleetctl.fanout.result import (AUTH_FAILED, ERROR, FAILED, OK, REFUSED, TIMEOUT, UNREACHABLE, Command,
                                    HostResult, decode)
from fleetctl.fanout.ssh_jump import OpenFailureReasons, parse_jump_host
from fleetctl.fanout.ssh_keys import load_keys


def _import_paramiko():
    blocked = "invoke" not in sys.modules
    if blocked:
        sys.modules["invoke"] = None  # makes paramiko's optional `import invoke` fail fast
    try:
        import paramiko
    finally:
        if blocked and sys.modules.get("invoke", 0) is None:
            del sys.modules["invoke"]
    # paramiko logs every failed handshake at ERROR; per-host errors are our results instead.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    return paramiko


paramiko = _import_paramiko()

class HostFailure(Exception):
    """A per-host failure before the command ran: becomes that host's result."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class SshTransport(Transport):
    name = "ssh"

    def __init__(self, options=None):
        super().__init__(options)
        self._lock = threading.Lock()
        self._known_hosts: KnownHosts | None = None
        self._keys: list | None = None
        self._jump = None  # paramiko.Transport, or a HostFailure once it failed

    # ---- shared state, prepared once
    def _prepare(self) -> None:
        with self._lock:
            if self._known_hosts is None:
                o = self.options
                self._known_hosts = KnownHosts(o.known_hosts, o.host_key_policy)
            if self._keys is None:
                self._keys = load_keys(self.options.identity_file)

    def close(self) -> None:
        with self._lock:
            jump, self._jump = self._jump, None
        if jump is not None and not isinstance(jump, HostFailure):
            jump.close()

    # ---- fan-out
    def _run(self, nodes: list[str], command: Command, timeout: float, stdin: bytes | None,
             on_result: OnResult) -> list[HostResult]:
        self._prepare()
        return run_parallel(nodes, lambda node: self._one(node, command, timeout, stdin),
                            self.options.concurrency, on_result)

    def _one(self, node: str, command: Command, timeout: float, stdin: bytes | None) -> HostResult:
        start = time.monotonic()
        transport = None
        try:
            transport = self._connect(node, start + self.options.connect_timeout)
            return self._execute(node, transport, command, timeout, stdin, start)
        except HostFailure as exc:
            return HostResult(node, exc.status, duration_s=time.monotonic() - start, error=exc.message)
        finally:
            if transport is not None:
                transport.close()

    def address_of(self, node: str) -> tuple[str, int]:
        return self.options.addresses.get(node, node), self.options.ssh_port

    # ---- connecting
    def _connect(self, node: str, deadline: float):
        address, port = self.address_of(node)
        sock = self._open_socket(address, port, deadline)
        names = list(dict.fromkeys([known_hosts_name(node, port), known_hosts_name(address, port)]))
        return self._handshake(node, names, sock, deadline, self.options.ssh_user)

    def _open_socket(self, address: str, port: int, deadline: float):
        where = f"{address}:{port}"
        if self.options.jump_host:
            return self._jump_channel(address, port, deadline)
        try:
            return _tcp(address, port, _left(deadline, where))
        except socket.gaierror as exc:
            raise HostFailure(UNREACHABLE, f"cannot resolve {address!r}: {exc.strerror}") from None
        except ConnectionRefusedError:
            raise HostFailure(REFUSED, f"connection to {where} refused") from None
        except TimeoutError:
            raise HostFailure(UNREACHABLE, f"connect to {where} timed out after "
                              f"{self.options.connect_timeout:g} s") from None
        except OSError as exc:
            status = UNREACHABLE if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) else ERROR
            raise HostFailure(status, f"connect to {where}: {exc.strerror or exc}") from None

    def _handshake(self, node: str, names: list[str], sock, deadline: float, user: str):
        where = names[-1]
        t = paramiko.Transport(sock)
        try:
            opts = t.get_security_options()
            opts.key_types = self._known_hosts.preferred_key_types(names, list(opts.key_types))
            t.banner_timeout = t.handshake_timeout = t.auth_timeout = _left(deadline, where)
            try:
                t.start_client(timeout=_left(deadline, where))
                server_key = t.get_remote_server_key()  # raises when start_client gave up silently
            except (paramiko.SSHException, EOFError, OSError) as exc:
                # paramiko's banner timer starts a little after our deadline was computed.
                if time.monotonic() >= deadline - 0.05:
                    raise HostFailure(UNREACHABLE, f"ssh handshake with {where} timed out after "
                                      f"{self.options.connect_timeout:g} s") from None
                if "banner" in str(exc):
                    raise HostFailure(UNREACHABLE, f"{where} closed the connection before the ssh "
                                      "handshake (not an ssh server, or sshd MaxStartups throttling)"
                                      ) from None
                raise HostFailure(UNREACHABLE if isinstance(exc, (EOFError, OSError)) else ERROR,
                                  f"ssh handshake with {where} failed: {_describe(exc)}") from None
            try:
                self._known_hosts.check(node, names, server_key)
            except HostKeyRefused as exc:
                raise HostFailure(exc.status, exc.message) from None
            self._authenticate(t, user, where, deadline)
            return t
        except BaseException:
            t.close()
            raise

    def _authenticate(self, t, user: str, where: str, deadline: float) -> None:
        if not self._keys:
            raise HostFailure(AUTH_FAILED, f"no private key to offer {user}@{where} (no identity_file, "
                              "no ssh agent key, no ~/.ssh/id_* file)")
        for key in self._keys:
            if time.monotonic() >= deadline:
                break
            try:
                t.auth_publickey(user, key)
                return
            except paramiko.BadAuthenticationType as exc:
                raise HostFailure(AUTH_FAILED, f"{user}@{where} does not accept public keys (allowed: "
                                  f"{', '.join(exc.allowed_types) or 'none'})") from None
            except paramiko.AuthenticationException:
                continue
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise HostFailure(ERROR, f"authentication with {where} failed: {_describe(exc)}") from None
        raise HostFailure(AUTH_FAILED, f"{user}@{where} rejected our key"
                          f"{'s' if len(self._keys) > 1 else ''} ({', '.join(_key_names(self._keys))})")

    def _jump_channel(self, address: str, port: int, deadline: float):
        jump = self._jump_transport(deadline)
        try:
            return jump.open_channel("direct-tcpip", (address, port), ("127.0.0.1", 0),
                                     timeout=_left(deadline, f"{address}:{port}"))
        except (paramiko.SSHException, EOFError, OSError) as exc:
            # Concurrent failed opens share paramiko's one saved exception, so the exception may be
            # another node's or a generic one: the reason noted for our own channel id is what counts.
            text = jump.reasons.last() or (exc.text if isinstance(exc, paramiko.ChannelException)
                                           else _describe(exc))
            status = REFUSED if "refused" in text.lower() else UNREACHABLE
            raise HostFailure(status, f"via jump host {self.options.jump_host}: connect to "
                              f"{address}:{port}: {text}") from None

    def _jump_transport(self, deadline: float):
        """One connection to the jump host, shared by every node (and every later run)."""
        with self._lock:
            jump = self._jump
            if isinstance(jump, HostFailure):
                raise HostFailure(jump.status, jump.message)
            if jump is not None and jump.is_active():
                return jump
            user, host, port = parse_jump_host(self.options.jump_host, self.options.ssh_user)
            names = [known_hosts_name(host, port)]
            try:
                sock = _tcp(host, port, _left(deadline, host))
                self._jump = self._handshake(host, names, sock, deadline, user)
                self._jump.reasons = OpenFailureReasons(self._jump)
            except HostFailure as exc:
                self._jump = HostFailure(exc.status, f"jump host {self.options.jump_host}: {exc.message}")
            except OSError as exc:
                status = REFUSED if isinstance(exc, ConnectionRefusedError) else UNREACHABLE
                self._jump = HostFailure(status, f"jump host {self.options.jump_host}: "
                                         f"{exc.strerror or 'connect timed out'}")
            if isinstance(self._jump, HostFailure):
                raise HostFailure(self._jump.status, self._jump.message)
            return self._jump

    # ---- running
    def _execute(self, node: str, t, command: Command, timeout: float, stdin: bytes | None,
                 start: float) -> HostResult:
        try:
            chan = t.open_session(timeout=max(0.1, self.options.connect_timeout))
            # Every transport tells the command which node it stands for (POSIX shells); the run
            # token marks the command's processes, so that a timed-out one can be found and killed.
            token = secrets.token_hex(8)
            chan.exec_command(f"FLEETCTL_NODE={shlex.quote(node)}; FLEETCTL_RUN={token}; "
                              f"export FLEETCTL_NODE FLEETCTL_RUN; {command.as_shell()}")
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostFailure(ERROR, f"cannot start the command: {_describe(exc)}") from None
        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            if stdin:
                chan.settimeout(timeout)
                chan.sendall(stdin)
            chan.shutdown_write()  # EOF, so a command reading stdin does not wait forever
            finished = _collect(chan, out, err, deadline)
        except (socket.timeout, TimeoutError):
            finished = False
        except (paramiko.SSHException, EOFError, OSError) as exc:
            return HostResult(node, ERROR, None, decode(out), decode(err), time.monotonic() - start,
                              f"connection lost: {_describe(exc)}")
        if not finished:
            _kill(chan)
            _reap(t, token)
            return HostResult(node, TIMEOUT, None, decode(out), decode(err), time.monotonic() - start,
                              f"command timed out after {timeout:g} s")
        code = chan.exit_status
        chan.close()  # frees the pipe behind fileno() now rather than at garbage collection
        duration = time.monotonic() - start
        if code < 0:
            return HostResult(node, FAILED, None, decode(out), decode(err), duration,
                              "the command ended without an exit status (killed by a signal?)")
        return HostResult(node, OK if code == 0 else FAILED, code, decode(out), decode(err), duration)


def _collect(chan, out: bytearray, err: bytearray, deadline: float) -> bool:
    """Read stdout and stderr together until EOF and the exit status (or close); False on timeout.
    Reading both keeps the shared flow-control window open however much either stream carries.
    The exit status alone is not the end: sshd sends it when the process exits, possibly before the
    rest of its output, which ends with EOF."""
    while True:
        while chan.recv_ready():
            out += chan.recv(65536)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        if chan.closed or (chan.eof_received and chan.status_event.is_set()):
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if chan.eof_received:
            chan.status_event.wait(left)  # all output is in; only the exit status is to come
        else:
            select.select([chan], [], [], left)


def _kill(chan) -> None:
    """Ask sshd to SIGKILL the command (RFC 4254 `signal` request), then close the channel."""
    try:
        m = paramiko.Message()
        m.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
        m.add_int(chan.remote_chanid)
        m.add_string("signal")
        m.add_boolean(False)
        m.add_string("KILL")
        chan.transport._send_user_message(m)
    except Exception:  # noqa: BLE001 - best effort: closing below still ends the session
        pass
    chan.close()


# Kills every process whose environment carries the run token: the timed-out command and its children.
_REAP = ('for p in /proc/[0-9]*; do grep -qxz "FLEETCTL_RUN=$1" "$p/environ" 2>/dev/null '
         '&& kill -KILL "${p#/proc/}" 2>/dev/null; done; true')


def _reap(t, token: str, wait: float = 3.0) -> None:
    """The `signal` request is refused for root sessions, so kill the timed-out command from a second
    session on the same connection (Linux /proc). Best effort, bounded by `wait` seconds."""
    try:
        chan = t.open_session(timeout=wait)
        chan.exec_command(f"sh -c {shlex.quote(_REAP)} fleetctl-reap {token}")
        chan.shutdown_write()
        chan.status_event.wait(wait)
        chan.close()
    except Exception:  # noqa: BLE001 - the result is already a timeout; cleanup must not change it
        pass


def _tcp(address: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection with Nagle off: the ssh handshake is a chain of small request/response
    packets, and Nagle plus delayed ACKs stalls some of them (measured: ~25 % off one host's
    connect-and-run time on loopback)."""
    sock = socket.create_connection((address, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _left(deadline: float, where: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HostFailure(UNREACHABLE, f"connecting to {where} took longer than the connect timeout")
    return left


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, EOFError) or not text:
        return "connection closed by the remote end"
    return text


def _key_names(keys) -> list[str]:
    return [f"{k.get_name()} {k.fingerprint}" for k in keys]
