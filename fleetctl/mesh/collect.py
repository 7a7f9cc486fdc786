"""From the agents' output to the run's probe records (model.fabric.PROBE_DTYPE).

An agent reports either one JSON document at exit (output "document", the one-shot audit) or a
stream of batches while it runs (output "stream"; `StreamDecoder` / `parse_stream` turn its FLS1
lines back into batch objects and a document whose records are the batches concatenated).

Each sender reports its records (flow, seq, t1..t4, state); each responder the (flow, seq) of every
genuine probe it answered. A probe the sender saw unanswered was lost on the way out (1) unless its
responder logged it, then on the way back (2); a probe that could not be sent at all (NIC down)
is lost on the way out. Probes from or to a node whose agent did not report are left out (the
run says so): an unreachable node is not a network fault of its peers.
"""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np

from fleetctl.errors import DataError
from fleetctl.mesh import agent
from fleetctl.model.cluster import Cluster
from fleetctl.model.fabric import PROBE_DTYPE

_TYPES = {"flow": "<u4", "seq": "<u4", "t1": "<i8", "t2": "<i8", "t3": "<i8", "t4": "<i8",
          "state": "u1"}


MAX_DOCUMENT_RECORDS = 1 << 25  # per document or batch: 16x an agent's own max_records default


def _count(part: dict, node: str) -> int:
    """A part's announced record count, bounded (it sizes what may be inflated)."""
    try:
        n = int(part.get("n", 0))
    except (AttributeError, TypeError, ValueError):
        raise DataError(f"{node}: probe agent output has no readable record count") from None
    if not 0 <= n <= MAX_DOCUMENT_RECORDS:
        raise DataError(f"{node}: probe agent output announces {n} records "
                        f"(at most {MAX_DOCUMENT_RECORDS})")
    return n


