"""From the agents' JSON documents to the run's probe records (store.PROBE_DTYPE).

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
from pathlib import Path

import numpy as np

from fleetctl.errors import DataError
from fleetctl.mesh import agent
from fleetctl.mesh.store import PROBE_DTYPE

_TYPES = {"flow": "<u4", "seq": "<u4", "t1": "<i8", "t2": "<i8", "t3": "<i8", "t4": "<i8",
          "state": "u1"}


def _array(doc: dict, name: str, node: str) -> np.ndarray:
    try:
        text = doc[name]
        raw = zlib.decompress(base64.b64decode("".join(text) if isinstance(text, list) else text))
        return np.frombuffer(raw, dtype=_TYPES[name])
    except (KeyError, ValueError, TypeError, zlib.error) as exc:
        raise DataError(f"{node}: probe agent output field {name!r} is unreadable: {exc}") from None


def decode(doc: dict, node: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(sender records by field, responder log keys flow << 32 | seq) of one agent document."""
    rec = doc.get("records") or {}
    n = int(rec.get("n", 0))
    fields = {k: _array(rec, k, node) for k in _TYPES} if n else \
        {k: np.zeros(0, dtype=t) for k, t in _TYPES.items()}
    if any(len(v) != n for v in fields.values()):
        raise DataError(f"{node}: probe agent records have inconsistent lengths")
    got = doc.get("received") or {}
    if int(got.get("n", 0)):
        keys = (_array(got, "flow", node).astype(np.uint64) << np.uint64(32)) | \
            _array(got, "seq", node).astype(np.uint64)
    else:
        keys = np.zeros(0, dtype=np.uint64)
    return fields, keys


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
    if failed:
        bad_nics = np.array([n in failed for n in nic_node] + [False])
        drop = bad_nics[out["src_nic"]] | bad_nics[out["dst_nic"]]
        out = out[~drop]
    return out[np.argsort(out["t_send"], kind="stable")]


def lab_clock(site) -> dict | None:
    """The lab's injected clock truth ({"t0", "hosts": {node: {offset_ms, drift_ppm}}}) when the
    site file describes a lab started with --clock-skew; None otherwise."""
    lab = site.data.get("lab") or {}
    if not lab.get("clock_skew") or not lab.get("state_dir"):
        return None
    path = Path(lab["state_dir"]) / "state.json"
    try:
        clock = json.loads(path.read_text()).get("clock")
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read the lab's clock truth: {exc}") from None
    return clock or None


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
