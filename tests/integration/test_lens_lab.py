"""`fleetctl lens` on the 8-host lab (issue 12): one coordinator in the background for the module;
a clean stretch gives no event; a 2 % loss, a downed link and a flapping link each give exactly one
event naming the element, listing the Slurm job running across it, closed after clearing; killing
an agent and then the coordinator loses no event and duplicates none.

Marker `lens`: scripts/test runs these in their own pytest run on an 8-host lab
(FLEETCTL_TEST_LAB_HOSTS=8 -m lens); the default 4-host session deselects them. Timing on a loaded
2-core machine is noisy: the bounds are generous, medians are in benchmarks/lens_time_to_culprit.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from labutil import sbatch, wait_for

from fleetctl.lab import faults

pytestmark = [pytest.mark.lab, pytest.mark.lens]
EVENT_WITHIN_S = 25.0  # fault -> open event (median ~2-4 s here; a loaded machine is slower)
CLOSE_WITHIN_S = 30.0


def fleetctl(lab, *args, check=True, site: Path | None = None) -> subprocess.CompletedProcess:
    env = lab.command_env()
    if site is not None:
        env["FLEETCTL_SITE"] = str(site)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                    env.get("PYTHONPATH", "")) if p)
    r = subprocess.run([sys.executable, "-m", "fleetctl", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check and r.returncode not in (0, 1, 2):
        raise AssertionError(f"fleetctl {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


class Receiver:
    """A webhook receiver on the loopback: every POSTed body, decoded."""

    def __init__(self):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/lens"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lens:
    """The coordinator on the lab's site file, plus a /metrics port and a webhook receiver."""

    def __init__(self, lab, site_dir: Path):
        self.lab = lab
        self.dir = Path(lab.cluster.data["lens"]["state_dir"])
        self.receiver = Receiver()
        self.metrics_port = _free_port()
        text = lab.site_file.read_text()
        assert "\n[lens]\n" in text
        self.site = site_dir / "site.toml"
        self.site.write_text(text.replace("\n[lens]\n", f"\n[lens]\nmetrics_port = {self.metrics_port}\n"
                                          f"webhook_url = \"{self.receiver.url}\"\n"))

    def run(self, *args, check=True) -> subprocess.CompletedProcess:
        return fleetctl(self.lab, *args, check=check, site=self.site)

    def start(self) -> None:
        # 50 probes/s per pair (2,800 a second per host): at 100 the 8 agents took ~1.85 of the 2
        # cores, and on a CI machine that was also busy every host was marked overloaded for
        # minutes, so no event could close (their places unjudged)
        r = self.run("--format", "json", "lens", "run", "--rate", "50")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: self.status().get("counters", {}).get("windows", 0) >= 3, 60, 0.5)

    def status(self) -> dict:
        return json.loads(self.run("--format", "json", "lens", "status", check=False).stdout)

    def events(self) -> list[dict]:
        return json.loads(self.run("--format", "json", "lens", "events").stdout)["events"]

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def posted(self, ev_id: str, kind: str) -> dict | None:
        return next((b for b in list(self.receiver.bodies)
                     if b.get("id") == ev_id and b.get("kind") == kind), None)

    def records(self) -> list[dict]:
        path = self.dir / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
            if path.exists() else []

    def log(self) -> str:
        try:
            return (self.dir / "lens.log").read_text()[-4000:]
        except OSError:
            return ""

    def new_events(self, since_ids: set[str]) -> list[dict]:
        return [e for e in self.events() if e["id"] not in since_ids]


@pytest.fixture(scope="module")
def lens(lab, tmp_path_factory):
    # conftest deselects these tests unless the session lab has 8 hosts or more
    assert len(lab.nodes) >= 8, "needs FLEETCTL_TEST_LAB_HOSTS=8 (scripts/test)"
    # a job across the leaves whose NIC cables the faults below touch
    job = sbatch(lab, "-N2", "-w", "node3,node8", "--wrap", "sleep 3000")
    L = Lens(lab, tmp_path_factory.mktemp("lens"))
    L.job = job
    L.start()
    yield L
    L.run("lens", "stop", check=False)
    L.receiver.close()
    subprocess.run(["scancel", job], env=lab.command_env(), timeout=30, check=False)
    if faults.listing():
        faults.clear()


