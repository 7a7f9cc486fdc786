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
