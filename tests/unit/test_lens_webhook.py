"""The webhook outbox against a real local HTTP receiver that is down, then failing, then up:
nothing lost, nothing duplicated across a restart, order kept, the spool bounded."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetctl.errors import DataError, UsageError
from fleetctl.lens.webhook import WebhookOutbox
from tests.support.outbox import wait_idle


class Receiver:
    """An HTTP server on a fixed port, started and stopped at will; `status` is its answer."""

    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.status = 200
        self.got: list[dict] = []  # events answered 2xx, in arrival order
        self.attempts = 0
        self.seqs: list[str] = []
        self.server = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.attempts += 1
                self.send_response(outer.status)
                self.end_headers()
                if outer.status < 300:
                    outer.got.append(json.loads(body))
                    outer.seqs.append(self.headers["X-Fleetctl-Sequence"])

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


def outbox(url, spool, **kw):
    kw = {"timeout_s": 1.0, "backoff_s": 0.02, "backoff_max_s": 0.1, **kw}
    return WebhookOutbox(url, spool, **kw)


def ev(i):
    return {"id": f"ev-20261201T060000-{i:04d}", "kind": "open", "n": i}


def wait(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_down_then_500_then_up_then_restart(tmp_path, receiver):
    spool = tmp_path / "webhook.spool"
    box = outbox(receiver.url, spool)
    for i in range(5):
        box.submit(ev(i))
    wait(lambda: box.stats()["failed"] >= 3)  # nobody listening: connection refused
    assert box.stats()["delivered"] == 0 and box.pending == 5
    receiver.status = 500
    receiver.start()
    wait(lambda: receiver.attempts >= 3)
    assert box.stats()["delivered"] == 0 and "HTTP 500" in box.stats()["last_error"]
    receiver.status = 200
    assert wait_idle(box, 10)
    assert [e["n"] for e in receiver.got] == [0, 1, 2, 3, 4]
    receiver.status = 503  # failing again: three events stay undelivered across the restart
    for i in range(5, 8):
        box.submit(ev(i))
    wait(lambda: receiver.attempts >= 8)
    box.close()
    stats = box.stats()
    assert stats["delivered"] == 5 and stats["pending"] == 3

    receiver.status = 200
    box2 = outbox(receiver.url, spool)
    # 3, or 2 under load: a POST the first outbox sent before its close can reach this receiver's
    # handler after the status went back to 200 (seen in CI, 2026-12-02); delivery is at least
    # once, and a receiver drops duplicates by sequence number (docs/lens.md)
    assert box2.pending in (2, 3)
    assert wait_idle(box2, 10)
    box2.close()
    got = [e["n"] for e in receiver.got]
    assert list(dict.fromkeys(got)) == list(range(8))  # none lost, in order
    assert len(got) - len(set(got)) <= 1  # at most that one late duplicate
    assert list(dict.fromkeys(receiver.seqs)) == [str(i) for i in range(1, 9)]
    assert box2.stats()["delivered"] >= 7  # counters persist across the restart

    box3 = outbox(receiver.url, spool)  # a third start has nothing to resend
    assert box3.pending == 0
    box3.close()


def test_spool_is_bounded_and_drops_the_oldest(tmp_path, receiver):
    spool = tmp_path / "w.spool"
    box = outbox(receiver.url, spool, max_spool=3, start=False)
    for i in range(10):
        box.submit(ev(i))
    assert box.stats()["dropped"] == 7 and box.pending == 3
    box.close()
    receiver.start()
    box = outbox(receiver.url, spool, max_spool=3)
    assert wait_idle(box, 10)
    box.close()
    assert [e["n"] for e in receiver.got] == [7, 8, 9]
    assert box.stats()["dropped"] == 7


def test_permanent_refusal_is_rejected_not_retried(tmp_path, receiver):
    receiver.status = 400
    receiver.start()
    box = outbox(receiver.url, tmp_path / "w.spool")
    box.submit(ev(1))
    box.submit(ev(2))
    assert wait_idle(box, 10)
    box.close()
    assert box.stats()["rejected"] == 2 and receiver.attempts == 2


def test_compaction_keeps_undelivered(tmp_path, receiver, monkeypatch):
    import fleetctl.lens.webhook as webhook

    monkeypatch.setattr(webhook, "COMPACT_AFTER", 5)
    receiver.start()
    spool = tmp_path / "w.spool"
    box = outbox(receiver.url, spool)
    for i in range(12):
        box.submit(ev(i))
    assert wait_idle(box, 10)
    box.close()
    assert len(spool.read_bytes().splitlines()) < 12
    assert [e["n"] for e in receiver.got] == list(range(12))


def test_hostile_spool_and_state(tmp_path, receiver):
    spool = tmp_path / "w.spool"
    spool.write_bytes(b"junk\n" + b"x" * 200_000 + b"\n" + b'{"seq": true, "event": {}}\n'
                      + b'{"seq": 4, "event": {"n": 4}}\n' + b'{"seq": 5, "ev')
    receiver.start()
    box = outbox(receiver.url, spool)
    assert box.stats()["spool_lines_skipped"] == 4
    box.submit(ev(6))  # after the partial line, whole
    assert wait_idle(box, 10)
    box.close()
    assert [e["n"] for e in receiver.got] == [4, 6]
    # a damaged state is one logged line, never a failed start: the spool is sent again
    for bad in ('{"acked": -3}', "[" * 60_000, '{"acked": "7"}', "\xff"):
        (tmp_path / "w.spool.state").write_text(bad, errors="surrogateescape")
        logs: list[str] = []
        box = outbox(receiver.url, spool, log=logs.append)
        assert wait_idle(box, 10)
        box.close()
        assert len(logs) == 1 and "sent again" in logs[0]
    assert [e["n"] for e in receiver.got] == [4, 6] + [4, 6] * 4


def test_a_spool_that_is_not_a_regular_file_never_hangs_or_stops_the_start(tmp_path):
    spool = tmp_path / "w.spool"
    os.mkfifo(spool)
    logs: list[str] = []
    box = outbox("http://127.0.0.1:9/x", spool, log=logs.append, start=False)
    assert len(logs) == 1 and "not a regular file" in logs[0]
    with pytest.raises(DataError, match="not a regular file"):
        box.submit(ev(1))
    box.close()
    spool.unlink()
    spool.write_bytes(b'{"seq": 1, "event": ' + b"[" * 100 + b"]" * 100 + b"}\n")
    box = outbox("http://127.0.0.1:9/x", spool, start=False)
    assert box.stats()["spool_lines_skipped"] == 1 and box.pending == 0  # nesting bounded
    box.close()


def test_refusals(tmp_path):
    for url in ("file:///etc/passwd", "ftp://x/y", "not a url", "http://"):
        with pytest.raises(UsageError):
            WebhookOutbox(url, tmp_path / "s")
    box = outbox("http://127.0.0.1:9/x", tmp_path / "s", start=False)
    with pytest.raises(DataError):  # one outbox per spool
        outbox("http://127.0.0.1:9/x", tmp_path / "s", start=False)
    with pytest.raises(DataError):
        box.submit({"x": float("nan")})
    with pytest.raises(DataError):
        box.submit(["not", "an", "object"])
    box.close()


def test_submit_after_close_is_refused(tmp_path):
    box = outbox("http://127.0.0.1:9/x", tmp_path / "s", start=False)
    box.close()
    with pytest.raises(DataError, match="closed"):
        box.submit({"n": 1})


class Trickler:
    """A real local HTTP receiver that reads the request, then answers one byte every 50 ms,
    forever: each byte arrives well inside the socket timeout, the answer never ends."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.connections = 0
        self.closed_by_client = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn):
        with conn:
            conn.recv(65536)  # the request (small: one event)
            answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10**6
            for i in range(len(answer)):
                if self.stop.is_set():
                    return
                try:
                    conn.sendall(answer[i:i + 1])
                except OSError:  # the client gave up: what the deadline is for
                    self.closed_by_client.set()
                    return
                time.sleep(0.05)

    def close(self):
        self.stop.set()
        self.sock.close()


def test_a_trickling_receiver_is_cut_at_the_delivery_deadline(tmp_path):
    slow = Trickler()
    try:
        box = outbox(slow.url, tmp_path / "w.spool", timeout_s=1.0, deadline_s=1.5,
                     backoff_s=30, backoff_max_s=30)
        box.submit(ev(1))
        # a bounded wait: without a deadline the POST would last until the receiver stops
        wait(lambda: box.stats()["failed"] >= 1, timeout=15)
        stats = box.stats()
        assert "deadline" in stats["last_error"] and stats["delivered"] == 0 and box.pending == 1
        wait(lambda: slow.closed_by_client.is_set(), timeout=15)  # the socket was closed
        started = time.monotonic()
        box.close()
        assert time.monotonic() - started < 10  # close never waits on a receiver
    finally:
        slow.close()
    with pytest.raises(UsageError):
        WebhookOutbox(slow.url, tmp_path / "x.spool", timeout_s=5, deadline_s=1)
