"""Webhook delivery of lens events through a durable outbox (docs/lens.md, "Outputs").

    box = WebhookOutbox("https://hooks.example/lens", state_dir / "webhook.spool")
    box.submit(record)          # appended to the spool and fsync'ed before it returns
    box.close()                 # what is undelivered stays in the spool for the next start

The spool is JSON lines `{"seq": n, "event": {...}}`; `<spool>.state` (written atomically) holds
`acked`, the sequence number up to which every event was delivered, rejected or dropped, and the
counters. One delivery thread POSTs the events in spool order, one at a time, as JSON; a failure
(no connection, a timeout, a 5xx, 408 or 429) is retried with exponential back-off up to a cap, so
a receiver that is down delays events but never loses or reorders them. A 4xx other than 408/429
(the receiver refuses that event for good) and a 3xx (redirects are not followed) reject the event:
it is counted and skipped, so one bad event cannot block the rest. Each POST has a socket timeout
per read and write (`timeout_s`) and an overall deadline (`deadline_s`: connect, send and the whole
answer), so a receiver that trickles its answer holds the delivery thread for at most that long.

The spool holds at most `max_spool` undelivered events: past that the oldest undelivered one is
dropped and counted (a receiver down for days must not fill the disk). A restart resends exactly
the events after `acked`. Delivery is exactly-once except across a crash (or kill) between a
successful POST and the state write that records it: that event is sent again after the restart
(at-least-once). Each POST carries the header `X-Fleetctl-Sequence: <seq>` so a receiver can drop
such a duplicate. The spool is compacted (rewritten with the undelivered events only) once enough
delivered lines have accumulated. One outbox per spool: a second one on the same spool (another
process) is refused through a flock on `<spool>.lock`. The spool and the state are read with the
file kit (regular files only, bounded, JSON nesting bounded); a damaged state is logged and
ignored (the spool is sent again from its start), never a failed start.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from fleetctl.atomic import fsync_dir, write_atomic
from fleetctl.errors import DataError, UsageError
from fleetctl.filekit import loads_json, open_regular, read_json, write_whole
from fleetctl.lens.eventlog import MAX_LINE
from fleetctl.filekit.locks import open_lock

DEFAULT_MAX_SPOOL = 10_000  # undelivered events kept
MAX_SPOOL_LINE = MAX_LINE + 64  # an event record plus its {"seq": ...} envelope
COMPACT_AFTER = 1_000  # delivered lines in the spool before it is rewritten
MAX_RESPONSE = 64 * 1024  # bytes of a receiver's answer read (and ignored)
RETRY_STATUS = {408, 429}  # 4xx that mean "try again later"


DEFAULT_DEADLINE_S = 30.0  # one delivery: connect, send and the whole answer
STATE_KEYS = ("acked", "delivered", "failed", "dropped", "rejected")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 3xx surfaces as an HTTPError
        return None


class _Deadline:
    """One delivery's overall deadline. The socket timeout bounds each read and write only, so a
    receiver that trickles its answer a byte at a time could hold the delivery thread for hours;
    when the deadline passes, a timer shuts the delivery's socket down and the POST fails at once.
    The socket is watched through a duplicate of its descriptor (closed when the delivery ends),
    so the timer can never touch a descriptor the process has reused meanwhile."""

    def __init__(self, seconds: float):
        self.seconds, self.end = seconds, time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def connect(self, address, timeout=None, source_address=None) -> socket.socket:
        """http.client's socket.create_connection, within the deadline and watched."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("delivery deadline passed")
        sock = socket.create_connection(address, min(left, timeout or left), source_address)
        with self._lock:
            try:
                self._socks.append(sock.dup())
            except OSError:
                sock.close()
                raise
            if self.expired:
                self._shutdown()
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for s in self._socks:
                s.close()
            self._socks = []


class _Watched:
    """urllib handlers whose connections are made by the request's _Deadline (TLS and a proxy's
    tunnel run over that socket too)."""

    def do_open(self, http_class, req, **kwargs):
        deadline = getattr(req, "fleetctl_deadline", None)
        if deadline is None:
            return super().do_open(http_class, req, **kwargs)

        def connection(*args, **kw):
            conn = http_class(*args, **kw)
            conn._create_connection = deadline.connect
            return conn

        return super().do_open(connection, req, **kwargs)


class _HTTPHandler(_Watched, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_Watched, urllib.request.HTTPSHandler):
    pass


@dataclass(frozen=True)
class DeliveryPolicy:
    """How hard a delivery tries: each attempt's socket timeout and overall deadline, the spool's
    bound, the back-off between failed attempts."""

    timeout_s: float = 5.0
    deadline_s: float = DEFAULT_DEADLINE_S
    max_spool: int = DEFAULT_MAX_SPOOL
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0

    def check(self) -> None:
        if not 0.1 <= self.timeout_s <= self.deadline_s <= 3600 or not 1 <= self.max_spool <= 10_000_000 \
                or not 0.001 <= self.backoff_s <= self.backoff_max_s <= 86_400:
            raise UsageError("webhook: 0.1 <= timeout_s <= deadline_s <= 3600, max_spool "
                             "1-10000000, 0.001 <= backoff_s <= backoff_max_s <= 86400")


