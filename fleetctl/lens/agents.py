"""Probe agents kept alive on every node: started over the site's transport as streams (one
long-running `python3 -` per node, the agent and its configuration on stdin), their FLS1 output
decoded line by line, and restarted when they die or go silent.

Each node has a thread: start the agent, feed every decoded batch to `on_batch(node, batch)`,
and when the stream ends (killed, crashed, connection lost) note the gap and start it again after
a back-off (1 s doubling to 30 s, jittered by 25 %, reset after a minute of good service); the
first starts are spread at START_RATE a second. An agent that sends no batch for `silent_s` is
taken for hung and killed. Coverage intervals (from the start of the agent's first health window
to its last batch) tell the analysis which hosts were blind in a window.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque

from fleetctl.errors import DataError, FleetctlError
from fleetctl.fanout.stream import open_stream
from fleetctl.mesh.collect import StreamDecoder

MAX_INTERVALS = 16
START_RATE = 20.0  # agent starts a second at most, at start-up
MAX_GAPS = 32


class AgentState:
    def __init__(self, node: str):
        self.node = node
        self.alive = False
        self.starts = 0
        self.restarts = 0
        self.started_at = 0.0  # first probe time of the current incarnation (wall, s)
        self.last_batch = 0.0
        self.batches = 0
        self.last_error = ""
        self.intervals: deque[list[float]] = deque(maxlen=MAX_INTERVALS)  # [from, to] covered
        self.first_batch = False  # the current incarnation has not sent a batch yet
        self.gaps: deque[dict] = deque(maxlen=MAX_GAPS)
        self.down_since: float | None = None
        self.overloaded = False
        self.pps = 0.0
        self.cpu_pct = 0.0

    # Coverage: when the agent surely answered probes. An incarnation covers nothing until its
    # first batch, and then only from its first health window's start: over a throttled sshd the
    # agent can start seconds after it was asked to, and probes sent to it meanwhile are lost to
    # fleetctl's own start-up, not to a cable (the 64-host lab opened `down` events on exactly that).
    def began(self, start_at: float, now: float) -> None:
        self.starts += 1
        self.restarts = self.starts - 1
        self.alive = True
        self.started_at = start_at
        self.last_batch = now
        self.first_batch = True

    def batch(self, now: float, health_rows: list) -> None:
        self.last_batch = now
        self.batches += 1
        if self.first_batch:
            self.first_batch = False
            t0 = now
            if health_rows and isinstance(health_rows[0], (list, tuple)) and health_rows[0] and \
                    isinstance(health_rows[0][0], (int, float)) and health_rows[0][0] > 0:
                t0 = min(now, health_rows[0][0] / 1e9)  # the agent's first window's start
            self.intervals.append([max(self.started_at, t0) + 0.1, now - 0.05])
        else:
            self.intervals[-1][1] = now - 0.05

    def ended(self) -> None:
        self.alive = False
        if not self.first_batch and self.intervals:
            # a dying agent stops answering before its stream ends: trust the last batch minus
            # one health window only
            self.intervals[-1][1] = min(self.intervals[-1][1], self.last_batch - 1.0)
        self.first_batch = False

    def covered(self, a: float, b: float) -> bool:
        return any(lo <= a and hi >= b for lo, hi in self.intervals)

    def to_dict(self) -> dict:
        age = round(time.time() - self.last_batch, 2) if self.last_batch else None
        return {"host": self.node, "alive": self.alive, "starts": self.starts,
                "restarts": self.restarts, "last_batch_age_s": age,
                "batches": self.batches, "last_error": self.last_error,
                "overloaded": self.overloaded, "pps": round(self.pps, 1),
                "cpu_pct": round(self.cpu_pct, 2), "gaps": list(self.gaps)[-5:]}


class AgentSet:
    """What the coordinator reads of its agents however they run (started over a transport here,
    or registered: lens/listener.py): each node's state, its coverage, its gaps."""

    def __init__(self, nodes: list[str], on_batch, log, silent_s: float, start_delay: float):
        self.nodes = list(nodes)
        self.on_batch = on_batch
        self.log = log
        self.silent_s = silent_s
        self.start_delay = start_delay
        self.state = {n: AgentState(n) for n in self.nodes}
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def covered(self, node: str, a: float, b: float) -> bool:
        """Whether the node's agent ran (answering) through [a, b], wall seconds."""
        st = self.state.get(node)
        if st is None:
            return False
        with self.lock:
            return st.covered(a, b)

    def _went_down(self, st: AgentState, now: float) -> None:
        if st.down_since is None:
            st.down_since = now

    def _came_back(self, st: AgentState, start_at: float, how: str) -> None:
        """A new incarnation: the gap since the last one ended, recorded and logged."""
        if st.down_since is None:
            return
        gap = {"from": round(st.down_since, 3), "to": round(start_at, 3),
               "seconds": round(start_at - st.down_since, 2)}
        st.gaps.append(gap)
        self.log(f"agent on {st.node} {how} after a gap of {gap['seconds']:g} s")
        st.down_since = None


