"""NIC failover for NCCL jobs: the plan (which NICs back each other up, and the environment a job
gets), the watch (link and port events, the fleet plugin's counters, flap history) and the drill
(a real transfer between two nodes with a link taken down mid-way). docs/failover.md.

No click or rich here; the lab's fault injection reaches the drill only through `drill.Faults`,
which the CLI supplies.
"""

from fleetctl.errors import FailoverError

__all__ = ["FailoverError"]
