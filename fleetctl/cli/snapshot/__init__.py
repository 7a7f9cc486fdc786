"""`fleetctl snapshot take|list|verify|restore|prune|interval`: the operator's side of fleetctl.snapshot.

A TARGET is a Slurm job id (mapped to its snapshot directory through the registry the job writes,
fleetctl/snapshot/registry.py) or a snapshot directory. Exit codes: 0 ok; 2 `verify` found a snapshot
that fails (or none); 3 fleetctl could not do the job (bad target, registry entry, Slurm).
No torch here: the on-disk format is read with the standard library only.
"""

from __future__ import annotations

import click

from fleetctl.cli.snapshot import interval, listing, prune, restore, take, verify


@click.group("snapshot")
def snapshot() -> None:
    """Coordinated, verified snapshots of training jobs (docs/snapshot.md)."""


for _command in (interval.interval, listing.list_command, prune.prune, restore.restore, take.take, verify.verify):
    snapshot.add_command(_command)
