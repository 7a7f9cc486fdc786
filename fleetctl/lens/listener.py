"""Registered agents: the coordinator listens, node-resident agents connect (lens/register.py has
the protocol). The same face as agents.AgentSupervisor (`state`, `covered`, `start`, `stop`), so
the coordinator does not care which it has.

Threads: one accepts; each handshake has its own short-lived thread (at most MAX_HANDSHAKES at
once, each bounded by HANDSHAKE_S: a thousand agents registering together never hold up the
stream); one reader multiplexes every registered agent's stream with a selector and feeds decoded
batches to `on_batch(node, batch)`. An agent that sends nothing for `silent_s` is disconnected
(it registers again). A node that registers while its previous connection is still open (the
service restarted faster than TCP noticed) replaces it; the old incarnation ends there.
"""

from __future__ import annotations

import queue
import selectors
import socket
import threading
import time

from fleetctl.errors import ConfigError, DataError, FleetctlError
from fleetctl.lens import register as proto
from fleetctl.lens.agents import AgentSet
from fleetctl.mesh.collect import StreamDecoder

MAX_HANDSHAKES = 64
MAX_LINE = 1 << 16  # FLS1 pieces are 400 characters; a longer line is garbage
READ_CHUNK = 1 << 18


def parse_listen(text: str, what: str = "lens.listen") -> tuple[str, int]:
    """`ADDRESS:PORT` (an IPv6 address in brackets) -> (address, port)."""
    host, sep, port = str(text).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{text!r} is not ADDRESS:PORT", key=what)
    return host, int(port)


class _Conn:
    def __init__(self, node: str, sock: socket.socket, peer: str):
        self.node, self.sock, self.peer = node, sock, peer
        self.buf = b""
        self.decoder = StreamDecoder(node)


class AgentListener(AgentSet):
    def __init__(self, address: tuple[str, int], key: bytes, nodes: list[str], config_for,
                 on_batch, log=lambda _m: None, silent_s: float = 5.0, start_delay: float = 0.5):
        super().__init__(nodes, on_batch, log, silent_s, start_delay)
        self.address = address
        self.key = key
        self.config_for = config_for  # (node, start_at) -> the node's configuration
        self.counters = {"registered": 0, "refused": 0, "busy": 0, "replaced": 0}
        self._slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._new: queue.Queue = queue.Queue()
        self._conns: dict[str, _Conn] = {}
        self._threads: list[threading.Thread] = []
        self._server: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._refusals: dict[str, float] = {}  # peer -> last logged (one line a minute each)

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        host, port = self.address
        self._server = listen_socket(self.address)
        self.log(f"listening for registered agents on {host}:{port} ({len(self.nodes)} nodes)")
        for target, name in ((self._accept_loop, "lens-accept"), (self._read_loop, "lens-reader")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self.stopping.set()
        self._wake()
        for t in self._threads:
            t.join(timeout=10)
        if self._server is not None:
            self._server.close()
        with self.lock:
            for c in list(self._conns.values()):
                self._close(c, "coordinator stopping")
        for s in (self._wake_r, self._wake_w):
            s.close()

    # ------------------------------------------------------------------ accept + handshake
    def _accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, addr = self._server.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                time.sleep(0.1)  # e.g. out of descriptors: do not spin
                continue
            if not self._slots.acquire(blocking=False):
                self.counters["busy"] += 1  # the agent backs off and tries again
                sock.close()
                continue
            threading.Thread(target=self._handshake, args=(sock, f"{addr[0]}:{addr[1]}"),
                             name="lens-handshake", daemon=True).start()

    def _handshake(self, sock: socket.socket, peer: str) -> None:
        def admit(node: str) -> None:
            if node not in self.state:
                raise proto.RegistrationError(f"{peer}: {node} is not one of this coordinator's "
                                              "nodes")

        try:
            start_at = time.time() + self.start_delay
            node = handshake(sock, self.key, peer, admit, lambda n: self.config_for(n, start_at))
            sock.settimeout(None)
            sock.setblocking(False)
            self._new.put((node, sock, peer, start_at))
            self._wake()
            sock = None
        except proto.RegistrationError as exc:
            self.counters["refused"] += 1
            self._log_refusal(peer, exc.message)
        except (OSError, FleetctlError) as exc:
            self.counters["refused"] += 1
            self._log_refusal(peer, f"{peer}: handshake failed: {exc}")
        finally:
            if sock is not None:
                sock.close()
            self._slots.release()

    def _log_refusal(self, peer: str, message: str) -> None:
        host = peer.rpartition(":")[0]
        now = time.monotonic()
        if now - self._refusals.get(host, -1e9) >= 60:
            if len(self._refusals) > 10_000:
                self._refusals.clear()
            self._refusals[host] = now
            self.log(f"agent registration refused: {message}")

    # ------------------------------------------------------------------ streams
    def _read_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        last_check = time.monotonic()
        while not self.stopping.is_set():
            for key, _ in sel.select(0.5):
                if key.data is None:
                    self._drain_wake()
                    continue
                self._read(key.data, sel)
            self._adopt(sel)
            now = time.monotonic()
            if now - last_check >= 1.0:
                last_check = now
                self._check_silent(sel)
        sel.close()

    def _adopt(self, sel) -> None:
        while True:
            try:
                node, sock, peer, start_at = self._new.get_nowait()
            except queue.Empty:
                return
            st = self.state[node]
            with self.lock:
                old = self._conns.pop(node, None)
                if old is not None:
                    self._unregister(sel, old)
                    self._close(old, "replaced by a new registration")
                self._conns[node] = conn = _Conn(node, sock, peer)
                st.began(start_at, time.time())
                self.counters["replaced"] += old is not None
                self.counters["registered"] += 1
            self._came_back(st, start_at, "registered again")
            sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn, sel) -> None:
        try:
            data = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            data, why = b"", f"connection error: {exc.strerror or exc}"
        else:
            why = "connection closed by the agent"
        if not data:
            self._end(conn, sel, why)
            return
        buf = conn.buf + data
        *lines, conn.buf = buf.split(b"\n")
        if len(conn.buf) > MAX_LINE:
            self._end(conn, sel, f"line over {MAX_LINE} bytes")
            return
        st = self.state[conn.node]
        for raw in lines:
            try:
                objs = conn.decoder.feed(raw.decode("utf-8", "replace"))
            except DataError as exc:
                self._end(conn, sel, exc.message[:300])
                return
            for obj in objs:
                if obj.get("kind") == "end":
                    st.last_error = "agent finished its run"
                    continue
                health = obj.get("health") or []
                if not isinstance(health, list) or not all(isinstance(r, list) for r in health):
                    self._end(conn, sel, "a batch whose health rows are not lists")
                    return
                with self.lock:
                    st.batch(time.time(), health)
                self.on_batch(conn.node, obj)

    def _check_silent(self, sel) -> None:
        now = time.time()
        with self.lock:
            conns = list(self._conns.values())
        for conn in conns:
            st = self.state[conn.node]
            if now - st.last_batch > self.silent_s:
                self._end(conn, sel, f"no batch for {now - st.last_batch:.1f} s (hung?)")

    def _end(self, conn: _Conn, sel, why: str) -> None:
        st = self.state[conn.node]
        with self.lock:
            if self._conns.get(conn.node) is conn:
                del self._conns[conn.node]
            self._unregister(sel, conn)
            self._close(conn, why)
        self._went_down(st, time.time())
        self.log(f"agent on {conn.node} ({conn.peer}) ended: {why}")

    @staticmethod
    def _unregister(sel, conn: _Conn) -> None:
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _close(self, conn: _Conn, why: str) -> None:
        """(with self.lock held)"""
        st = self.state[conn.node]
        if conn.sock.fileno() >= 0:
            st.last_error = why[:300]
            st.ended()
        try:
            conn.sock.close()
        except OSError:
            pass

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            self._wake_r.recv(4096)
        except OSError:
            pass


