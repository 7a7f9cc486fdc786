"""Path tracing through registered agents (lens/tracer.py): the real coordinator side and the real
node side (lens/nodeagent.py, mesh/trace_agent.py) over loopback TCP, as root (the raw ICMP
socket); the lab test (tests/integration/test_lens_registered_lab.py) traces a routed fabric."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from fleetctl.lens import register as proto
from fleetctl.lens.nodeagent import NodeAgentOptions, register, run_once
from fleetctl.lens.tracer import trace_through_agents

FLOWS = {"node1": [["f0", "127.0.0.1", 47001, "127.0.0.1", 47002, 1, ""]],
         "node2": [["r0", "127.0.0.1", 47002, "127.0.0.1", 47001, 1, ""]]}


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "lens.key"
    proto.write_key(str(path))
    return proto.read_key(str(path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_round(key, hosts, timeout_s):
    port = free_port()
    out: dict = {"warnings": []}

    def go():
        out["docs"] = trace_through_agents(("127.0.0.1", port), key, {"nodes": FLOWS, "timeout": 0.2,
                                                                      "retries": 0}, hosts, timeout_s,
                                           warnings=out["warnings"])
    t = threading.Thread(target=go, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return port, t, out


def agent_answers(port, key, node, answer):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        task = register(s, key, node)
        s.sendall(json.dumps(answer(task)).encode() + b"\n")
    return task


def test_each_node_traces_its_own_flows_and_speaks_only_for_them(key):
    port, t, out = start_round(key, ["node1", "node2"], timeout_s=20)
    task = agent_answers(port, key, "node1", lambda task: {
        "node": "node1", "paths": {"f0": ["10.1.0.1"], "r0": ["6.6.6.6"], "f9": ["1.1.1.1"]},
        "arrived": ["f0", "r0"], "errors": []})
    assert task["task"] == "trace" and task["flows"] == FLOWS["node1"]  # node2's flows not sent
    # node1 registers again while node2 has not answered: come back soon, no back-off
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s, \
            pytest.raises(proto.RegistrationError, match="plan follows") as exc:
        register(s, key, "node1")
    assert exc.value.retry_s == 2.0
    agent_answers(port, key, "node2", lambda task: {"node": "node2", "paths": {"r0": [None, "x"]},
                                                    "arrived": [], "errors": ["e"] * 50})
    t.join(10)
    docs = out["docs"]
    # a node's answer for another node's flow (r0 from node1) or an unknown one is dropped; hops
    # are cut to the flow's hop count
    assert docs["node1"]["paths"] == {"f0": ["10.1.0.1"]} and docs["node1"]["arrived"] == ["f0"]
    assert docs["node2"]["paths"] == {"r0": [None]} and len(docs["node2"]["errors"]) == 20
    assert out["warnings"] == []


def test_a_silent_node_keeps_its_candidate_rows_and_is_named(key):
    port, t, out = start_round(key, ["node1", "node2"], timeout_s=3)
    agent_answers(port, key, "node1", lambda task: {"node": "node1", "paths": {}, "arrived": []})
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # node2 takes its task, dies
        register(s, key, "node2")
    began = time.monotonic()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - began < 5
    assert set(out["docs"]) == {"node1"}
    assert len(out["warnings"]) == 1 and out["warnings"][0].startswith("node2: path tracing failed")


def test_unknown_nodes_and_wrong_answers_are_refused(key):
    port, t, out = start_round(key, ["node1"], timeout_s=4)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s, \
            pytest.raises(proto.RegistrationError, match="not one of"):
        register(s, key, "node7")
    agent_answers(port, key, "node1", lambda task: {"node": "node2", "paths": {}, "arrived": []})
    t.join(10)
    assert out["docs"] == {} and "names 'node2'" in out["warnings"][0]


@pytest.mark.parametrize("change", [
    {"timeout": 60}, {"retries": 9}, {"limit": 1e6},
    {"nodes": {"node1": [["f0", "127.0.0.1", 70000, "127.0.0.1", 1, 1, ""]]}},
    {"nodes": {"node1": [["f0", "127.0.0.1", 1, "127.0.0.1", 1, 99, ""]]}},
    {"nodes": {"node1": [["f0"] * 7]}},
    {"nodes": {"node1": [["f0", "127.0.0.1", 1, "127.0.0.1", 1, 1, ""]] * (proto.MAX_TRACE_FLOWS + 1)}},
])
def test_even_an_authenticated_trace_task_is_bounded(key, change):
    c_nonce, a_nonce = proto.nonce(), proto.nonce()
    task = {**proto.trace_task("node1", FLOWS["node1"], 0.2, 1, 60), **change}
    head, body = proto.config_message(key, c_nonce, a_nonce, "node1", task).split(b"\n", 1)
    with pytest.raises(proto.RegistrationError, match="trace task"):
        proto.check_config(key, json.loads(head), body, c_nonce, a_nonce, "node1")


def test_the_node_agent_traces_with_the_installed_tracer(key):
    # the real node side: mesh/trace_agent over a raw ICMP socket (root); on loopback the
    # destination itself answers (port unreachable), so the flow arrives in one hop
    port, t, out = start_round(key, ["node1"], timeout_s=20)
    opts = NodeAgentOptions(coordinator=("127.0.0.1", port), key=key, node="node1", once=True)
    logs: list[str] = []
    assert run_once(opts, threading.Event(), logs.append) is None  # a trace task: register again
    t.join(10)
    assert out["docs"]["node1"]["arrived"] == ["f0"], (out, logs)
    assert any(line.startswith("traced 1 flows") for line in logs)


def test_trace_via_is_validated():
    from fleetctl.errors import UsageError
    from fleetctl.lens.options import LensOptions

    LensOptions(agents="registered", trace_via="transport").validate()
    for bad in ({"trace_via": "ssh"}, {"trace_timeout_s": 1}):
        with pytest.raises(UsageError, match="trace"):
            LensOptions(**bad).validate()


def test_a_node_that_never_registers_does_not_hold_the_plan_for_the_whole_timeout(key, monkeypatch):
    from fleetctl.lens import tracer

    monkeypatch.setattr(tracer, "QUIET_S", 1.5)
    began = time.monotonic()
    port, t, out = start_round(key, ["node1", "node2"], timeout_s=60)
    agent_answers(port, key, "node1", lambda task: {"node": "node1", "paths": {}, "arrived": []})
    t.join(20)
    assert not t.is_alive() and time.monotonic() - began < 10
    assert set(out["docs"]) == {"node1"} and out["warnings"][0].startswith("node2:")
