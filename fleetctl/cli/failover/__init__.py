"""`fleetctl failover plan|watch|drill`: NIC failover for NCCL jobs (docs/failover.md).

The work is in fleetctl.failover (command.py: one domain call per subcommand); this package parses
and renders. Exit codes: plan 0, or 1 with warnings (an NCCL too old for IB resiliency, an unknown
version, a class with one NIC); watch 0, or with --once 1 when a link is down or flapping; drill 0,
or 2 when the drill found a problem (corrupt, duplicated or lost data, no resume, no fail-back); 3
fleetctl could not do the job (no site file, no harness, a real cluster without --i-know and a
maintenance reservation).
"""

from __future__ import annotations

import click

from fleetctl.cli.failover import drill, plan, watch


@click.group("failover")
def failover() -> None:
    """NIC failover for NCCL jobs: plan, watch, drill (docs/failover.md)."""


for _command in (plan.plan_cmd, watch.watch_cmd, drill.drill_cmd):
    failover.add_command(_command)
