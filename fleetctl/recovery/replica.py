"""Peer memory replicas: each rank's state kept in the RAM of a process on another node.

Every training process of a `fleetctl run` job runs a `ReplicaServer` (a thread): other ranks push
their serialized state to it every K iterations, and a standby that takes a dead rank's place fetches
that rank's newest state from it. So the state of a node that dies exists in a live node's memory,
and the job goes on without a disk read.

The protocol is one TCP connection per request: a JSON header line (at most 4 KiB), then the body.

    put:  {"op": "put", "run": RUN, "rank": R, "iteration": I, "size": N, "sha256": H} + N bytes
          -> {"ok": true}
    get:  {"op": "get", "run": RUN, "rank": R, "iteration": I}
          -> {"ok": true, "size": N, "sha256": H} + N bytes, or {"ok": false, "error": "..."}

Everything read is input: the header is bounded and checked, the body's size is bounded
(`max_bytes`) and its SHA-256 checked before it is kept; `run` (a random id of the job's launch)
refuses pushes from another job or an earlier launch. The server keeps the last `keep` iterations
of each rank it holds, and never more than `max_total` bytes in all (the oldest go first).
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
from collections import OrderedDict

from fleetctl.errors import RecoveryError

log = logging.getLogger("fleetctl.recovery")
HEADER_MAX = 4096
DEFAULT_MAX_BYTES = 16 << 30  # one rank's state: a 70B model + Adam over 1,024 GPUs is ~1 GiB a rank
CHUNK = 1 << 20
KEEP = 3  # see resilient.py: a dead rank's holder and the survivors' own copies must share one


def _read_line(sock: socket.socket, limit: int = HEADER_MAX) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        piece = sock.recv(1)
        if not piece:
            raise RecoveryError("replica connection closed in the header")
        buf += piece
        if len(buf) > limit:
            raise RecoveryError(f"replica header over {limit} bytes")
    return bytes(buf[:-1])


def _read_exact(sock: socket.socket, size: int) -> bytes:
    out, view, got = bytearray(size), None, 0
    view = memoryview(out)
    while got < size:
        n = sock.recv_into(view[got:], min(CHUNK, size - got))
        if not n:
            raise RecoveryError(f"replica connection closed after {got} of {size} bytes")
        got += n
    return bytes(out)


def _header(raw: bytes) -> dict:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RecoveryError("replica header is not JSON") from None
    if not isinstance(doc, dict):
        raise RecoveryError("replica header is not a JSON object")
    return doc


def _int(doc: dict, key: str, low: int, high: int) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RecoveryError(f"replica header: {key} must be an integer in [{low}, {high}], not {value!r}")
    return value


def _send(sock: socket.socket, doc: dict, body: bytes = b"") -> None:
    sock.sendall(json.dumps(doc, separators=(",", ":")).encode() + b"\n")
    if body:
        sock.sendall(body)


class ReplicaStore:
    """The replicas this process holds: rank -> {iteration: (bytes, sha256)}, bounded."""

    def __init__(self, keep: int = KEEP, max_total: int = 4 * DEFAULT_MAX_BYTES):
        self.keep, self.max_total = keep, max_total
        self._data: dict[int, OrderedDict[int, tuple[bytes, str]]] = {}
        self._lock = threading.Lock()

    def put(self, rank: int, iteration: int, body: bytes, digest: str) -> None:
        with self._lock:
            held = self._data.setdefault(rank, OrderedDict())
            held[iteration] = (body, digest)
            held.move_to_end(iteration)
            while len(held) > self.keep:
                held.popitem(last=False)
            while self._total() > self.max_total and self._evict_oldest():
                pass

    def _total(self) -> int:
        return sum(len(b) for held in self._data.values() for b, _ in held.values())

    def _evict_oldest(self) -> bool:
        victims = [(min(held), rank) for rank, held in self._data.items() if len(held) > 1]
        if not victims:
            return False
        iteration, rank = min(victims)
        del self._data[rank][iteration]
        return True

    def get(self, rank: int, iteration: int) -> tuple[bytes, str] | None:
        with self._lock:
            return self._data.get(rank, {}).get(iteration)

    def holds(self) -> dict[int, list[int]]:
        with self._lock:
            return {rank: sorted(held) for rank, held in self._data.items() if held}


class ReplicaServer:
    """Listens on (address, port 0 = any) and serves puts and gets for one job launch (`run_id`)."""

    def __init__(self, address: str, run_id: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 store: ReplicaStore | None = None, timeout_s: float = 60.0):
        self.run_id, self.max_bytes, self.timeout_s = run_id, max_bytes, timeout_s
        self.store = store or ReplicaStore(max_total=4 * max_bytes)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((address, 0))
        except OSError as exc:
            self._sock.close()
            raise RecoveryError(f"replica server: cannot listen on {address}: {exc.strerror}") from None
        self._sock.listen(64)
        self.address, self.port = address, self._sock.getsockname()[1]
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fleetctl-replica", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True,
                             name="fleetctl-replica-conn").start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(self.timeout_s)
            try:
                doc = _header(_read_line(conn))
                if doc.get("run") != self.run_id:
                    raise RecoveryError("replica request of another job or launch")
                op = doc.get("op")
                rank = _int(doc, "rank", 0, 10 ** 7)
                iteration = _int(doc, "iteration", -1, 10 ** 12)
                if op == "put":
                    self._put(conn, doc, rank, iteration)
                elif op == "get":
                    found = self.store.get(rank, iteration)
                    if found is None:
                        _send(conn, {"ok": False, "error": f"no replica of rank {rank} at iteration {iteration}"})
                    else:
                        body, digest = found
                        _send(conn, {"ok": True, "size": len(body), "sha256": digest}, body)
                else:
                    raise RecoveryError(f"replica header: unknown op {op!r}")
            except (RecoveryError, OSError) as exc:
                self.refused += 1
                log.warning("fleetctl run: replica request refused: %s", getattr(exc, "message", exc))
                try:
                    _send(conn, {"ok": False, "error": str(getattr(exc, "message", exc))[:200]})
                except OSError:
                    pass

    def _put(self, conn: socket.socket, doc: dict, rank: int, iteration: int) -> None:
        size = _int(doc, "size", 0, self.max_bytes)
        digest = doc.get("sha256")
        if not isinstance(digest, str) or len(digest) != 64:
            raise RecoveryError("replica header: sha256 must be 64 hex digits")
        body = _read_exact(conn, size)
        if hashlib.sha256(body).hexdigest() != digest:
            raise RecoveryError(f"replica of rank {rank} at iteration {iteration}: SHA-256 mismatch")
        self.store.put(rank, iteration, body, digest)
        _send(conn, {"ok": True})

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def _connect(address: str, port: int, timeout_s: float) -> socket.socket:
    try:
        sock = socket.create_connection((address, port), timeout=timeout_s)
    except OSError as exc:
        raise RecoveryError(f"replica holder {address}:{port} unreachable: {exc.strerror or exc}") from None
    sock.settimeout(timeout_s)
    return sock


def _reply(sock: socket.socket, what: str) -> dict:
    doc = _header(_read_line(sock))
    if doc.get("ok") is not True:
        raise RecoveryError(f"{what}: {str(doc.get('error', 'refused'))[:200]}")
    return doc


def push(address: str, port: int, run_id: str, rank: int, iteration: int, body: bytes,
         timeout_s: float = 60.0) -> None:
    """Send one replica and wait for the holder's acknowledgement (it checked the SHA-256)."""
    digest = hashlib.sha256(body).hexdigest()
    with _connect(address, port, timeout_s) as sock:
        try:
            _send(sock, {"op": "put", "run": run_id, "rank": rank, "iteration": iteration,
                         "size": len(body), "sha256": digest}, body)
            _reply(sock, f"push of rank {rank} at iteration {iteration} to {address}:{port}")
        except OSError as exc:
            raise RecoveryError(f"push to {address}:{port} failed: {exc.strerror or exc}") from None


def fetch(address: str, port: int, run_id: str, rank: int, iteration: int, *,
          max_bytes: int = DEFAULT_MAX_BYTES, timeout_s: float = 60.0) -> bytes:
    """The replica of `rank` at `iteration` from its holder, its SHA-256 checked."""
    what = f"replica of rank {rank} at iteration {iteration} from {address}:{port}"
    with _connect(address, port, timeout_s) as sock:
        try:
            _send(sock, {"op": "get", "run": run_id, "rank": rank, "iteration": iteration})
            doc = _reply(sock, what)
            size = _int(doc, "size", 0, max_bytes)
            body = _read_exact(sock, size)
        except OSError as exc:
            raise RecoveryError(f"{what}: {exc.strerror or exc}") from None
    if hashlib.sha256(body).hexdigest() != doc.get("sha256"):
        raise RecoveryError(f"{what}: SHA-256 mismatch")
    return body
