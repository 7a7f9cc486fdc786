"""The agent's health counters: /proc parsing from recorded samples, SO_RXQ_OVFL as the kernel
reports it, and a real agent whose tiny receive buffer is flooded on loopback."""

from __future__ import annotations

import os
import socket
import struct
import time

from fleetctl.mesh import agent, health
from fleetctl.mesh.collect import health_table
from test_mesh_agent import config, finish, free_port, start

SNMP_1 = """\
Ip: Forwarding DefaultTTL InReceives InHdrErrors
Ip: 1 64 1000 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 5000 3 10 4000 8 1 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 99 0 99 99 0 0 0
"""
SNMP_2 = SNMP_1.replace("Udp: 5000 3 10 4000 8 1", "Udp: 9000 3 250 8000 248 4")
SOFTNET_1 = "0000a1b2 00000002 00000000\n0000ffff 0000000a 00000001\n"
SOFTNET_2 = "0000a1c2 00000003 00000000\n0000ffff 0000000f 00000001\n"


def test_udp_counters_parse_and_delta():
    assert health.parse_udp_snmp(SNMP_1)["RcvbufErrors"] == 8  # not UdpLite's 99
    assert health.parse_udp_snmp("garbage\nUdp: a b\n") == {}
    assert health.parse_softnet_dropped(SOFTNET_1) == 12
    assert health.delta((248, 250, 4, 18), (8, 10, 1, 12)) == [240, 240, 3, 6]
    # unknown on either side, or a counter that went backwards (namespace recreated): unknown
    assert health.delta((-1, 5, 3, 0), (1, -1, 4, 0)) == [-1, -1, -1, 0]


def test_host_counters_read_recorded_files(tmp_path):
    snmp, soft = tmp_path / "snmp", tmp_path / "softnet"
    snmp.write_text(SNMP_1)
    soft.write_text(SOFTNET_1)
    hc = health.HostCounters(str(snmp), str(soft))
    before = hc.read()
    snmp.write_text(SNMP_2)
    soft.write_text(SOFTNET_2)
    assert health.delta(hc.read(), before) == [240, 240, 3, 6]  # rcvbuf, in, sndbuf, softnet
    assert health.HostCounters(str(tmp_path / "none"), str(soft)).read()[:3] == (-1, -1, -1)


def test_health_meter_rows_follow_the_counters(tmp_path):
    counters = {k: 0 for k in agent.COUNTERS}
    meter = health.HealthMeter(counters, 1.0, late_cap=4)
    counters["sent"] += 10
    counters["bad_mac"] += 2
    counters["late"] += 1
    for late in (0.001, 0.002, 0.003, 0.004, 0.050):  # the fifth sample only moves the max
        meter.note_late(late)
    meter.ovfl_total += 7
    row = dict(zip(health.HEALTH_FIELDS, meter.close()))
    assert row["sent"] == 10 and row["rejected"] == 3 and row["rxq_ovfl"] == 7
    assert row["late_p50_us"] == 3000.0 and row["late_max_us"] == 50000.0
    assert len(meter.rows) == 1 and len(meter.rows[0]) == len(health.HEALTH_FIELDS)
    row2 = dict(zip(health.HEALTH_FIELDS, meter.close()))  # a quiet window: zeros
    assert row2["sent"] == 0 and row2["rxq_ovfl"] == 0 and row2["late_max_us"] == 0.0


def test_kernel_reports_socket_overflow_through_so_rxq_ovfl():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        rx.setsockopt(socket.SOL_SOCKET, agent.SO_RXQ_OVFL, 1)
        rx.bind(("127.0.0.1", 0))
        for _ in range(500):
            tx.sendto(b"x" * 200, rx.getsockname())
        rx.setblocking(False)
        while True:  # empty the queue; the drops stay counted on the socket
            try:
                rx.recv(512)
            except BlockingIOError:
                break
        tx.sendto(b"after", rx.getsockname())
        time.sleep(0.05)
        _data, anc, _flags, _addr = rx.recvmsg(512, socket.CMSG_SPACE(4))
        counts = [struct.unpack("I", d[:4])[0] for lvl, kind, d in anc
                  if lvl == socket.SOL_SOCKET and kind == agent.SO_RXQ_OVFL]
        assert counts and counts[0] > 100
    finally:
        rx.close()
        tx.close()