def listen_socket(address: tuple[str, int]) -> socket.socket:
    """The coordinator's listening socket for agents on `address` (accept times out every 0.5 s
    so its loop can see a stop); ConfigError naming lens.listen when it cannot be bound."""
    host, port = address
    srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((host, port))
    except OSError as exc:
        srv.close()
        raise ConfigError(f"cannot listen on {host}:{port} for agents: {exc.strerror}",
                          key="lens.listen") from None
    srv.listen(1024)
    srv.settimeout(0.5)
    return srv


def handshake(sock: socket.socket, key: bytes, peer: str, admit, config_for) -> str:
    """The coordinator's side of a registration on an accepted socket: the authenticated node's
    name, after its configuration was sent. `admit(node)` raises RegistrationError (with
    `retry_s` when the agent should come back soon) to refuse; the refusal is sent to the agent
    and raised here."""
    sock.settimeout(proto.HANDSHAKE_S)
    deadline = time.monotonic() + proto.HANDSHAKE_S
    c_nonce = proto.nonce()
    try:
        sock.sendall(proto.coordinator_hello(c_nonce))
        hello = proto.decode_line(_read_line(sock, deadline), peer)
        node, a_nonce = proto.check_agent_hello(key, c_nonce, hello, peer)
        admit(node)
        sock.sendall(proto.config_message(key, c_nonce, a_nonce, node, config_for(node)))
    except proto.RegistrationError as exc:
        try:
            sock.sendall(proto.refusal(exc.message, exc.retry_s))
        except OSError:
            pass
        raise
    return node


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    """One handshake line (at most register.MAX_LINE bytes), read byte-exactly so nothing after it
    is consumed."""
    out = bytearray()
    while not out.endswith(b"\n"):
        if len(out) > proto.MAX_LINE or time.monotonic() > deadline:
            raise proto.RegistrationError("handshake line too long or too slow")
        chunk = sock.recv(1)
        if not chunk:
            raise proto.RegistrationError("connection closed during the handshake")
        out += chunk
    return bytes(out)