class WebhookOutbox:
    def __init__(self, url: str, spool_path: str | os.PathLike, *, headers: dict[str, str] | None = None,
                 start: bool = True, log=lambda _m: None, **policy):
        """`policy`: DeliveryPolicy's fields as keywords (timeout_s, deadline_s, max_spool,
        backoff_s, backoff_max_s)."""
        parts = urllib.parse.urlsplit(str(url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"webhook URL {str(url)[:200]!r}: not an http:// or https:// URL")
        unknown = sorted(set(policy) - set(DeliveryPolicy.__dataclass_fields__))
        if unknown:
            raise UsageError(f"webhook: unknown option(s) {', '.join(unknown)}")
        p = DeliveryPolicy(**policy)
        p.check()
        self.url, self.timeout_s, self.deadline_s = url, p.timeout_s, p.deadline_s
        self.max_spool, self.log = p.max_spool, log
        self.backoff_s, self.backoff_max_s = p.backoff_s, p.backoff_max_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.spool = Path(spool_path)
        self.state_path = self.spool.with_name(self.spool.name + ".state")
        self._opener = urllib.request.build_opener(_NoRedirect, _HTTPHandler, _HTTPSHandler)
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._in_flight: int | None = None  # the sequence number being posted
        self.delivered = self.failed = self.dropped = self.rejected = self.skipped = 0
        self.last_error: str | None = None
        self._lock_fd = self._take_lock()
        try:
            self._pending: deque[tuple[int, bytes]] = deque()
            self._load()
        except BaseException:
            os.close(self._lock_fd)
            raise
        if start:
            self.start()

    # ------------------------------------------------------------ spool and state
    def _take_lock(self) -> int:
        lock = self.spool.with_name(self.spool.name + ".lock")
        try:
            self.spool.parent.mkdir(parents=True, exist_ok=True)
            fd = open_lock(lock)
        except OSError as exc:
            raise DataError(f"{lock}: cannot open webhook spool lock: {exc.strerror}") from None
        if fd is None:
            raise DataError(f"{self.spool}: webhook spool in use by another process")
        return fd

    def _load(self) -> None:
        state = self._read_state()
        self.acked = state.get("acked", 0)
        for key in STATE_KEYS[1:]:
            setattr(self, key, state.get(key, 0))
        self.last_seq, self._file_lines = self.acked, 0
        try:
            for seq, line in self._read_spool():
                self._file_lines += 1
                self.last_seq = max(self.last_seq, seq)
                if seq > self.acked:
                    self._pending.append((seq, line))
        except DataError as exc:  # a FIFO, link or directory: new events fail (logged) too
            self.last_error = exc.message
            self.log(f"{exc.message}: its events are not delivered")
        while len(self._pending) > self.max_spool:
            self._pending.popleft()
            self.dropped += 1

    def _read_state(self) -> dict:
        """`<spool>.state`, validated; a damaged one is logged and ignored: every event of the
        spool is sent again (at-least-once: a receiver drops duplicates by sequence number)."""
        try:
            state = read_json(self.state_path, "webhook state", max_bytes=MAX_LINE,
                              missing_ok=True, kind=dict, error=DataError) or {}
            bad = [k for k in STATE_KEYS if not isinstance(state.get(k, 0), int)
                   or isinstance(state.get(k, 0), bool) or not 0 <= state.get(k, 0) < 2**63]
            if bad:
                raise DataError(f"{self.state_path}: webhook state: {', '.join(bad)} not an "
                                "integer >= 0")
        except DataError as exc:
            self.log(f"{exc.message}; ignored: the spool is sent again from its start")
            return {}
        return state

    def _read_spool(self):
        try:
            fd = open_regular(self.spool, what="webhook spool")
        except FileNotFoundError:
            return
        except OSError as exc:
            raise DataError(f"{self.spool}: cannot read webhook spool: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            while line := fh.readline(MAX_SPOOL_LINE + 1):
                if len(line) > MAX_SPOOL_LINE or not line.endswith(b"\n"):
                    self.skipped += 1
                    while line and not line.endswith(b"\n"):
                        line = fh.readline(MAX_SPOOL_LINE + 1)
                    continue
                try:
                    rec = loads_json(line, "webhook spool line", kind=dict)
                    seq, event = rec["seq"], rec["event"]
                    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 \
                            or not isinstance(event, dict):
                        raise ValueError
                except (DataError, ValueError, KeyError):
                    self.skipped += 1
                    continue
                yield seq, json.dumps(event, sort_keys=True).encode()

    def _save_state(self) -> None:
        """Under self._cond. The state file, atomically (tmp, fsync, rename)."""
        self.acked = self._pending[0][0] - 1 if self._pending else self.last_seq
        write_atomic(self.state_path, json.dumps(
            {"acked": self.acked, "delivered": self.delivered, "failed": self.failed,
             "dropped": self.dropped, "rejected": self.rejected}), mode=0o600)
        if self._file_lines - len(self._pending) >= COMPACT_AFTER:
            self._compact()

    def _compact(self) -> None:
        lines = b"".join(b'{"seq":%d,"event":%s}\n' % (seq, body) for seq, body in self._pending)
        write_atomic(self.spool, lines, mode=0o600)
        self._file_lines = len(self._pending)

    def _append_spool(self, data: bytes) -> None:
        fd = open_regular(self.spool, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600,
                          what="webhook spool")
        try:
            size = write_whole(fd, data)  # a crashed append's partial line ended first
        finally:
            os.close(fd)
        if not size:
            fsync_dir(self.spool.parent)

    # ------------------------------------------------------------ public
    def submit(self, event: dict) -> int:
        """Spool one event (a JSON object) durably; its sequence number."""
        try:
            body = json.dumps(event, sort_keys=True, separators=(",", ":"),
                              allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise DataError(f"webhook: event is not JSON: {exc}") from None
        if not isinstance(event, dict) or len(body) > MAX_LINE:
            raise DataError(f"webhook: event is not a JSON object of at most {MAX_LINE} bytes")
        with self._cond:
            if self._closing:
                raise DataError(f"{self.spool}: webhook outbox is closed")
            seq = self.last_seq + 1
            try:
                self._append_spool(b'{"seq":%d,"event":%s}\n' % (seq, body))
            except OSError as exc:
                raise DataError(f"{self.spool}: cannot spool webhook event: "
                                f"{exc.strerror or exc}") from None
            self.last_seq = seq
            self._file_lines += 1
            self._pending.append((seq, body))
            if len(self._pending) > self.max_spool:
                # the oldest undelivered goes; if it is being posted right now, the one after it
                self._pending.remove(self._pending[1] if self._in_flight == self._pending[0][0]
                                     and len(self._pending) > 1 else self._pending[0])
                self.dropped += 1
                self._save_state()
            self._cond.notify_all()
        return seq

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def stats(self) -> dict:
        with self._cond:
            return {"delivered": self.delivered, "failed": self.failed, "pending": len(self._pending),
                    "dropped": self.dropped, "rejected": self.rejected,
                    "spool_lines_skipped": self.skipped, "last_error": self.last_error}

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lens-webhook", daemon=True)
            self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Stop delivering (a POST under way finishes or meets its deadline first); keeps the
        spool."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self.deadline_s + 5)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------ delivery
    def _run(self) -> None:
        delay = self.backoff_s
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or self._pending)
                if self._closing:
                    return
                seq, body = self._pending[0]
                self._in_flight = seq
            outcome, error = self._post(seq, body)
            with self._cond:
                self._in_flight = None
                if outcome == "retry":
                    self.failed += 1
                    self.last_error = error
                else:
                    if outcome == "delivered":
                        self.delivered += 1
                    else:
                        self.rejected += 1
                        self.last_error = error
                    if self._pending and self._pending[0][0] == seq:
                        self._pending.popleft()
                    try:
                        self._save_state()
                    except DataError as exc:  # a full disk: keep delivering, say why
                        self.last_error = exc.message
                    self._cond.notify_all()
                    delay = self.backoff_s
                    continue
                # back off, unless closing (the wait returns early then)
                self._cond.wait_for(lambda: self._closing, delay)
                delay = min(self.backoff_max_s, delay * 2)

    def _post(self, seq: int, body: bytes) -> tuple[str, str | None]:
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={**self.headers, "X-Fleetctl-Sequence": str(seq)})
        req.fleetctl_deadline = deadline = _Deadline(self.deadline_s)
        try:
            outcome = self._send(req)
        finally:
            deadline.close()
        if deadline.expired:  # whatever came back was cut by the deadline: never taken as an answer
            return "retry", f"{self.url}: no whole answer within the {self.deadline_s:g} s " \
                            "delivery deadline"
        return outcome

    def _send(self, req) -> tuple[str, str | None]:
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                resp.read(MAX_RESPONSE)
            return "delivered", None
        except urllib.error.HTTPError as exc:
            exc.close()
            why = f"HTTP {exc.code} from {self.url}"
            if exc.code >= 500 or exc.code in RETRY_STATUS:
                return "retry", why
            return "rejected", why
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # URLError, timeouts, resets, a bad status line, too many or too long header lines
            reason = getattr(exc, "reason", None) or exc
            return "retry", f"{self.url}: {str(reason)[:200]}"
