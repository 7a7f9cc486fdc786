"""The drain budget: never drain more than `act.max_drain_pct` % of a partition, nor more than
`act.max_drains_per_hour` nodes in any hour. A drain that would break either is refused, and the
refusal says which limit and the figures. Every drained node counts toward the partition share
(operators' drains too: the capacity is gone either way); the hourly count is act's own drains."""

from __future__ import annotations

import time
from dataclasses import dataclass

HOUR_S = 3600.0


@dataclass(frozen=True)
class Budget:
    max_drain_pct: float = 10.0
    max_drains_per_hour: int = 4

    def check(self, node: str, slurm_nodes: list, drains_last_hour: int,
              planned: list[str] = ()) -> str:
        """'' when draining `node` fits, else why not. `slurm_nodes`: every SlurmNode (for partitions);
        `planned`: nodes this run already decided to drain (not yet visible in Slurm)."""
        if drains_last_hour + len(planned) + 1 > self.max_drains_per_hour:
            return (f"budget: {drains_last_hour + len(planned)} drain(s) in the last hour already, the "
                    f"limit is {self.max_drains_per_hour} per hour")
        by_name = {n.name: n for n in slurm_nodes}
        me = by_name.get(node)
        for part in (me.partitions if me else []):
            members = [n for n in slurm_nodes if part in n.partitions]
            drained = {n.name for n in members if n.drained or n.state in ("DOWN", "FAIL")}
            drained |= {p for p in planned if p in by_name and part in by_name[p].partitions}
            drained.add(node)
            share = 100.0 * len(drained) / max(1, len(members))
            if share > self.max_drain_pct + 1e-9:
                return (f"budget: draining {node} would leave {len(drained)} of {len(members)} nodes of "
                        f"partition {part} drained ({share:.0f} %), the limit is {self.max_drain_pct:g} %")
        return ""


def since_hour(now: float | None = None) -> float:
    return (now or time.time()) - HOUR_S


def breaker_open(slurm_nodes: list, max_pct: float, ours, min_nodes: int = 3) -> str:
    """The circuit breaker: '' while every partition has at most `max_pct` % of its nodes (or fewer
    than `min_nodes`) in remediation (drained by fleetctl, `ours(reason)`, or down), else the line
    that says which partition tripped it. Open, it pauses every remediation fleet-wide: that many nodes failing at
    once is more likely a cause above them (a driver rollout, a PDU, a fabric event, fleetctl's own
    mistake) than that many broken nodes, and a person should look first."""
    partitions: dict[str, list] = {}
    for n in slurm_nodes:
        for part in n.partitions:
            partitions.setdefault(part, []).append(n)
    for part in sorted(partitions):
        members = partitions[part]
        hit = [n.name for n in members if (n.drained and ours(n.reason)) or n.state in ("DOWN", "FAIL")]
        share = 100.0 * len(hit) / max(1, len(members))
        if share > max_pct + 1e-9 and len(hit) >= min_nodes:
            return (f"circuit breaker open: {len(hit)} of {len(members)} nodes of partition {part} "
                    f"({share:.0f} %) are in remediation, above act.breaker_pct = {max_pct:g} %: "
                    "remediation is paused fleet-wide until that falls back")
    return ""
