"""The probe agent on real UDP sockets over loopback (127.0.0.1 and 127.0.0.2 stand for two
nodes): packet format, HMAC rejection of foreign / forged / garbled / replayed packets, bounded
memory, exit on time, and the payload path (`python3 -` with the configuration embedded)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from fleetctl.mesh import agent
from fleetctl.mesh.collect import decode, probe_records
from fleetctl.meshrun.setup import payload as _payload
from fleetctl.model.fabric import FLOW_DTYPE

KEY = bytes(range(32))
TAG = agent.run_tag("run-1")


def counters():
    return {k: 0 for k in agent.COUNTERS}


def config(port, *, rate=100.0, duration=1.0, linger=0.3, start_in=0.4, max_records=100000,
           pairs=True, key=KEY.hex(), clock_a=None):
    nodes = {"a": {"nics": [[0, "127.0.0.1", ""]]}, "b": {"nics": [[1, "127.0.0.2", ""]]}}
    if clock_a:
        nodes["a"]["clock"] = clock_a
    return {"run_id": "run-1", "key": key, "port": port, "sports": [port + 1 + j for j in range(4)],
            "rate": rate, "duration": duration, "linger": linger,
            "start_at": time.time() + start_in,
            "max_records": max_records, "nodes": nodes,
            "pairs": [[0, 0, 1, "127.0.0.2"], [4, 1, 0, "127.0.0.1"]] if pairs else
            [[0, 0, 1, "127.0.0.2"]]}


def free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            return port


def start(cfg, node, *, embedded=False):
    env = dict(os.environ, FLEETCTL_NODE=node)
    if embedded:  # the shipping path: the script on stdin, the config inside it
        proc = subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        proc.stdin.write(_payload(agent, cfg))
    else:
        proc = subprocess.Popen([sys.executable, "-m", "fleetctl.mesh.agent"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, text=True)
        proc.stdin.write(json.dumps(cfg))
    proc.stdin.close()
    return proc


def finish(proc, timeout=15):
    out = proc.stdout.read()
    proc.wait(timeout)
    assert proc.returncode == 0, proc.stderr.read()
    return json.loads(out)


def test_packet_round_trip_and_sizes():
    p = agent.pack_probe(KEY, TAG, 3, 7, 42, 9, 11, 123456789)
    assert len(p) == agent.PROBE_LEN == 58
    kind, src, dst, flow, seq, slot, t1, t2, t3, head = agent.unpack(KEY, TAG, p, counters())
    assert (kind, src, dst, flow, seq, slot, t1, t2, t3) == (agent.PROBE, 3, 7, 42, 9, 11,
                                                              123456789, 0, 0)
    e = agent.pack_echo(KEY, head, 5, 6)
    assert len(e) == agent.ECHO_LEN
    assert agent.unpack(KEY, TAG, e, counters())[:9] == (agent.ECHO, 3, 7, 42, 9, 11, 123456789,
                                                         5, 6)


@pytest.mark.parametrize("mangle,reason", [
    (lambda p: b"XXXX" + p[4:], "foreign"),
    (lambda p: agent.pack_probe(KEY, agent.run_tag("other-run"), 3, 7, 42, 9, 11, 1), "foreign"),
    (lambda p: p[:-1] + bytes([p[-1] ^ 1]), "bad_mac"),
    (lambda p: p[:20] + bytes([p[20] ^ 0x80]) + p[21:], "bad_mac"),
    (lambda p: agent.pack_probe(b"k" * 32, TAG, 3, 7, 42, 9, 11, 1), "bad_mac"),
    (lambda p: p[:30], "garbled"),
    (lambda p: p + b"\0", "garbled"),
    (lambda p: b"FL", "foreign"),
])
def test_unpack_rejects_and_counts(mangle, reason):
    c = counters()
    assert agent.unpack(KEY, TAG, mangle(agent.pack_probe(KEY, TAG, 3, 7, 42, 9, 11, 1)), c) is None
    assert c[reason] == 1 and sum(c.values()) == 1


def test_two_agents_probe_each_other_with_kernel_timestamps():
    port = free_port()
    t0 = time.time()
    cfg = config(port, clock_a={"offset_ms": 2.0, "drift_ppm": 30.0, "t0": t0})
    procs = [start(cfg, "a"), start(cfg, "b", embedded=True)]
    docs = {d["node"]: d for d in (finish(p) for p in procs)}
    for node in "ab":
        c = docs[node]["counters"]
        assert c["sent"] == pytest.approx(100, abs=3)  # rate 100/s per pair, 1 s, one pair each
        assert c["echoes"] == c["sent"] and c["answered"] >= c["sent"] - 3
        assert sum(c[k] for k in ("foreign", "garbled", "bad_mac", "replayed", "unexpected")) == 0
        assert docs[node]["rx_timestamps"] == "kernel"
    flows = np.array([(f, 0 if f < 4 else 1, 1 if f < 4 else 0, port + 1 + f % 4, -1, -1)
                      for f in range(8)], dtype=FLOW_DTYPE)
    probes = probe_records(docs, flows, ["a", "b"], set())
    assert (probes["lost"] == 0).all() and set(probes["sport"]) == {port + 1 + j for j in range(4)}
    # a's timestamps carry its emulated 2 ms offset: b's receive time is ~2 ms behind a's send
    fwd = probes[probes["src_nic"] == 0]
    gap_ms = np.median(fwd["t_remote_rx"] - fwd["t_send"]) / 1e6
    assert -2.5 < gap_ms < -1.5
    assert (fwd["t_recv"] > fwd["t_send"]).all()


def test_hostile_packets_are_counted_and_dropped_never_answered():
    port = free_port()
    cfg = config(port, rate=0.1, duration=1.5, linger=0.2, start_in=0.1, pairs=False)
    proc = start(cfg, "b")  # responder of flow 0..3 (from NIC 0 to NIC 1 at 127.0.0.2)
    time.sleep(0.5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.5)
        good = agent.pack_probe(KEY, TAG, 0, 1, 2, 0, 0, time.time_ns())
        for packet in (os.urandom(58), b"FLP1" + os.urandom(54), good[:-2] + b"\0\0", good[:40],
                       agent.pack_probe(KEY, agent.run_tag("old-run"), 0, 1, 2, 0, 0, 1),
                       agent.pack_probe(KEY, TAG, 0, 1, 999, 0, 0, 1),  # a flow not assigned
                       good, good):  # the second copy is a replay
            s.sendto(packet, ("127.0.0.2", port))
        echo, _ = s.recvfrom(256)
        with pytest.raises(socket.timeout):
            s.recvfrom(256)  # exactly one echo: everything else was dropped
    doc = finish(proc)
    kind, *_rest = agent.unpack(KEY, TAG, echo, counters())
    assert kind == agent.ECHO
    c = doc["counters"]
    assert c["answered"] == 1 and c["replayed"] == 1 and c["unexpected"] == 1
    assert c["bad_mac"] == 1 and c["foreign"] == 3 and c["garbled"] == 1


def test_memory_is_bounded_and_agent_exits_on_time_under_a_flood():
    port = free_port()
    cfg = config(port, rate=2000, duration=1.0, linger=0.2, start_in=0.2, max_records=50,
                 pairs=False)
    t = time.monotonic()
    proc = start(cfg, "a")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        junk = os.urandom(58)
        while proc.poll() is None and time.monotonic() - t < 4:
            for _ in range(200):
                s.sendto(junk, ("127.0.0.1", port))
            time.sleep(0.001)
    doc = finish(proc)
    assert time.monotonic() - t < 4  # 0.2 + 1.0 + 0.2 s of work plus start-up
    assert doc["capacity"] == 50 and doc["records"]["n"] == 50
    assert doc["counters"]["records_dropped"] > 1000
    fields, _ = decode(doc, "a")
    assert len(fields["t1"]) == 50


def test_missing_address_is_reported_and_the_agent_still_reports():
    port = free_port()
    cfg = config(port, duration=0.3, linger=0.1, start_in=0.1)
    cfg["nodes"]["a"]["nics"] = [[0, "192.0.2.77", ""]]  # TEST-NET: not on this machine
    doc = finish(start(cfg, "a"))
    assert doc["records"]["n"] == 0
    assert any("192.0.2.77" in e for e in doc["errors"])


def test_bad_configuration_is_one_line_and_exit_2():
    env = dict(os.environ, FLEETCTL_NODE="a")
    for text in ("not json", json.dumps({"nodes": {}})):
        r = subprocess.run([sys.executable, "-m", "fleetctl.mesh.agent"], input=text, env=env,
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 2
        assert r.stderr.startswith("fleetctl probe agent: bad configuration") \
            and r.stderr.count("\n") == 1


def test_payload_keeps_the_key_out_of_argv():
    cfg = config(free_port(), key=secrets.token_hex(32))
    script = _payload(agent, cfg)
    assert cfg["key"] in script and "_EMBEDDED_CONFIG = None" not in script


def test_unanswered_probes_are_lost_out_and_a_failed_peer_is_left_out():
    port = free_port()
    cfg = config(port, duration=0.5, linger=0.3, start_in=0.2, pairs=False)
    doc = finish(start(cfg, "a"))  # nobody answers at 127.0.0.2
    assert doc["counters"]["sent"] >= 45 and doc["counters"]["echoes"] == 0
    flows = np.array([(f, 0, 1, port + 1 + f, -1, -1) for f in range(4)], dtype=FLOW_DTYPE)
    probes = probe_records({"a": doc}, flows, ["a", "b"], set())
    assert len(probes) == doc["records"]["n"] and (probes["lost"] == 1).all()
    assert (probes["t_recv"] == 0).all() and (np.diff(probes["t_send"]) >= 0).all()
    assert len(probe_records({"a": doc}, flows, ["a", "b"], {"b"})) == 0


def _packed(raw: bytes) -> str:
    import base64
    import zlib

    return base64.b64encode(zlib.compress(raw, 9)).decode()


@pytest.mark.parametrize("records, why", [
    # 64 MB of zeros in a 64 KB field, announced as 8 records: inflated no further than 8
    ({"n": 8, **{k: _packed(bytes(64 << 20)) for k in ("flow", "seq", "t1", "t2", "t3", "t4",
                                                        "state")}}, "holds"),
    ({"n": 1 << 40, "flow": ""}, "announces"),
    ({"n": "many"}, "record count"),
    ({"n": 2, "flow": _packed(bytes(8))}, "unreadable"),  # the other fields missing
])
def test_a_hostile_records_document_is_a_data_error_not_a_bomb(records, why):
    """The records decoder (record-mode batches, one-shot documents) inflates each array to
    exactly the length the document announces, a bounded one, as the summary decoder does."""
    from fleetctl.errors import DataError

    with pytest.raises(DataError, match=why):
        decode({"records": records}, "node1")