def expect_events(lens, before: set[str], n: int, why: str = "") -> None:
    """Exactly `n` events since `before`; else fail printing each event on one line with its
    evidence, then the end of the coordinator's log (pytest.fail: an assertion's message is cut
    in the middle under -q, and CI's output then did not say which element a false event named)."""
    events = lens.new_events(before)
    if len(events) == n:
        return
    rows = [f"{e['id']} {e['element']['type']} "
            f"{e['element'].get('direction') or e['element']['id']} {e['metric']} "
            f"{e['severity']} {e['state']} evidence "
            f"{json.dumps(e.get('evidence'), sort_keys=True)[:1500]}" for e in events]
    pytest.fail("\n".join([f"{len(events)} new events, expected {n}" + (f" ({why})" if why else "")]
                          + rows + ["--- lens.log ---", lens.log()]), pytrace=False)


def _one_event(lens, before: set[str], element_ok, timeout=EVENT_WITHIN_S) -> dict:
    try:
        return wait_for(lambda: next((e for e in lens.new_events(before) if element_ok(e)), None),
                        timeout, 0.5)
    except AssertionError:
        raise AssertionError(f"no event in {timeout} s; events {lens.events()}\n{lens.log()}") \
            from None


def _closed(lens, ev_id: str, timeout=CLOSE_WITHIN_S) -> dict:
    try:
        return wait_for(lambda: next((e for e in lens.events() if e["id"] == ev_id and
                                      e["state"] == "closed"), None), timeout, 0.5)
    except AssertionError:
        st = lens.status()
        raise AssertionError(f"{ev_id} not closed in {timeout} s\n{lens.log()}\n"
                             f"last window {st.get('last_window')}\n"
                             f"counters {st.get('counters')}") from None


def test_clean_run_gives_no_event(lens):
    before = {e["id"] for e in lens.events()}
    assert before == set(), lens.log()  # nor did the start-up (this is the module's first test)
    time.sleep(60)  # the clean minute
    st = lens.status()
    expect_events(lens, before, 0)
    assert st["running"] and all(a["alive"] for a in st["agents"])
    assert st["last_window"]["probes"] > 1000
    base = st["delay_baselines"]  # a clean minute teaches most paths their delay
    assert 0 < base["learnt"] <= base["paths"] and base["share"] > 0.5, base
    assert {c["host"] for c in st["clock"]} >= {f"node{i}" for i in range(1, 9)}
    text = lens.metrics()  # the Prometheus endpoint of the running coordinator
    for i in range(1, 9):
        assert metric(text, "fleetctl_lens_agent_alive", node=f"node{i}") == 1.0, text[-3000:]
    assert metric(text, "fleetctl_lens_open_events", severity="warning", metric="loss") == 0.0
    assert metric(text, "fleetctl_lens_windows_total") >= 30


