"""Registered agents on the 4-host lab (issue 22, "agents that stay up"): `fleetctl lens agent`
on every node, as fleetctl-lens-agent.service would run it, registers with a coordinator started
with `--agents registered`; the agents trace their own flows' paths through the registration
(no ssh from the coordinator), and the probing is the same as with started agents.

- a clean stretch gives no event, every agent registered once;
- an agent holding another key is refused and gets no configuration;
- an agent killed (SIGKILL) and started again 4 s later (what systemd's Restart= does) registers
  again, its gap is recorded, and nothing is blamed on the network;
- a loss on a spine cable is one event, closed after the fault is cleared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labutil import wait_for

from fleetctl.lab import faults
from fleetctl.lab.topology import MGMT_GATEWAY

pytestmark = [pytest.mark.lab]
ROOT = Path(__file__).resolve().parents[2]


def _env(lab) -> dict:
    env = lab.command_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def fleetctl(lab, *args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "fleetctl", *args], env=_env(lab),
                       capture_output=True, text=True, timeout=120)
    if check and r.returncode not in (0, 1, 2):
        raise AssertionError(f"fleetctl {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


class Registered:
    def __init__(self, lab, tmp: Path):
        self.lab, self.tmp = lab, tmp
        self.state = tmp / "state"
        self.key = tmp / "lens.key"
        self.port = 61250 + os.getpid() % 500
        self.address = f"{MGMT_GATEWAY}:{self.port}"
        self.agents: dict[str, subprocess.Popen] = {}

    def start_agent(self, node: str, key: Path | None = None) -> subprocess.Popen:
        ns = self.lab.netns(node)
        log = open(self.tmp / f"agent-{node}.log", "ab")
        p = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-m", "fleetctl",
                              "lens", "agent", "--coordinator", self.address,
                              "--key-file", str(key or self.key), "--node", node],
                             env=_env(self.lab), stdout=log, stderr=log, start_new_session=True)
        log.close()
        return p

    def agent_log(self, node: str) -> str:
        try:
            return (self.tmp / f"agent-{node}.log").read_text()
        except OSError:
            return ""

    def status(self) -> dict:
        r = fleetctl(self.lab, "--format", "json", "lens", "status", "--state-dir", str(self.state),
                     check=False)
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def events(self) -> list[dict]:
        r = fleetctl(self.lab, "--format", "json", "lens", "events", "--state-dir", str(self.state))
        return json.loads(r.stdout)["events"]

    def log(self) -> str:
        try:
            return (self.state / "lens.log").read_text()[-4000:]
        except OSError:
            return ""

    def agents_alive(self) -> dict[str, bool]:
        return {a["host"]: a["alive"] for a in self.status().get("agents", [])}


@pytest.fixture(scope="module")
def reg(lab, tmp_path_factory):
    R = Registered(lab, tmp_path_factory.mktemp("registered"))
    fleetctl(lab, "lens", "keygen", str(R.key))
    r = fleetctl(lab, "--format", "json", "lens", "run", "--agents", "registered", "--listen",
                 R.address, "--key-file", str(R.key), "--state-dir", str(R.state), "--rate", "100")
    assert r.returncode == 0, r.stderr
    try:
        for node in lab.nodes:
            R.agents[node] = R.start_agent(node)
        wait_for(lambda: all(R.agents_alive().get(n) for n in lab.nodes) or None, 60, 0.5)
        wait_for(lambda: R.status().get("counters", {}).get("windows", 0) >= 3 or None, 60, 0.5)
        yield R
    finally:
        fleetctl(lab, "lens", "stop", "--state-dir", str(R.state), check=False)
        for p in R.agents.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in R.agents.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        if faults.listing():
            faults.clear()


def test_every_agent_registers_and_a_clean_stretch_gives_no_event(reg):
    time.sleep(15)
    st = reg.status()
    assert st["counters"]["events_written"] == 0, reg.log()
    assert reg.events() == []
    assert st["last_window"]["probes"] > 0
    assert not st["last_window"]["blind"], st["last_window"]
    for a in st["agents"]:
        assert a["alive"] and a["starts"] == 1, a
    for node in reg.lab.nodes:
        assert "registered with" in reg.agent_log(node)
        assert "traced " in reg.agent_log(node)  # its own flows, through the registration


def test_the_agents_traced_the_paths_through_their_registration(reg):
    # lens.trace_via = agents (the default with registered agents): the coordinator needed no
    # transport to the nodes; each agent traced its own flows over the routed fabric
    log = (reg.state / "lens.log").read_text()
    n = len(reg.lab.nodes)
    assert f"traced through {n} of {n} agents" in log, log[-3000:]
    plan = json.loads(log.split("plan: ", 1)[1].splitlines()[0])
    assert plan["paths_traced"] > 0 and "path tracing failed" not in log


def test_an_agent_with_another_key_is_refused(reg, tmp_path):
    other = tmp_path / "other.key"
    fleetctl(reg.lab, "lens", "keygen", str(other))
    p = reg.start_agent(reg.lab.nodes[0], key=other)
    try:
        wait_for(lambda: "wrong key" in reg.log() or None, 30, 0.5)
        wait_for(lambda: "coordinator refused" in reg.agent_log(reg.lab.nodes[0]) or None, 30, 0.5)
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=10)
    # the node's real agent was not displaced
    assert reg.agents_alive()[reg.lab.nodes[0]]
    assert reg.status()["counters"]["events_written"] == 0


def test_a_killed_agent_registers_again_and_nothing_is_blamed_on_the_network(reg):
    node = reg.lab.nodes[1]
    os.killpg(reg.agents[node].pid, signal.SIGKILL)
    reg.agents[node].wait(timeout=10)
    time.sleep(4)  # systemd's RestartSec
    reg.agents[node] = reg.start_agent(node)
    wait_for(lambda: next((a for a in reg.status()["agents"]
                           if a["host"] == node and a["alive"] and a["starts"] == 2), None), 60, 0.5)
    time.sleep(8)
    st = reg.status()
    a = next(a for a in st["agents"] if a["host"] == node)
    assert a["gaps"] and a["gaps"][-1]["seconds"] >= 3, a
    assert st["counters"]["events_written"] == 0, reg.log()
    assert reg.events() == []


def test_a_loss_on_a_spine_cable_is_one_event(reg):
    cable = "leaf1--spine1"
    t0 = time.time()
    faults.add(cable, "loss", "5")
    try:
        ev = wait_for(lambda: next((e for e in reg.events() if e["element"]["id"] == cable), None),
                      30, 0.5)
        took = time.time() - t0
        assert ev["metric"] == "loss" and ev["state"] == "open", ev
    finally:
        faults.clear()
    closed = wait_for(lambda: next((e for e in reg.events()
                                    if e["id"] == ev["id"] and e["state"] == "closed"), None), 40, 0.5)
    assert closed
    others = [e for e in reg.events() if e["id"] != ev["id"]]
    assert others == [], (others, f"the event came {took:.1f} s after the fault", reg.log())
