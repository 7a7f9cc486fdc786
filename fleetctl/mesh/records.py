"""The probe agent's records: a bounded ring of preallocated arrays that batches leave in send
order, and the responder's log of answered probes. Standard library only: shipped to the nodes
inside the agent's payload (agent.PAYLOAD_PARTS).

A record is made when its probe is sent (index n, position n & mask); it is final once answered,
failed, or older than the echo timeout, and leaves the ring (`take`) as part of a batch. The
agent's hot path writes the arrays directly (they are never reallocated).
"""

from __future__ import annotations

import base64
import sys
import zlib
from array import array

# record states (the collector turns 1 into "lost out" or "lost back" with the responders' logs)
ANSWERED, UNANSWERED, SEND_FAILED, PENDING, FREE = 0, 1, 4, 255, 254
RECORD_FIELDS = (("flow", "I"), ("seq", "I"), ("t1", "q"), ("t2", "q"), ("t3", "q"), ("t4", "q"),
                 ("state", "B"))
RING_MAX = 1 << 22


def pow2(n: int) -> int:
    """The power of two >= n (at least 16), at most RING_MAX."""
    return min(RING_MAX, 1 << max(4, (max(1, n) - 1).bit_length()))


def spans(start: int, count: int, size: int) -> list[tuple[int, int]]:
    """The index ranges of `count` ring entries from position `start` (at most two: it wraps)."""
    if count <= 0:
        return []
    if start + count <= size:
        return [(start, start + count)]
    return [(start, size), (0, start + count - size)]


def b64_bytes(data: bytes) -> list[str]:
    """base64 of zlib of raw bytes, in 400-character pieces (as b64)."""
    text = base64.b64encode(zlib.compress(data, 1)).decode("ascii")
    return [text[i:i + 400] for i in range(0, len(text), 400)]


def b64(arr: array) -> list[str]:
    """base64 of zlib of the little-endian array, in 400-character pieces: printed one per line
    (indent=0), no output line is long enough for a transport to split it (srun does)."""
    if sys.byteorder != "little":
        arr = array(arr.typecode, arr)
        arr.byteswap()
    text = base64.b64encode(zlib.compress(arr.tobytes(), 1)).decode("ascii")
    return [text[i:i + 400] for i in range(0, len(text), 400)]


class RecordRing:
    """Sender records and responder log of one agent. `keep`: also accumulate every batch (the
    one-shot document), else batches are only handed out (a stream)."""

    def __init__(self, size: int, log_size: int, keep: bool):
        self.size, self.log_size = pow2(size), pow2(log_size)
        self.mask, self.log_mask = self.size - 1, self.log_size - 1
        zero4, zero8 = bytes(4 * self.size), bytes(8 * self.size)
        self.flow, self.seq, self.slot = array("I", zero4), array("I", zero4), array("I", zero4)
        self.t1, self.t2, self.t3, self.t4 = (array("q", zero8) for _ in range(4))
        self.state = array("B", bytes([FREE]) * self.size)
        self.n = 0  # records made (global index of the next)
        self.emitted = 0  # records that left the ring
        self.l_flow = array("I", bytes(4 * self.log_size))
        self.l_seq = array("I", bytes(4 * self.log_size))
        self.l_t1 = array("q", bytes(8 * self.log_size))  # the probe's send time (its window)
        self.log_n = self.log_emitted = 0
        self.keep = keep
        self.acc = {name: array(code) for name, code in RECORD_FIELDS}
        self.acc_flow, self.acc_seq = array("I"), array("I")

    def full(self) -> bool:
        return self.n - self.emitted >= self.size

    def log_full(self) -> bool:
        return self.log_n - self.log_emitted >= self.log_size

    def log(self, flow: int, seq: int, t1: int = 0) -> None:
        pos = self.log_n & self.log_mask
        self.l_flow[pos], self.l_seq[pos], self.l_t1[pos] = flow, seq, t1
        self.log_n += 1

    def final_upto(self, limit_t1: int) -> int:
        """Index after the last record that is final: answered, failed or sent before limit_t1
        (records are in send order, so the first pending younger record stops the scan)."""
        i, st, t1, mask = self.emitted, self.state, self.t1, self.mask
        while i < self.n:
            pos = i & mask
            if st[pos] == PENDING and t1[pos] >= limit_t1:
                break
            i += 1
        return i

    def sent_before(self, limit_t1: int) -> int:
        """Index after the last record sent before limit_t1 (records are in send order; the
        caller knows those are final: a summary window closes after its echo timeout)."""
        i, t1, mask = self.emitted, self.t1, self.mask
        while i < self.n and t1[i & mask] < limit_t1:
            i += 1
        return i

    def take(self, upto: int) -> dict[str, array]:
        """Records [emitted, upto) leave the ring (pending ones as unanswered): their arrays."""
        parts = spans(self.emitted & self.mask, upto - self.emitted, self.size)
        st = self.state
        for lo, hi in parts:
            for p in range(lo, hi):
                if st[p] == PENDING:
                    st[p] = UNANSWERED
        out = {}
        for name, code in RECORD_FIELDS:
            arr, part = getattr(self, name), array(code)
            for lo, hi in parts:
                part.extend(arr[lo:hi])
            out[name] = part
            if self.keep:
                self.acc[name].extend(part)
        for lo, hi in parts:
            st[lo:hi] = array("B", bytes([FREE]) * (hi - lo))
        self.emitted = upto
        return out

    def take_log(self) -> tuple[array, array, array]:
        """The responder log since the last call: (flows, seqs, the probes' send times)."""
        parts = spans(self.log_emitted & self.log_mask, self.log_n - self.log_emitted,
                      self.log_size)
        flows, seqs, t1s = array("I"), array("I"), array("q")
        for lo, hi in parts:
            flows.extend(self.l_flow[lo:hi])
            seqs.extend(self.l_seq[lo:hi])
            t1s.extend(self.l_t1[lo:hi])
        self.log_emitted = self.log_n
        if self.keep:
            self.acc_flow.extend(flows)
            self.acc_seq.extend(seqs)
        return flows, seqs, t1s