def metric(text: str, name: str, **labels) -> float | None:
    """One sample of the exposition, by name and labels (parsed: the label order of the text is the
    client library's choice, and changed between prometheus_client releases)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_two_percent_loss_is_one_event_with_the_job(lens):
    before = {e["id"] for e in lens.events()}
    t0 = time.time()
    faults.add("leaf2--spine1", "loss", "2")
    try:
        ev = _one_event(lens, before, lambda e: e["element"]["id"] == "leaf2--spine1")
        took = time.time() - t0
        assert ev["metric"] == "loss" and ev["state"] == "open"
        assert [j["job_id"] for j in ev["jobs"]] == [lens.job]
        assert ev["jobs"][0]["nodes"] and ev["jobs"][0]["user"]
        time.sleep(3)
    finally:
        faults.clear()
    expect_events(lens, before, 1, f"the event came {took:.1f} s after the fault")
    _closed(lens, ev["id"])
    assert len(lens.new_events(before)) == 1
    # the webhook got the event's open and close records, in that order
    opened = wait_for(lambda: lens.posted(ev["id"], "open"), 30, 0.5)
    closed = wait_for(lambda: lens.posted(ev["id"], "close"), 30, 0.5)
    assert closed["element"]["id"] == "leaf2--spine1" and closed["state"] == "closed"
    if opened["element"]["id"] != "leaf2--spine1":
        # one window pinned it on the spine first; the next refined the event to the cable
        refined = lens.posted(ev["id"], "update")
        assert opened["element"] == {"type": "switch", "id": "spine1"}, opened
        assert refined["element"]["id"] == "leaf2--spine1", refined
        assert refined["refined_from"] == opened["element"]
    assert lens.receiver.bodies.index(opened) < lens.receiver.bodies.index(closed)


def test_downed_link_is_one_event(lens):
    before = {e["id"] for e in lens.events()}
    faults.add("node3:eth1", "down")
    try:
        # down at once, or (down in the last moments of a window) loss first and an update to
        # down a window later: one event either way (expect_events below)
        ev = _one_event(lens, before, lambda e: "node3:eth1" in e["element"]["id"]
                        and e["metric"] == "down")
        assert ev["severity"] == "critical"
        assert lens.job in [j["job_id"] for j in ev["jobs"]]
        time.sleep(3)
    finally:
        faults.clear()
    _closed(lens, ev["id"])
    expect_events(lens, before, 1)


def _flapper_downs(since: float) -> list[float]:
    """When the lab's flapper took node8:eth1's cable down (its log: `<time> <link> down`)."""
    from fleetctl.lab.paths import lab_dir

    out = []
    for line in (lab_dir() / "logs" / "flap.log").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and "node8:eth1" in parts[1] and parts[2] == "down" and \
                float(parts[0]) >= since:
            out.append(float(parts[0]))
    return out


def test_flapping_link_is_one_flapping_event(lens):
    before = {e["id"] for e in lens.events()}
    t0 = time.time()
    faults.add("node8:eth1", "flap", "2s")
    try:
        ev = _one_event(lens, before, lambda e: "node8:eth1" in e["element"]["id"]
                        and e["metric"] == "flapping", timeout=EVENT_WITHIN_S + 10)
        # the period lens measured, against the one the flapper kept: within one window, or
        # 60 % when a down start fell between bins and one interval counts double. (CI saw 3, 4
        # and 5 s against 2 s while the lab's cable, once up, could pass nothing for ~1 s: the
        # network skipped whole cycles; faults.restore_link now flushes the neighbour entries
        # that caused it)
        downs = _flapper_downs(t0 - 1)
        real = (downs[-1] - downs[0]) / (len(downs) - 1) if len(downs) > 1 else 2.0
        assert ev["flap"]["count"] >= 3 and ev["flap"]["period_s"] >= 1.0, ev["flap"]
        # within a factor of about two: on a loaded CI machine a window late by a cycle merged two
        # flaps once (3.4 s against 2.0 s)
        assert abs(ev["flap"]["period_s"] - real) <= max(1.5, 0.75 * real), (ev["flap"], downs)
        assert lens.job in [j["job_id"] for j in ev["jobs"]]
    finally:
        faults.clear()
    _closed(lens, ev["id"], CLOSE_WITHIN_S + 10)
    expect_events(lens, before, 1)


def test_an_agent_set_aside_elsewhere_holds_no_event_open(lens):
    """node7's agent stopped (its host blind: everything from or to it set aside) while a loss
    on leaf1--spine2 clears: the event closes in windows judged without node7. Until the
    coverage rule, any host set aside held every place, and at a thousand hosts one always is."""
    before = {e["id"] for e in lens.events()}
    faults.add("leaf1--spine2", "loss", "5")
    pid = None
    windows = {}  # the coordinator's last window, polled: t_end -> its blind hosts

    def closed():
        st = lens.status()
        if st.get("last_window"):
            windows[_epoch(st["last_window"]["t_end"])] = st["last_window"]["blind"]
        return next((e for e in st.get("open_events", []) if e["id"] == ev["id"]), None) is None
    try:
        ev = _one_event(lens, before, lambda e: e["element"]["id"] == "leaf1--spine2")
        pid = _agent_pid("node7")
        os.kill(pid, signal.SIGSTOP)
        faults.clear()
        cleared = time.time()
        try:
            wait_for(closed, CLOSE_WITHIN_S, 0.2)
        except AssertionError:
            raise AssertionError(f"not closed in {CLOSE_WITHIN_S} s with node7 stopped\n"
                                 f"{windows}\n{lens.log()}") from None
        close = next(r for r in lens.records() if r["id"] == ev["id"] and r["kind"] == "close")
        when = _epoch(close["time"])
        judged = {t: b for t, b in windows.items() if cleared < t <= when}
        # node7's last batch came before the stop: every window after it had node7 blind,
        # the ones that closed the event too (the old rule waited for node7's agent to return)
        assert judged and all("node7" in b for b in judged.values()), (when - cleared, windows)
        assert close["element"]["id"] == "leaf1--spine2"
    finally:
        faults.clear()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    wait_for(lambda: next(a for a in lens.status()["agents"] if a["host"] == "node7")["alive"],
             30, 0.5)
    expect_events(lens, before, 1)


def _epoch(t) -> float:
    return float(t) if isinstance(t, (int, float)) else \
        datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


def _agent_pid(node: str) -> int:
    """The lens agent of `node` (started by the coordinator over ssh): its python3 process."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) >= 2 and Path(cmd[0].decode(errors="replace")).name.startswith("python3") \
                and cmd[1] == b"-" and f"FLEETCTL_NODE={node}".encode() in env and \
                any(e.startswith(b"FLEETCTL_RUN=") for e in env):
            return int(proc.name)
    raise AssertionError(f"no lens agent found for {node}")