class AgentSupervisor(AgentSet):
    def __init__(self, transport, nodes: list[str], script_for, on_batch, log=lambda _m: None,
                 silent_s: float = 5.0, start_delay: float = 0.5):
        super().__init__(nodes, on_batch, log, silent_s, start_delay)
        self.transport = transport
        self.script_for = script_for  # (node, start_at) -> script text
        self.streams: dict[str, object] = {}
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for i, node in enumerate(self.nodes):
            # starts spread at START_RATE a second, so a thousand never storm sshd at once
            # (MaxStartups drops handshakes beyond 10 unauthenticated by default)
            delay = i / START_RATE + random.uniform(0.0, 0.5 / START_RATE)
            t = threading.Thread(target=self._keep, args=(node, delay), name=f"lens-agent-{node}",
                                 daemon=True)
            t.start()
            self.threads.append(t)
        threading.Thread(target=self._watchdog, name="lens-watchdog", daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            streams = list(self.streams.values())
        for s in streams:
            s.stop()
        for t in self.threads:
            t.join(timeout=10)

    # ------------------------------------------------------------------ per node
    def _keep(self, node: str, delay: float = 0.0) -> None:
        st = self.state[node]
        backoff = 1.0
        if delay > 0:
            self.stopping.wait(delay)
        while not self.stopping.is_set():
            began = time.time()
            self._run_once(node, st)
            if self.stopping.is_set():
                break
            now = time.time()
            self._went_down(st, now)
            backoff = 1.0 if now - began > 60 else min(30.0, backoff * 2 if st.starts > 1 else 1)
            wait = backoff * random.uniform(0.75, 1.25)  # jittered: restarts never in lock-step
            self.log(f"agent on {node} ended ({st.last_error or 'no reason given'}); "
                     f"restarting in {wait:.1f} s")
            self.stopping.wait(wait)

    def _run_once(self, node: str, st: AgentState) -> None:
        start_at = time.time() + self.start_delay
        try:
            stream = open_stream(self.transport, node, ["python3", "-"],
                                 self.script_for(node, start_at))
        except FleetctlError as exc:
            st.last_error = exc.message[:300]
            return
        with self.lock:
            self.streams[node] = stream
            st.began(start_at, time.time())
        self._came_back(st, start_at, "restarted")
        dec = StreamDecoder(node)
        try:
            for line in stream.lines():
                try:
                    objs = dec.feed(line)
                except DataError as exc:
                    st.last_error = exc.message[:300]
                    break
                for obj in objs:
                    if obj.get("kind") == "end":
                        st.last_error = "agent finished its run"
                        continue
                    with self.lock:
                        st.batch(time.time(), obj.get("health") or [])
                    self.on_batch(node, obj)
                if self.stopping.is_set():
                    break
        finally:
            stream.stop()
            code = stream.exit_code()
            tail = stream.stderr_tail()
            if not st.last_error or st.last_error == "agent finished its run":
                st.last_error = (tail[-1] if tail else f"exit {code}")[:300]
            with self.lock:
                st.ended()
                self.streams.pop(node, None)

    def _watchdog(self) -> None:
        while not self.stopping.wait(1.0):
            now = time.time()
            for node, st in self.state.items():
                if st.alive and now - st.last_batch > self.silent_s:
                    with self.lock:
                        s = self.streams.get(node)
                    if s is not None:
                        st.last_error = f"no batch for {now - st.last_batch:.1f} s (hung?)"
                        s.stop()
