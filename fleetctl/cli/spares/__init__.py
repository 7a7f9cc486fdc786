"""`fleetctl spares status|add|remove|replenish|swap`: the audited spare pool (docs/spares.md).

Exit codes: 0 done; 1 done with warnings (the pool below its floor, some nodes refused); 3 fleetctl
could not do the job (Slurm, bad input).
"""

from __future__ import annotations

import click

from fleetctl.cli.spares import members, replenish, status, swap


@click.group("spares")
def spares() -> None:
    """The audited spare pool: a Slurm reservation of nodes that passed a recent audit."""


for _command in (members.add, members.remove, replenish.replenish_cmd, status.status, swap.swap):
    spares.add_command(_command)
