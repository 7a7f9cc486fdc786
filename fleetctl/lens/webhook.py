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
it is counted and skipped, so one bad event cannot block the rest.

The spool holds at most `max_spool` undelivered events: past that the oldest undelivered one is
dropped and counted (a receiver down for days must not fill the disk). A restart resends exactly
the events after `acked`. Delivery is exactly-once except across a crash (or kill) between a
successful POST and the state write that records it: that event is sent again after the restart
(at-least-once). Each POST carries the header `X-Fleetctl-Sequence: <seq>` so a receiver can drop
such a duplicate. The spool is compacted (rewritten with the undelivered events only) once enough
delivered lines have accumulated. One outbox per spool: a second one on the same spool (another
process) is refused through a flock on `<spool>.lock`.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from pathlib import Path

from fleetctl.atomic import fsync_dir, write_atomic
from fleetctl.errors import DataError, UsageError
from fleetctl.lens.eventlog import MAX_LINE
from fleetctl.locks import open_lock

DEFAULT_MAX_SPOOL = 10_000  # undelivered events kept
MAX_SPOOL_LINE = MAX_LINE + 64  # an event record plus its {"seq": ...} envelope
COMPACT_AFTER = 1_000  # delivered lines in the spool before it is rewritten
MAX_RESPONSE = 64 * 1024  # bytes of a receiver's answer read (and ignored)
RETRY_STATUS = {408, 429}  # 4xx that mean "try again later"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 3xx surfaces as an HTTPError
        return None


class WebhookOutbox:
    def __init__(self, url: str, spool_path: str | os.PathLike, *, timeout_s: float = 5.0,
                 max_spool: int = DEFAULT_MAX_SPOOL, backoff_s: float = 1.0,
                 backoff_max_s: float = 300.0, headers: dict[str, str] | None = None,
                 start: bool = True):
        parts = urllib.parse.urlsplit(str(url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"webhook URL {str(url)[:200]!r}: not an http:// or https:// URL")
        if not 0.1 <= timeout_s <= 300 or not 1 <= max_spool <= 10_000_000 or \
                not 0.001 <= backoff_s <= backoff_max_s <= 86_400:
            raise UsageError("webhook: timeout_s 0.1-300, max_spool 1-10000000, "
                             "0.001 <= backoff_s <= backoff_max_s <= 86400")
        self.url, self.timeout_s, self.max_spool = url, timeout_s, max_spool
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.spool = Path(spool_path)
        self.state_path = self.spool.with_name(self.spool.name + ".state")
        self._opener = urllib.request.build_opener(_NoRedirect)
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
        state = {}
        if self.state_path.exists():
            try:
                state = json.loads(self.state_path.read_bytes()[:MAX_LINE])
            except (OSError, ValueError, RecursionError):
                raise DataError(f"{self.state_path}: webhook state is not JSON") from None
            if not isinstance(state, dict) or not all(
                    isinstance(state.get(k, 0), int) and state.get(k, 0) >= 0 for k in
                    ("acked", "delivered", "failed", "dropped", "rejected")):
                raise DataError(f"{self.state_path}: webhook state has the wrong shape")
        self.acked = state.get("acked", 0)
        for key in ("delivered", "failed", "dropped", "rejected"):
            setattr(self, key, state.get(key, 0))
        self.last_seq, self._file_lines = self.acked, 0
        if self.spool.exists():
            for seq, line in self._read_spool():
                self._file_lines += 1
                self.last_seq = max(self.last_seq, seq)
                if seq > self.acked:
                    self._pending.append((seq, line))
        while len(self._pending) > self.max_spool:
            self._pending.popleft()
            self.dropped += 1

    def _read_spool(self):
        fd = os.open(self.spool, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            while line := fh.readline(MAX_SPOOL_LINE + 1):
                if len(line) > MAX_SPOOL_LINE or not line.endswith(b"\n"):
                    self.skipped += 1
                    while line and not line.endswith(b"\n"):
                        line = fh.readline(MAX_SPOOL_LINE + 1)
                    continue
                try:
                    rec = json.loads(line)
                    seq, event = rec["seq"], rec["event"]
                    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 \
                            or not isinstance(event, dict):
                        raise ValueError
                except (ValueError, RecursionError, TypeError, KeyError):
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
        fd = os.open(self.spool, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a crashed append's partial line: end it, keep ours whole
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
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

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing is pending (within `timeout` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Stop delivering (a POST under way finishes or times out first); keeps the spool."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self.timeout_s + 5)
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
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a bad status line
            reason = getattr(exc, "reason", None) or exc
            return "retry", f"{self.url}: {str(reason)[:200]}"