def decode(doc: dict, node: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(sender records by field, responder log keys flow << 32 | seq) of one agent document,
    or of a streamed one (parse_stream: its batches in order, concatenated)."""
    if "batches" in doc:
        parts = [_decode_one(b, node) for b in doc["batches"]]
        if not parts:
            return {k: np.zeros(0, dtype=t) for k, t in _TYPES.items()}, np.zeros(0, np.uint64)
        return ({k: np.concatenate([p[0][k] for p in parts]) for k in _TYPES},
                np.concatenate([p[1] for p in parts]))
    return _decode_one(doc, node)


def _decode_one(doc: dict, node: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    if not isinstance(doc, dict):
        raise DataError(f"{node}: probe agent output is not an object")
    rec, got = doc.get("records") or {}, doc.get("received") or {}
    return _records_and_log(rec, _count(rec, node), got, _count(got, node), node,
                            ("probe agent records", "responder log"))


def _records_and_log(rec: dict, n: int, got: dict, m: int, node: str,
                     what: tuple[str, str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(sender records by field, responder log keys flow << 32 | seq) of record mode's encoding,
    `n` records and `m` log entries announced (already bounded): each array inflated to exactly
    its announced length and no further, so a hostile document cannot inflate a bomb."""
    fields = {k: _bounded_array(rec, k, t, n, node, what[0]) if n else np.zeros(0, dtype=t)
              for k, t in _TYPES.items()}
    keys = np.zeros(0, dtype=np.uint64)
    if m:
        keys = (_bounded_array(got, "flow", "<u4", m, node, what[1]).astype(np.uint64)
                << np.uint64(32)) | \
            _bounded_array(got, "seq", "<u4", m, node, what[1]).astype(np.uint64)
    return fields, keys


class StreamDecoder:
    """Reassembles an agent's streamed objects from its FLS1 output lines, one line at a time
    (`feed` returns the objects completed by that line). Lines are `FLS1 <k> <i> <n> <piece>`:
    object k is the concatenation of its n pieces, compact JSON. Other lines are counted and
    ignored (a transport's own messages); bad framing or oversized objects are a DataError."""

    MAX_PIECES = 200_000  # 80 MB of JSON text per object: far above any real batch
    MAX_OPEN = 4  # objects being assembled at once (an agent writes one at a time)

    def __init__(self, node: str):
        self.node = node
        self.open: dict[int, list] = {}
        self.ignored = 0
        self.next_k = 0

    def feed(self, line: str) -> list[dict]:
        line = line.rstrip("\n")
        if not line.startswith("FLS1 "):
            self.ignored += int(bool(line.strip()))
            return []
        head = line.split(" ", 4)
        try:
            k, i, n = int(head[1]), int(head[2]), int(head[3])
            piece = head[4] if len(head) > 4 else ""
        except (ValueError, IndexError):
            raise DataError(f"{self.node}: probe agent stream line is malformed: {line[:60]!r}") \
                from None
        if not (0 <= i < n <= self.MAX_PIECES) or k < self.next_k or len(piece) > 4096:
            raise DataError(f"{self.node}: probe agent stream object {k} piece {i}/{n} is out "
                            "of order or too large")
        parts = self.open.setdefault(k, [n, []])
        if parts[0] != n or len(parts[1]) != i or len(self.open) > self.MAX_OPEN:
            raise DataError(f"{self.node}: probe agent stream object {k} is garbled (piece {i} "
                            f"of {n} out of sequence)")
        parts[1].append(piece)
        if len(parts[1]) < n:
            return []
        del self.open[k]
        self.next_k = k + 1
        try:
            obj = json.loads("".join(parts[1]))
        except ValueError as exc:
            raise DataError(f"{self.node}: probe agent stream object {k} is not JSON: {exc}") \
                from None
        if not isinstance(obj, dict) or obj.get("kind") not in ("batch", "end"):
            raise DataError(f"{self.node}: probe agent stream object {k} has no known kind")
        return [obj]


def parse_stream(text: str, node: str, *, require_end: bool = True) -> dict:
    """An agent's whole streamed output as one document: the end object's fields, `batches`
    (each decodable by `decode`'s rules) and the health windows of every batch in order."""
    dec = StreamDecoder(node)
    batches, end = [], None
    for line in text.splitlines():
        for obj in dec.feed(line):
            if obj["kind"] == "end":
                end = obj
            else:
                batches.append(obj)
    if dec.open:
        raise DataError(f"{node}: probe agent stream ends inside an object")
    if end is None and require_end:
        raise DataError(f"{node}: probe agent stream has no end record (the agent did not "
                        "finish)")
    doc = dict(end or {"node": node})
    doc.pop("kind", None)
    doc["batches"] = batches
    health = dict(doc.get("health") or {})
    health["windows"] = [row for b in batches for row in (b.get("health") or [])]
    doc["health"] = health
    return doc


def health_table(doc: dict) -> tuple[list[str], list[list]]:
    """(field names, rows) of an agent's per-window health (document or parsed stream); empty for
    an agent older than version 2."""
    h = doc.get("health") or {}
    fields, rows = h.get("fields") or [], h.get("windows") or []
    if not isinstance(fields, list) or not isinstance(rows, list) or \
            any(not isinstance(r, list) or len(r) != len(fields) for r in rows):
        raise DataError(f"{doc.get('node', '?')}: probe agent health table is malformed")
    return fields, rows


def probe_records(docs: dict[str, dict], flows: np.ndarray, nic_node: list[str],
                  failed: set[str]) -> np.ndarray:
    """All nodes' records joined into PROBE_DTYPE rows (flows: the run's FLOW_DTYPE table, row =
    flow id)."""
    parts, received = [], []
    for node, doc in docs.items():
        fields, keys = decode(doc, node)
        parts.append(fields)
        received.append(keys)
    if not parts:
        return np.zeros(0, dtype=PROBE_DTYPE)
    cat = {k: np.concatenate([p[k] for p in parts]) for k in _TYPES}
    seen = np.concatenate(received) if received else np.zeros(0, dtype=np.uint64)
    out = join_records(cat, seen, flows)
    if failed:
        bad_nics = np.array([n in failed for n in nic_node] + [False])
        drop = bad_nics[out["src_nic"]] | bad_nics[out["dst_nic"]]
        out = out[~drop]
    return out[np.argsort(out["t_send"], kind="stable")]


def join_records(cat: dict[str, np.ndarray], seen: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """Senders' records (fields as decoded) and responders' log keys (flow << 32 | seq) as
    PROBE_DTYPE rows, unsorted; lens joins each window's records this way."""
    flow = cat["flow"].astype(np.int64)
    if flow.size and (flow.max() >= len(flows)):
        raise DataError(f"probe agent reported flow {int(flow.max())}, the run has {len(flows)}")
    out = np.zeros(flow.size, dtype=PROBE_DTYPE)
    out["flow"] = flow
    out["src_nic"] = flows["src_nic"][flow]
    out["dst_nic"] = flows["dst_nic"][flow]
    out["sport"] = flows["sport"][flow]
    out["seq"] = cat["seq"]
    out["t_send"] = cat["t1"]
    state = cat["state"]
    ok = state == agent.ANSWERED
    out["t_remote_rx"] = np.where(ok, cat["t2"], 0)
    out["t_remote_tx"] = np.where(ok, cat["t3"], 0)
    out["t_recv"] = np.where(ok, cat["t4"], 0)
    key = (flow.astype(np.uint64) << np.uint64(32)) | cat["seq"].astype(np.uint64)
    back = np.isin(key, seen)
    lost = np.where((state == agent.UNANSWERED) & back, 2, 1)
    lost = np.where(out["dst_nic"] < 0, 3, lost)  # a loop: no responder, direction unknown
    out["lost"] = np.where(ok, 0, lost)
    return out


MAX_CLOCK_FILE = 1 << 20


def injected_clocks(cluster: Cluster) -> tuple[dict | None, dict[str, dict]]:
    """(clock truth, per-node agent clock entries) when the site file names an injected-clock file
    (`lab.clock_file`, written by `fleetctl lab up --clock-skew`: all namespaces of one machine share
    one clock, so the lab gives each host an artificial offset and drift to estimate), else
    (None, {}). The file is plain data, read bounded like any input: {"t0": epoch seconds,
    "hosts": {node: {"offset_ms", "drift_ppm"}}}. The agents get plain "offset" clock-source
    entries; the truth goes into the run so the estimate can be checked against it."""
    from fleetctl.config.files import site_path
    from fleetctl.filekit import read_json

    name = (cluster.data.get("lab") or {}).get("clock_file")
    if not name:
        return None, {}
    path = site_path(name, cluster.source)
    doc = read_json(path, "injected clock file", max_bytes=MAX_CLOCK_FILE, kind=dict)
    t0, hosts = doc.get("t0"), doc.get("hosts")
    if not _finite(t0) or not isinstance(hosts, dict):
        raise DataError(f"{path}: injected clock file is not {{t0, hosts}}")
    entries = {}
    for node, h in hosts.items():
        if not isinstance(h, dict) or not _finite(h.get("offset_ms")) or not _finite(h.get("drift_ppm")):
            raise DataError(f"{path}: host {str(node)[:64]!r} has no numeric offset_ms and drift_ppm")
        entries[node] = {"source": "offset", "offset_ms": float(h["offset_ms"]),
                         "drift_ppm": float(h["drift_ppm"]), "t0": float(t0)}
    return {"t0": float(t0), "hosts": {n: {"offset_ms": e["offset_ms"], "drift_ppm": e["drift_ppm"]}
                                       for n, e in entries.items()}}, entries


def _finite(value) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def clock_error(model, hosts: list[str], truth: dict, epoch_ns: int, span_s: float) -> dict:
    """Estimated vs injected offsets, relative to each component's reference host, at the run's
    start and end (the drift error shows at the end). Microseconds."""
    t0 = float(truth["t0"])
    epoch = epoch_ns * 1e-9
    errs, drift_errs = [], []
    for comp in set(int(c) for c in model.component if c >= 0):
        members = [i for i, c in enumerate(model.component) if c == comp]
        ref = next((i for i in members if model.offset[i] == 0 and model.drift[i] == 0), members[0])

        def true_at(h, t):
            x = truth["hosts"].get(hosts[h], {})
            return x.get("offset_ms", 0.0) * 1e-3 + x.get("drift_ppm", 0.0) * 1e-6 * (t - t0)

        for h in members:
            if h == ref or not np.isfinite(model.offset[h]):
                continue
            for t in (0.0, span_s):
                true_rel = true_at(h, epoch + t) - true_at(ref, epoch + t)
                est = model.offset[h] + model.drift[h] * t
                errs.append(abs(est - true_rel) * 1e6)
            x, r = truth["hosts"].get(hosts[h], {}), truth["hosts"].get(hosts[ref], {})
            drift_errs.append(abs(model.drift[h] - (x.get("drift_ppm", 0) - r.get("drift_ppm", 0))
                                  * 1e-6) * 1e6)
    if not errs:
        return {"hosts": 0}
    e = np.array(errs)
    return {"hosts": len(drift_errs), "offset_error_us_p50": round(float(np.percentile(e, 50)), 2),
            "offset_error_us_p99": round(float(np.percentile(e, 99)), 2),
            "offset_error_us_max": round(float(e.max()), 2),
            "drift_error_ppm_max": round(float(max(drift_errs)), 3)}


MAX_SUMMARY_ROWS = 1 << 21  # per batch: an agent sends one row per flow and window
RECEIVED_DTYPE = np.dtype([("window", "<i8"), ("flow", "<i4"), ("count", "<u4")])


def _bounded_array(doc: dict, name: str, dtype, n: int, node: str,
                   what: str = "summary") -> np.ndarray:
    """One base64(zlib) array of exactly n items; inflated no further than that (a hostile
    batch cannot make the coordinator inflate a bomb)."""
    size = np.dtype(dtype).itemsize * n
    try:
        text = doc[name]
        z = zlib.decompressobj()
        raw = z.decompress(base64.b64decode("".join(text) if isinstance(text, list) else text),
                           size + 1)
    except (KeyError, ValueError, TypeError, zlib.error) as exc:
        raise DataError(f"{node}: {what} field {name!r} is unreadable: {exc}") from None
    if len(raw) != size:
        raise DataError(f"{node}: {what} field {name!r} holds {len(raw)} bytes, not {size}")
    return np.frombuffer(raw, dtype=dtype)


def decode_debug(doc: dict, node: str) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
    """(sender records by field, responder log keys flow << 32 | seq, records the agent left
    out) of one batch's sampled debug records (agent._debug): record mode's encoding, read as
    `_decode_one` reads it, at most agent.MAX_DEBUG_RECORDS; DataError for anything malformed
    or out of bounds."""
    if not isinstance(doc, dict):
        raise DataError(f"{node}: debug records are not an object")
    try:
        rec, got = doc.get("records") or {}, doc.get("received") or {}
        n, m, dropped = int(rec.get("n", 0)), int(got.get("n", 0)), int(doc.get("dropped", 0))
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:  # Infinity is JSON here
        raise DataError(f"{node}: debug records are malformed: {exc}") from None
    cap = agent.MAX_DEBUG_RECORDS
    if not (0 <= n <= cap and 0 <= m <= cap and 0 <= dropped <= 1 << 32):
        raise DataError(f"{node}: debug record counts out of range ({n}, {m}, {dropped})")
    fields, keys = _records_and_log(rec, n, got, m, node, ("debug record", "debug answer log"))
    if not np.isin(fields["state"], (agent.ANSWERED, agent.UNANSWERED, agent.SEND_FAILED)).all():
        raise DataError(f"{node}: debug records hold an unknown record state")
    return fields, keys, dropped


def summary_wire_dtypes() -> tuple[np.dtype, np.dtype]:
    """The agents' packed summary rows and responder counts (mesh/summary.py ROW and
    RECEIVED_ROW) as numpy dtypes, derived from the same field lists."""
    from fleetctl.mesh.summary import RECEIVED_FIELDS, SUMMARY_FIELDS

    codes = {"q": "<i8", "I": "<u4"}
    return (np.dtype([(name, codes[code]) for name, code in SUMMARY_FIELDS]),
            np.dtype([(name, codes[code]) for name, code in RECEIVED_FIELDS]))


def decode_summary(doc: dict, node: str):
    """(WindowSummary, responder counts as RECEIVED_DTYPE rows) of one agent batch's "summary"
    (mesh/summary.py); DataError for anything malformed or out of bounds."""
    from fleetctl.model.summary import MAX_BINS, SUMMARY_DTYPE, WindowSummary
    from fleetctl.mesh.summary import RECEIVED_FIELDS, SUMMARY_FIELDS

    if not isinstance(doc, dict):
        raise DataError(f"{node}: summary is not an object")
    try:
        window_ns, n_bins = int(doc["window_ns"]), int(doc["bins"])
        parts = [doc["rows"], doc["row_bins"], doc["received"]]
        n, n_b, n_r = (int(p.get("n", 0)) for p in parts)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{node}: summary is malformed: {exc}") from None
    if not (10**8 <= window_ns <= 6 * 10**10 and 1 <= n_bins <= MAX_BINS):
        raise DataError(f"{node}: summary window {window_ns} ns / {n_bins} bins out of range")
    if not (0 <= n <= MAX_SUMMARY_ROWS and 0 <= n_r <= MAX_SUMMARY_ROWS and
            0 <= n_b <= n * (1 + 2 * n_bins) and n_b % (1 + 2 * n_bins) == 0):
        raise DataError(f"{node}: summary sizes out of range")
    wire_rows, wire_got = summary_wire_dtypes()
    rows = np.zeros(n, SUMMARY_DTYPE)
    if n:
        packed = _bounded_array(parts[0], "data", wire_rows, n, node)
        for name, _code in SUMMARY_FIELDS:
            rows[name] = packed[name]
    got = np.zeros(n_r, RECEIVED_DTYPE)
    if n_r:
        packed = _bounded_array(parts[2], "data", wire_got, n_r, node)
        for name, _code in RECEIVED_FIELDS:
            got[name] = packed[name]
    flat = _bounded_array(parts[1], "data", "<u4", n_b, node).astype(np.int64) if n_b else \
        np.zeros(0, np.int64)
    table = flat.reshape(-1, 1 + 2 * n_bins)
    bin_rows = table[:, 0]
    if bin_rows.size and (bin_rows.max() >= n):
        raise DataError(f"{node}: summary bins name a row it does not have")
    if ((rows["answered"] > rows["sent"]) | (rows["flow"] < 0)).any() or (got["flow"] < 0).any():
        raise DataError(f"{node}: summary rows are inconsistent")
    return (WindowSummary(window_ns, n_bins, rows, bin_rows, table[:, 1:1 + n_bins],
                          table[:, 1 + n_bins:]), got)
