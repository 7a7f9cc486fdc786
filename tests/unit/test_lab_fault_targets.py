"""Fault targets, values, simulated GPU state, and the tracer's ICMP parser, without a lab."""

from __future__ import annotations

import json
import re
import socket
import struct

import pytest

from fleetctl.errors import UsageError
from fleetctl.lab import faults, gpusim, tracer
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.mesh import trace_agent

LAYOUT = build_layout(LabParams(gpus_per_host=4))


def test_resolve_targets():
    t = faults.resolve(LAYOUT, "leaf1--spine2")
    assert t.link == "leaf1--spine2" and set(t.directions) == {("leaf1", "spine2"), ("spine2", "leaf1")}
    t = faults.resolve(LAYOUT, "spine2->leaf1")
    assert t.link == "leaf1--spine2" and t.directions == (("spine2", "leaf1"),)
    t = faults.resolve(LAYOUT, "node3:eth1")
    assert t.link == "node3:eth1--leaf2" and len(t.directions) == 2
    t = faults.resolve(LAYOUT, "leaf2->node3:eth1")
    assert t.directions == (("leaf2", "node3:eth1"),)
    t = faults.resolve(LAYOUT, "node2:gpu3")
    assert (t.node, t.gpu, t.link) == ("node2", 3, "")


@pytest.mark.parametrize("text", ["leaf1--spine9", "node9:eth0", "leaf1->node3:eth1", "node2:gpu4", "x"])
def test_unknown_targets_are_named(text):
    with pytest.raises(UsageError, match=re.escape(repr(text))):
        faults.resolve(LAYOUT, text)


def test_rates_and_periods():
    assert faults.parse_rate("10mbit") == 10_000_000
    assert faults.parse_rate("1.5gbit") == 1_500_000_000
    assert faults.parse_period("2s") == 2.0 and faults.parse_period("500ms") == 0.5
    for bad in ("10", "fast", "10mb", "1bit"):
        with pytest.raises(UsageError, match="--rate"):
            faults.parse_rate(bad)
    for bad in ("x", "10ms", "2h"):
        with pytest.raises(UsageError, match="--flap"):
            faults.parse_period(bad)


def test_xid_line_has_the_kernel_format():
    gpu = gpusim.healthy_gpu(2, 3)
    line = gpusim.xid_line(gpu, 79, when=1795966200.123456)
    assert line == ("2026-11-29T15:30:00,123456+00:00 NVRM: Xid (PCI:0000:5d:00): 79, pid=2311, "
                    "name=python3, GPU has fallen off the bus.")


def test_gpu_faults_and_clear(tmp_path):
    gpusim.write_host(tmp_path, "node2", 2, 4)
    gpusim.apply_fault(tmp_path, "node2", 1, "remap_pending", None)
    gpusim.apply_fault(tmp_path, "node2", 1, "temp", 90)
    gpusim.apply_fault(tmp_path, "node2", 1, "xid", 48)
    doc = json.loads((tmp_path / "hosts" / "node2" / "gpus.json").read_text())
    g = doc["gpus"][1]
    assert g["remapped_rows"]["pending"] and g["temperature_c"] == 90
    assert "hw_thermal_slowdown" in g["throttle_reasons"] and g["ecc"]["volatile_dbe"] == 1
    assert doc["gpus"][0] == gpusim.healthy_gpu(2, 0)
    log = (tmp_path / "hosts" / "node2" / "kern.log").read_text()
    assert "NVRM: Xid (PCI:0000:2a:00): 48, " in log
    gpusim.clear_gpu(tmp_path, "node2", 2, 1)
    doc = json.loads((tmp_path / "hosts" / "node2" / "gpus.json").read_text())
    assert doc["gpus"][1] == gpusim.healthy_gpu(2, 1)
    with pytest.raises(UsageError, match="node2:gpu7"):
        gpusim.apply_fault(tmp_path, "node2", 7, "temp", 50)


def _icmp(responder: str, icmp_type: int, src: str, dst: str, sport: int, dport: int) -> bytes:
    def ip(proto, a, b):
        return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, 0, 0, 1, proto, 0, socket.inet_aton(a),
                           socket.inet_aton(b))
    inner = ip(socket.IPPROTO_UDP, src, dst) + struct.pack("!HHHH", sport, dport, 8, 0)
    return ip(socket.IPPROTO_ICMP, responder, src) + struct.pack("!BBHI", icmp_type, 0, 0, 0) + inner


def test_tracer_parses_icmp_errors():
    pkt = _icmp("10.253.1.10", 11, "10.252.1.2", "10.252.2.6", 41000, 33434)
    assert trace_agent.parse_icmp(pkt) == ("10.253.1.10", 11, "10.252.1.2", "10.252.2.6", 41000, 33434)
    echo_reply = _icmp("10.0.0.1", 0, "10.252.1.2", "10.252.2.6", 1, 2)
    assert trace_agent.parse_icmp(echo_reply) is None
    assert tracer._ports("1-3,7") == [1, 2, 3, 7]