def test_flooded_agent_reports_its_own_overflow():
    port = free_port()
    cfg = config(port, rate=50, duration=1.5, linger=0.2, start_in=0.2, pairs=False)
    cfg["rcvbuf_bytes"] = 1024  # a tiny queue: the flood overflows it between two turns
    cfg["health_window_s"] = 0.5
    proc = start(cfg, "b")
    deadline = time.monotonic() + 1.6
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        junk = os.urandom(58)
        time.sleep(0.3)
        while time.monotonic() < deadline:
            for _ in range(300):
                s.sendto(junk, ("127.0.0.2", port))
            time.sleep(0.001)
    doc = finish(proc)
    fields, rows = health_table(doc)
    assert fields == list(health.HEALTH_FIELDS) and 3 <= len(rows) <= 6
    col = {f: [r[i] for r in rows] for i, f in enumerate(fields)}
    assert sum(col["rxq_ovfl"]) > 0 and doc["health"]["run"]["rxq_ovfl"] == sum(col["rxq_ovfl"])
    assert sum(col["rejected"]) == doc["counters"]["foreign"] > 0
    # the namespace counter saw at least the drops of this socket (other sockets may add more)
    assert sum(x for x in col["udp_rcvbuf_errors"] if x >= 0) >= 1
    assert all(c >= 0 for c in col["cpu_s"]) and sum(col["cpu_s"]) > 0


def test_clean_run_health_shows_the_schedule_kept():
    port = free_port()
    cfg = config(port, rate=200, duration=1.2, linger=0.3, start_in=0.2, pairs=False)
    cfg["health_window_s"] = 0.4
    procs = [start(cfg, "a"), start(cfg, "b")]
    docs = {d["node"]: d for d in (finish(p) for p in procs)}
    fields, rows = health_table(docs["a"])
    col = {f: [r[i] for r in rows] for i, f in enumerate(fields)}
    assert sum(col["sent"]) == docs["a"]["counters"]["sent"] >= 0.95 * 200 * 1.2 * 1
    assert sum(col["skipped"]) == 0 and sum(col["rxq_ovfl"]) == 0
    assert max(col["late_max_us"]) < 250_000  # lateness is measured (and below the skip limit)
    assert sum(dict(zip(fields, r))["answered"] for r in health_table(docs["b"])[1]) == \
        docs["b"]["counters"]["answered"]


def test_a_stalled_sender_loses_nothing_and_reports_the_stall():
    """SIGSTOP the sender for 1.5 s, longer than its 1 s echo timeout: the echoes of the probes it
    sent just before wait in its socket's queue and are matched when it runs again (not written
    off at wake-up), and the window it woke in carries the stall for the integrity step."""
    import signal

    port = free_port()
    cfg = config(port, rate=100, duration=3.0, linger=1.0, start_in=0.3, pairs=False)
    cfg["health_window_s"] = 0.5
    a, b = start(cfg, "a"), start(cfg, "b")
    time.sleep(0.3 + 1.0)
    a.send_signal(signal.SIGSTOP)
    time.sleep(1.5)
    a.send_signal(signal.SIGCONT)
    docs = {"a": finish(a), "b": finish(b)}
    ca = docs["a"]["counters"]
    assert ca["skipped"] > 0  # it fell behind its schedule while stopped
    assert ca["echoes"] == ca["sent"] and ca["late"] == 0, ca
    fields, rows = health_table(docs["a"])
    stalls = [r[fields.index("stall_max_us")] for r in rows]
    assert max(stalls) >= 1.4e6 and sorted(stalls)[-2] < 0.25e6  # one window holds the stall


def test_first_window_starts_once_the_sockets_listen():
    meter = health.HealthMeter({k: 0 for k in agent.COUNTERS}, 1.0)
    first = meter.t_start
    time.sleep(0.05)
    meter.restart()
    assert meter.t_start - first >= 40_000_000 and meter.run_start[0] == meter.t_start
