"""The audited spare pool (a Slurm reservation) and the spare swap (docs/spares.md).

No click or rich here: `fleetctl/cli/spares.py` renders what these functions return.
"""

from __future__ import annotations

from fleetctl.spares.pool import PoolStatus, SparePool, SparesConfig
from fleetctl.spares.swap import SwapPlan, plan_swap, run_swap
from fleetctl.spares.verdicts import VerdictStore

__all__ = ["PoolStatus", "SparePool", "SparesConfig", "SwapPlan", "VerdictStore", "plan_swap", "run_swap"]
