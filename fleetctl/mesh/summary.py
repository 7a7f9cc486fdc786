"""Per-window, per-flow summaries of the probe agent's records: what lens's agents send instead of
every probe (agent output "summary"). Standard library only: a part of the agent's payload.

A window is [k W, (k+1) W) of the sender's clock (t1), W the coordinator's window, so sender and
responder cut the same windows without talking. One row per (window, flow):
- probes sent and answered;
- the median raw forward and back times (t2 - t1 and t4 - t3, two clocks each) and the mean send
  and receive times of the answered probes: the coordinator subtracts the clock offset at those
  times (sends are spread evenly over the window, so under a linear drift the median is unbiased;
  the error is at most the drift times half the window);
- the tightest clock bounds: the smallest t2 - t1 with its t1, the largest t3 - t4 with its t4
  (what the clock fit keeps per time bin anyway);
- loops (a probe to a switch and its ICMP answer): the median round trip t4 - t1 as "forward".
A row with an unanswered probe also gets its per-bin sent and unanswered counts (`n_bins` bins of
the window): the moments a link went down.

Responder side (`received_counts`): how many probes of each (sender window, flow) it answered, from
its log (the probe carries t1). The coordinator splits the unanswered into lost out (sent -
received) and lost back (received - answered) without a per-probe join. The coordinator's work per
window is then O(flows), not O(probes).
"""

from __future__ import annotations

import struct
from array import array

from fleetctl.mesh.records import ANSWERED  # payload-local

SUMMARY_FIELDS = (("window", "q"), ("flow", "I"), ("sent", "I"), ("answered", "I"),
                  ("fwd", "q"), ("rev", "q"), ("t1", "q"), ("t4", "q"),
                  ("bound_t1", "q"), ("bound_fwd", "q"), ("bound_t4", "q"), ("bound_rev", "q"))
RECEIVED_FIELDS = (("window", "q"), ("flow", "I"), ("count", "I"))
# on the wire: rows packed little-endian in the fields' order, one zlib+base64 blob per table
ROW = struct.Struct("<" + "".join(code for _name, code in SUMMARY_FIELDS))
RECEIVED_ROW = struct.Struct("<" + "".join(code for _name, code in RECEIVED_FIELDS))
MAX_BINS = 100
INT64_MAX = (1 << 63) - 1


def _median(values: list[int]) -> int:
    values.sort()
    n = len(values)
    return (values[(n - 1) // 2] + values[n // 2]) // 2


def summarize(recs: dict, window_ns: int, n_bins: int, loops) -> tuple[dict, array]:
    """Rows (field -> array) and the bins of the rows with an unanswered probe, flattened as
    [row, sent per bin ..., unanswered per bin ...] each, from a batch of final records."""
    flow, t1, t2, t3, t4, state = (recs[k] for k in ("flow", "t1", "t2", "t3", "t4", "state"))
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(len(flow)):
        key = (t1[i] // window_ns, flow[i])
        g = groups.get(key)
        if g is None:
            groups[key] = [i]
        else:
            g.append(i)
    rows = {name: array(code) for name, code in SUMMARY_FIELDS}
    bins = array("I")
    n_bins = max(1, min(MAX_BINS, int(n_bins)))
    bin_ns = max(1, window_ns // n_bins)
    for (w, f), idx in groups.items():
        ok = [i for i in idx if state[i] == ANSWERED]
        r = len(rows["flow"])
        values = _answered(ok, f in loops, t1, t2, t3, t4)
        for name, v in zip(("window", "flow", "sent", "answered"), (w, f, len(idx), len(ok))):
            rows[name].append(v)
        for name, v in zip(SUMMARY_FIELDS[4:], values):
            rows[name[0]].append(v)
        if len(ok) < len(idx):
            base = w * window_ns
            sent, lost = [0] * n_bins, [0] * n_bins
            for i in idx:
                b = min(n_bins - 1, max(0, (t1[i] - base) // bin_ns))
                sent[b] += 1
                if state[i] != ANSWERED:
                    lost[b] += 1
            bins.append(r)
            bins.extend(sent)
            bins.extend(lost)
    return rows, bins


def _answered(ok: list[int], loop: bool, t1, t2, t3, t4) -> tuple:
    """(fwd, rev, t1 mean, t4 mean, bound t1, bound fwd, bound t4, bound rev) of the answered."""
    if not ok:
        return (0,) * 8
    n = len(ok)
    m1, m4 = sum(t1[i] for i in ok) // n, sum(t4[i] for i in ok) // n
    if loop:
        return (_median([t4[i] - t1[i] for i in ok]), 0, m1, m4, 0, 0, 0, 0)
    fwd = [t2[i] - t1[i] for i in ok]
    back = [t3[i] - t4[i] for i in ok]
    j_f = min(range(n), key=fwd.__getitem__)
    j_b = max(range(n), key=back.__getitem__)
    return (_median(list(fwd)), _median([-b for b in back]), m1, m4,
            t1[ok[j_f]], fwd[j_f], t4[ok[j_b]], back[j_b])


def received_counts(flows: array, t1s: array, window_ns: int) -> dict:
    """The responder's answered probes per (sender window, flow): field -> array."""
    counts: dict[tuple[int, int], int] = {}
    for f, t in zip(flows, t1s):
        key = (t // window_ns, f)
        counts[key] = counts.get(key, 0) + 1
    out = {name: array(code) for name, code in RECEIVED_FIELDS}
    for (w, f), n in counts.items():
        out["window"].append(w)
        out["flow"].append(f)
        out["count"].append(n)
    return out


def pack(columns: dict, fields, row: struct.Struct) -> bytes:
    """A table (field -> array, equal lengths) as packed rows: one blob to compress and decode
    (a blob per field cost the coordinator a decompress per field and agent)."""
    cols = [columns[name] for name, _code in fields]
    out = bytearray(row.size * len(cols[0]))
    pack_into, size = row.pack_into, row.size
    for i, values in enumerate(zip(*cols)):
        pack_into(out, i * size, *values)
    return bytes(out)

