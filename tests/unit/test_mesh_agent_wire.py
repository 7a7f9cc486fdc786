"""Wire protocol v2 (fleetctl/mesh/wire.py): round trips, and every kind of bad packet rejected
for the right reason; the payload the collector ships is one stdlib-only script."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fleetctl.mesh import agent, wire
from fleetctl.meshrun.setup import payload as _payload

KEY = bytes(range(32))
TAG = wire.run_tag("run-1")
CODEC = wire.Codec(KEY, TAG)


def test_probe_and_echo_round_trip_in_reused_buffers():
    buf = bytearray(wire.MAX_DATAGRAM)
    CODEC.pack_probe_into(buf, 3, 7, 42, 9, 2**32 + 11, -5)  # slot wraps modulo 2**32
    assert CODEC.check(buf, wire.PROBE_LEN) == wire.PROBE
    assert CODEC.unpack(bytes(buf[:wire.PROBE_LEN])) == (wire.PROBE, 3, 7, 42, 9, 11, -5, 0, 0)
    CODEC.echo_in_place(buf, 123, 456)
    assert CODEC.check(buf, wire.ECHO_LEN) == wire.ECHO
    assert CODEC.unpack(bytes(buf[:wire.ECHO_LEN])) == (wire.ECHO, 3, 7, 42, 9, 11, -5, 123, 456)
    assert (wire.PROBE_LEN, wire.ECHO_LEN) == (58, 74)
    # the bytes API gives the same packets
    assert CODEC.pack_probe(3, 7, 42, 9, 11, -5) == agent.pack_probe(KEY, TAG, 3, 7, 42, 9, 11, -5)


def _probe():
    return CODEC.pack_probe(1, 2, 3, 4, 5, 6)


@pytest.mark.parametrize("packet,reason", [
    (b"", wire.FOREIGN),
    (b"FLP1" + _probe()[4:], wire.FOREIGN),  # a version-1 agent's probe
    (wire.Codec(KEY, wire.run_tag("other")).pack_probe(1, 2, 3, 4, 5, 6), wire.FOREIGN),
    (wire.Codec(b"x" * 32, TAG).pack_probe(1, 2, 3, 4, 5, 6), wire.BAD_MAC),  # forged: wrong key
    (_probe()[:30] + bytes([_probe()[30] ^ 1]) + _probe()[31:], wire.BAD_MAC),  # slot altered
    (_probe()[:-1] + bytes([_probe()[-1] ^ 0x80]), wire.BAD_MAC),
    (_probe()[:57], wire.GARBLED),
    (_probe() + b"\0", wire.GARBLED),
])
def test_bad_packets_are_rejected_with_their_reason(packet, reason):
    assert CODEC.unpack(packet) == reason


def test_a_validly_signed_packet_of_unknown_type_or_version_is_garbled():
    for offset, value in ((4, 9), (5, 1)):  # type 9; version 1 under a v2 MAC
        buf = bytearray(wire.ECHO_LEN)
        CODEC.pack_probe_into(buf, 1, 2, 3, 4, 5, 6)
        buf[offset] = value
        buf[wire.HEAD_LEN:wire.PROBE_LEN] = CODEC.mac(bytes(buf[:wire.HEAD_LEN]))
        assert CODEC.check(buf, wire.PROBE_LEN) == wire.GARBLED


def test_echo_length_mismatch_with_type_is_garbled():
    echo = CODEC.pack_echo(_probe(), 1, 2)
    probe_sized = bytearray(echo[:wire.PROBE_LEN])
    probe_sized[wire.HEAD_LEN:] = CODEC.mac(bytes(probe_sized[:wire.HEAD_LEN]))
    assert CODEC.check(probe_sized, wire.PROBE_LEN) == wire.GARBLED  # type ECHO, probe length


def test_codec_refuses_bad_keys():
    for key, tag in ((b"short", TAG), (KEY, b"tag")):
        with pytest.raises(ValueError):
            wire.Codec(key, tag)


def test_payload_is_one_stdlib_script_that_runs():
    script = _payload(agent, {"nodes": {}})
    assert "import fleetctl" not in script and "from fleetctl" not in script
    assert script.count("# ---- ") == len(agent.PAYLOAD_PARTS) == 5  # wire .. summary, agent
    # runs in a bare interpreter (no fleetctl on the path): a bad configuration, exit 2
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-I", "-"], input=script, capture_output=True,
                       text=True, timeout=20, env=dict(env, FLEETCTL_NODE="a"), cwd="/")
    assert r.returncode == 2 and "bad configuration" in r.stderr, r.stderr
