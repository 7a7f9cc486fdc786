"""How often to snapshot: Young's and Daly's optimum intervals from the snapshot cost and the MTBF.

Young: tau = sqrt(2 C M); Daly (first order, with restart time R): tau = sqrt(2 C (R + M)), where C is
what one snapshot costs the training loop (the blocking time) and M the job's mean time between
failures: a node's MTBF divided by the number of nodes the job spans.
"""

from __future__ import annotations

import math
import os

from fleetctl.errors import SnapshotError

# Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 GPUs (2,048 nodes of 8) =>
# a node fails about every 2,048 * 54 * 24 / 419 ~ 6,300 h. A default, to be replaced by the site's own.
DEFAULT_NODE_MTBF_H = 6300.0
DEFAULT_COST_S = 10.0  # assumed cost until the first snapshot is measured
MIN_INTERVAL_S = 10.0
MAX_INTERVAL_S = 7 * 86400.0
ENV_MTBF_H = "FLEETCTL_SNAPSHOT_MTBF_HOURS"  # the job's MTBF (hours), overriding node MTBF / nodes


def _positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
            or value <= 0:
        raise SnapshotError(f"{name} must be a positive finite number, not {value!r}")
    return float(value)


def young(cost_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * _positive("snapshot cost", cost_s) * _positive("MTBF", mtbf_s))


def daly(cost_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    if restart_s < 0 or not math.isfinite(restart_s):
        raise SnapshotError(f"restart time must be a non-negative finite number, not {restart_s!r}")
    return math.sqrt(2.0 * _positive("snapshot cost", cost_s) * (_positive("MTBF", mtbf_s) + restart_s))


def job_mtbf_s(nodes: int, node_mtbf_h: float = DEFAULT_NODE_MTBF_H) -> float:
    if not isinstance(nodes, int) or nodes < 1:
        raise SnapshotError(f"node count must be a positive integer, not {nodes!r}")
    return _positive("node MTBF", node_mtbf_h) * 3600.0 / nodes


def mtbf_from_env(nodes: int) -> tuple[float, str]:
    """(job MTBF in seconds, where it came from): FLEETCTL_SNAPSHOT_MTBF_HOURS, else the default."""
    raw = os.environ.get(ENV_MTBF_H)
    if raw:
        try:
            return _positive(ENV_MTBF_H, float(raw)) * 3600.0, ENV_MTBF_H
        except ValueError:
            raise SnapshotError(f"{ENV_MTBF_H}={raw[:40]!r} is not a number") from None
    return job_mtbf_s(nodes), f"default node MTBF {DEFAULT_NODE_MTBF_H:g} h / {nodes} node(s)"


def clamp(interval_s: float) -> float:
    return min(max(interval_s, MIN_INTERVAL_S), MAX_INTERVAL_S)


def _usable(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 < value < 1e12


def advise(status: dict, *, cost: float | None = None, mtbf_hours: float | None = None,
           node_mtbf_hours: float | None = None, nodes: int | None = None, restart: float = 0.0) -> dict:
    """Young's and Daly's intervals with their inputs and where each came from: the options given,
    else the job's STATUS.json (measured cost, its MTBF, its node count), else the defaults."""
    cost_source = "--cost"
    if cost is None:
        measured = status.get("cost_s")
        if _usable(measured) and measured < 86_400:
            cost, cost_source = float(measured), "measured by the job (STATUS.json)"
        else:
            cost, cost_source = DEFAULT_COST_S, "default (no measurement)"
    job_mtbf = status.get("mtbf_s")
    if mtbf_hours is not None:
        mtbf_s, mtbf_source = mtbf_hours * 3600.0, "--mtbf-hours"
    elif node_mtbf_hours is None and nodes is None and _usable(job_mtbf):
        mtbf_s, mtbf_source = float(job_mtbf), f"the job's: {str(status.get('mtbf_source'))[:80]}"
    else:
        job_nodes = status.get("nodes")
        if nodes is None:
            nodes = job_nodes if isinstance(job_nodes, int) and 0 < job_nodes <= 1_000_000 else 1
        node_h = node_mtbf_hours or DEFAULT_NODE_MTBF_H
        mtbf_s, mtbf_source = job_mtbf_s(nodes, node_h), f"node MTBF {node_h:g} h / {nodes} node(s)"
    return {"young_s": round(young(cost, mtbf_s), 3), "daly_s": round(daly(cost, mtbf_s, restart), 3),
            "inputs": {"cost_s": cost, "cost_source": cost_source, "mtbf_s": mtbf_s,
                       "mtbf_source": mtbf_source, "restart_s": restart},
            "job_interval_s": status.get("interval_s")}
