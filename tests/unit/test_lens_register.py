"""Registered agents: the handshake (lens/register.py) between the real listener (lens/listener.py)
and the real node side (lens/nodeagent.register) over loopback TCP, the key file's rules, the
bounds a node applies, and the listener's handling of hostile or silent peers."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from fleetctl.errors import ConfigError
from fleetctl.lens import register as proto
from fleetctl.lens.listener import AgentListener, parse_listen
from fleetctl.lens.nodeagent import register

NODES = ["node1", "node2"]


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def config_for(node, start_at):
    return {"run_id": "r123", "port": 61200, "sports": [1, 2], "rate": 50.0, "duration": 3600,
            "output": "summary", "start_at": start_at,
            "nodes": {node: {"nics": [[0 if node == "node1" else 1, "10.0.0.1", "eth0"]]}},
            "pairs": [[0, 0, 1, "10.0.0.2"]], "loops": []}


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "lens.key"
    proto.write_key(str(path))
    return proto.read_key(str(path))


@pytest.fixture
def listener(key):
    got = []
    lst = AgentListener(("127.0.0.1", 0), key, NODES, config_for,
                        lambda node, b: got.append((node, b)), silent_s=1.5)
    # port 0: bind, then read the port back
    lst.start()
    lst.port = lst._server.getsockname()[1]
    lst.got = got
    yield lst
    lst.stop()


def connect(lst):
    return socket.create_connection(("127.0.0.1", lst.port), timeout=5)


def fls1(k: int, obj: dict) -> bytes:
    return f"FLS1 {k} 0 1 {json.dumps(obj, separators=(',', ':'))}\n".encode()


# ---------------------------------------------------------------- key file
def test_key_file_rules(tmp_path):
    path = tmp_path / "k"
    proto.write_key(str(path))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert len(proto.read_key(str(path))) == 32
    with pytest.raises(ConfigError, match="cannot create"):
        proto.write_key(str(path))  # never over an existing key
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        proto.read_key(str(path))
    short = tmp_path / "short"
    short.write_bytes(b"x" * 8)
    os.chmod(short, 0o600)
    with pytest.raises(ConfigError, match="8 bytes"):
        proto.read_key(str(short))
    link = tmp_path / "link"
    os.chmod(path, 0o600)
    link.symlink_to(path)
    with pytest.raises(ConfigError, match="cannot read"):
        proto.read_key(str(link))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ConfigError, match="not a regular file"):
        proto.read_key(str(fifo))
    with pytest.raises(ConfigError, match="No such file"):
        proto.read_key(str(tmp_path / "absent"))


def test_parse_listen():
    assert parse_listen("10.0.0.1:61250") == ("10.0.0.1", 61250)
    assert parse_listen("[::1]:7") == ("::1", 7)
    for bad in ("10.0.0.1", ":80", "host:0", "host:99999", "host:x"):
        with pytest.raises(ConfigError):
            parse_listen(bad)


# ---------------------------------------------------------------- handshake
def test_registration_gives_the_node_its_configuration_and_derives_the_probe_key(listener, key):
    with connect(listener) as s:
        cfg = register(s, key, "node1")
    assert cfg["nodes"].keys() == {"node1"} and cfg["pairs"] == [[0, 0, 1, "10.0.0.2"]]
    assert cfg["key"] == proto.probe_key(key, "r123")  # derived here, never sent
    wait_for(lambda: listener.counters["registered"] == 1)  # the reader thread adopts it


def test_wrong_key_is_refused_both_ways(listener, key, tmp_path):
    other = tmp_path / "other"
    proto.write_key(str(other))
    with connect(listener) as s, pytest.raises(proto.RegistrationError, match="wrong key"):
        register(s, proto.read_key(str(other)), "node1")
    # the listener counts the refusal after sending it: the agent may read it first
    wait_for(lambda: listener.counters["refused"] == 1)
    assert listener.counters["registered"] == 0


def test_unknown_node_and_bad_names_are_refused(listener, key):
    with connect(listener) as s, pytest.raises(proto.RegistrationError, match="not one of"):
        register(s, key, "node9")
    c_nonce = proto.nonce()
    for hello in ({"proto": proto.PROTOCOL, "node": "../etc", "nonce": proto.nonce(), "mac": "x"},
                  {"proto": "other/1"}, {"proto": proto.PROTOCOL, "node": "node1", "nonce": "zz",
                                         "mac": "x"}):
        with pytest.raises(proto.RegistrationError):
            proto.check_agent_hello(key, c_nonce, hello, "peer")


def test_garbage_and_silence_in_the_handshake_do_not_stop_the_listener(listener, key):
    with connect(listener) as s:
        s.recv(4096)
        s.sendall(b"not json\n")
        assert b"error" in s.recv(4096)
    with connect(listener) as s:
        s.recv(4096)
        s.sendall(b"x" * 10_000)  # a line that never ends
        assert b"too long" in s.recv(4096)
    with connect(listener) as s:
        cfg = register(s, key, "node2")
    assert cfg["nodes"].keys() == {"node2"}
    # counted after the error is sent (as above): the client may read it first
    wait_for(lambda: listener.counters["refused"] >= 2)


def test_a_forged_configuration_is_refused_by_the_node(key):
    c_nonce, a_nonce = proto.nonce(), proto.nonce()
    msg = proto.config_message(key, c_nonce, a_nonce, "node1", config_for("node1", 0))
    head_line, body = msg.split(b"\n", 1)
    head = json.loads(head_line)
    assert proto.check_config(key, head, body, c_nonce, a_nonce, "node1")["rate"] == 50.0
    tampered = body.replace(b'"rate":50.0', b'"rate":90.0')
    with pytest.raises(proto.RegistrationError, match="not signed"):
        proto.check_config(key, head, tampered, c_nonce, a_nonce, "node1")
    # replayed to another node, or in another handshake
    with pytest.raises(proto.RegistrationError, match="not signed"):
        proto.check_config(key, head, body, c_nonce, a_nonce, "node2")
    with pytest.raises(proto.RegistrationError, match="not signed"):
        proto.check_config(key, head, body, proto.nonce(), a_nonce, "node1")


@pytest.mark.parametrize("change, why", [
    ({"rate": 1e6}, "out of bounds"), ({"duration": -1}, "out of bounds"),
    ({"output": "document"}, "streams"), ({"nodes": {"other": {}}}, "no entry"),
    ({"rate": "fast"}, "incomplete"), ({"pairs": {"a": 1}}, "must be lists"),
    ({"nodes": {"node1": []}}, "malformed"), ({"nodes": {"node1": {"nics": [5]}}}, "malformed"),
    ({"rate": 5000.0, "pairs": [[i, 0, 1, "10.0.0.2"] for i in range(100)]}, "probes/s"),
    ({"debug_records": 1.5}, "debug_records"), ({"debug_records": -0.1}, "debug_records"),
    ({"debug_records": "all"}, "debug_records"), ({"debug_records": True}, "debug_records"),
])
def test_even_an_authenticated_coordinator_is_bounded(key, change, why):
    c_nonce, a_nonce = proto.nonce(), proto.nonce()
    cfg = {**config_for("node1", 0), **change}
    head_line, body = proto.config_message(key, c_nonce, a_nonce, "node1", cfg).split(b"\n", 1)
    with pytest.raises(proto.RegistrationError, match=why):
        proto.check_config(key, json.loads(head_line), body, c_nonce, a_nonce, "node1")


def test_a_debug_sample_within_bounds_reaches_the_agent(key):
    c_nonce, a_nonce = proto.nonce(), proto.nonce()
    cfg = {**config_for("node1", 0), "debug_records": 0.01}
    head_line, body = proto.config_message(key, c_nonce, a_nonce, "node1", cfg).split(b"\n", 1)
    got = proto.check_config(key, json.loads(head_line), body, c_nonce, a_nonce, "node1")
    assert got["debug_records"] == 0.01


# ---------------------------------------------------------------- streams
def test_batches_reach_the_coordinator_and_coverage_follows_the_connection(listener, key):
    s = connect(listener)
    register(s, key, "node1")
    st = listener.state["node1"]
    wait_for(lambda: st.alive)
    for k in range(3):
        s.sendall(fls1(k, {"kind": "batch", "health": [[int(time.time() * 1e9)]], "k": k}))
    wait_for(lambda: len(listener.got) == 3)
    assert [b["k"] for n, b in listener.got] == [0, 1, 2] and {n for n, _ in listener.got} == {"node1"}
    assert st.batches == 3 and st.intervals
    s.close()
    wait_for(lambda: not st.alive)
    assert "closed by the agent" in st.last_error


def test_a_garbled_stream_or_a_silent_agent_is_disconnected(listener, key):
    s = connect(listener)
    register(s, key, "node1")
    s.sendall(b"FLS1 0 5 2 {}\n")  # piece 5 of 2
    wait_for(lambda: not listener.state["node1"].alive and listener.state["node1"].starts == 1)
    assert "out of order" in listener.state["node1"].last_error
    s.close()
    s2 = connect(listener)
    register(s2, key, "node2")
    wait_for(lambda: listener.state["node2"].alive)
    wait_for(lambda: not listener.state["node2"].alive, 5)  # silent_s 1.5
    assert "no batch" in listener.state["node2"].last_error
    s2.close()


def test_a_batch_with_malformed_health_ends_the_connection(listener, key):
    s = connect(listener)
    register(s, key, "node1")
    s.sendall(fls1(0, {"kind": "batch", "health": {"0": 1}}))
    wait_for(lambda: not listener.state["node1"].alive and listener.state["node1"].starts == 1)
    assert "not lists" in listener.state["node1"].last_error and listener.got == []
    s.close()


def test_a_second_registration_replaces_the_first(listener, key):
    a = connect(listener)
    register(a, key, "node1")
    wait_for(lambda: listener.state["node1"].alive)
    b = connect(listener)
    register(b, key, "node1")
    wait_for(lambda: listener.counters["replaced"] == 1)
    st = listener.state["node1"]
    assert st.alive and st.starts == 2
    a.settimeout(5)
    assert a.recv(10) == b""  # the old connection was closed by the coordinator
    b.sendall(fls1(0, {"kind": "batch", "health": []}))
    wait_for(lambda: listener.got)
    a.close()
    b.close()