def test_killed_agent_and_coordinator_lose_no_event(lens):
    before = {e["id"] for e in lens.events()}
    st0 = lens.status()
    restarts0 = next(a["restarts"] for a in st0["agents"] if a["host"] == "node2")
    os.kill(_agent_pid("node2"), signal.SIGKILL)
    wait_for(lambda: next(a for a in lens.status()["agents"] if a["host"] == "node2")
             ["restarts"] > restarts0, 30, 0.5)
    agent = wait_for(lambda: next((a for a in lens.status()["agents"] if a["host"] == "node2"
                                   and a["alive"] and a["gaps"]), None), 30, 0.5)
    assert agent["gaps"][-1]["seconds"] > 0
    time.sleep(4)
    expect_events(lens, before, 0, "a killed agent is no network fault")
    # a fault in force, then the coordinator dies hard and comes back. Not the previous test's
    # cable: its fault there was a bad start seconds ago, and with one more across the restart
    # (a window the re-plan judged good) the place made 3 in lens.flap_window_s: a `flapping`
    # event that closes only 3 periods after its last start (CI, 2026-12-05: not in 30 s)
    faults.add("leaf2--spine2", "loss", "5")
    try:
        ev = _one_event(lens, before, lambda e: e["element"]["id"] == "leaf2--spine2")
        saved = json.loads((lens.dir / "state.json").read_text())
        os.kill(lens.status()["pid"], signal.SIGKILL)
        wait_for(lambda: not lens.status()["running"], 15, 0.2)
        lens.start()

        def resumed():
            st = json.loads((lens.dir / "state.json").read_text())
            return st if st["last_window_end"] > saved["last_window_end"] + 2 else None

        again = wait_for(resumed, 45, 0.5)  # it re-plans and re-traces first
        assert again["windows"] > saved["windows"]  # counting on from the saved state
        time.sleep(3)
    finally:
        faults.clear()
    _closed(lens, ev["id"])
    expect_events(lens, before, 1, "one fault across a coordinator's restart")
    opens = [r for r in lens.records() if r["kind"] == "open" and r["id"] not in before]
    assert [r["id"] for r in opens] == [ev["id"]], opens
    # the webhook's spool outlived the coordinator: both records reached the receiver
    assert wait_for(lambda: lens.posted(ev["id"], "open"), 30, 0.5)
    assert wait_for(lambda: lens.posted(ev["id"], "close"), 30, 0.5)
