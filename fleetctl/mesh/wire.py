"""The probe wire protocol (version 2): packet layout, MAC, parsing. Standard library only: this
module is shipped to the nodes as part of the agent's payload (agent.payload_source()).

    probe  MAGIC type=1 ver run_tag src_nic dst_nic flow seq slot t1           + mac
    echo   MAGIC type=2 ver run_tag src_nic dst_nic flow seq slot t1 t2 t3     + mac

Little-endian; t1 the sender's send time, t2 the responder's kernel receive time, t3 the responder's
send time (ns, each host's clock); `slot` is the sender's record index (mod 2**32), so an echo finds
its record without a lookup table. The MAC is keyed BLAKE2b with a 16-byte digest over everything
before it, under the run's 32-byte key (a keyed BLAKE2b is a PRF/MAC by design, RFC 7693 s. 2.9).
Version 1 used HMAC-SHA256 truncated to 16 bytes with magic FLP1: 4x the CPU per packet, same
layout. A version-1 packet is foreign to a version-2 agent (other magic); the two never mix in one
run since the collector ships one agent to every node.

`Codec` holds the precomputed keyed hash and reusable buffers: packing and checking a packet
allocate nothing but the digest. Its methods work on caller-owned bytearrays / memoryviews.
"""

from __future__ import annotations

import hashlib
import struct
from hmac import compare_digest

MAGIC = b"FLP2"
VERSION = 2
PROBE, ECHO = 1, 2
MAC_LEN = 16
KEY_LEN = 32
# magic, type, version, run tag, src_nic, dst_nic, flow, seq, slot, t1
HEAD = struct.Struct("<4sBB8sIIIIIq")
TIMES = struct.Struct("<qq")  # t2, t3 of an echo
HEAD_LEN = HEAD.size  # 42
ECHO_BODY = HEAD_LEN + TIMES.size
PROBE_LEN = HEAD.size + MAC_LEN  # 58
ECHO_LEN = HEAD.size + TIMES.size + MAC_LEN  # 74
MAX_DATAGRAM = 128  # receive buffer size: anything longer is garbled (and truncated)
# rejection reasons (counter names of the agent)
FOREIGN, GARBLED, BAD_MAC = "foreign", "garbled", "bad_mac"
_KIND_AT = 4  # byte offset of the packet type
_TAG_AT, _TAG_END = 6, 14
IDS_AT = 14  # src_nic, dst_nic, flow, seq, slot start here
IDS = struct.Struct("<IIIII")
IDS_T1 = struct.Struct("<IIIIIq")  # the same, then the probe's send time t1 (HEAD's last)


def run_tag(run_id: str) -> bytes:
    return hashlib.sha256(run_id.encode()).digest()[:8]


class Codec:
    """Pack and check probe packets of one run (key, run tag)."""

    def __init__(self, key: bytes, tag: bytes):
        if len(key) < 16 or len(key) > 64:
            raise ValueError("probe key must be 16..64 bytes")
        if len(tag) != 8:
            raise ValueError("run tag must be 8 bytes")
        self.tag = tag
        self._mac0 = hashlib.blake2b(key=key, digest_size=MAC_LEN)

    def mac(self, body) -> bytes:
        h = self._mac0.copy()
        h.update(body)
        return h.digest()

    # ------------------------------------------------------------------ pack (into buffers)
    # (slices of a bytearray, not memoryviews: comparing and hashing a 42-byte copy is cheaper
    # than making and comparing a view, measured)
    def pack_probe_into(self, buf: bytearray, src_nic: int, dst_nic: int, flow: int, seq: int,
                        slot: int, t1: int) -> None:
        """Write a probe into buf[:PROBE_LEN] (buf is reused for every probe)."""
        HEAD.pack_into(buf, 0, MAGIC, PROBE, VERSION, self.tag, src_nic, dst_nic, flow, seq,
                       slot & 0xFFFFFFFF, t1)
        h = self._mac0.copy()
        h.update(buf[:HEAD_LEN])
        buf[HEAD_LEN:PROBE_LEN] = h.digest()

    def echo_in_place(self, buf: bytearray, t2: int, t3: int) -> None:
        """Turn the checked probe in buf[:PROBE_LEN] into its echo in buf[:ECHO_LEN]."""
        buf[_KIND_AT] = ECHO
        TIMES.pack_into(buf, HEAD_LEN, t2, t3)
        h = self._mac0.copy()
        h.update(buf[:ECHO_BODY])
        buf[ECHO_BODY:ECHO_LEN] = h.digest()

    # ------------------------------------------------------------------ check
    def check(self, buf, n: int):
        """Why the n-byte datagram at the start of `buf` (bytes or a receive bytearray) is
        rejected (FOREIGN, GARBLED or BAD_MAC), or its packet type when it is genuine."""
        if n < 4 or not buf.startswith(MAGIC):
            return FOREIGN
        if n != PROBE_LEN and n != ECHO_LEN:
            return GARBLED
        if buf[_TAG_AT:_TAG_END] != self.tag:
            return FOREIGN  # another run's probe (or another tool's)
        h = self._mac0.copy()
        h.update(buf[:n - MAC_LEN])
        if not compare_digest(h.digest(), buf[n - MAC_LEN:n]):
            return BAD_MAC
        kind = buf[_KIND_AT]
        if buf[5] != VERSION or n != (PROBE_LEN if kind == PROBE else
                                      ECHO_LEN if kind == ECHO else -1):
            return GARBLED
        return kind

    # ------------------------------------------------------------------ bytes API (tests, tools)
    def pack_probe(self, src_nic: int, dst_nic: int, flow: int, seq: int, slot: int,
                   t1: int) -> bytes:
        buf = bytearray(ECHO_LEN)
        self.pack_probe_into(buf, src_nic, dst_nic, flow, seq, slot, t1)
        return bytes(buf[:PROBE_LEN])

    def pack_echo(self, probe_head: bytes, t2: int, t3: int) -> bytes:
        """The echo of a probe, given the probe's first HEAD.size bytes."""
        buf = bytearray(ECHO_LEN)
        buf[:HEAD.size] = probe_head[:HEAD.size]
        self.echo_in_place(buf, t2, t3)
        return bytes(buf)

    def unpack(self, data: bytes):
        """(type, src_nic, dst_nic, flow, seq, slot, t1, t2, t3) of a genuine packet, else the
        rejection reason (a string)."""
        kind = self.check(data, len(data))
        if isinstance(kind, str):
            return kind
        _m, _k, _v, _tag, src, dst, flow, seq, slot, t1 = HEAD.unpack_from(data)
        t2, t3 = TIMES.unpack_from(data, HEAD.size) if kind == ECHO else (0, 0)
        return kind, src, dst, flow, seq, slot, t1, t2, t3
