"""`fleetctl job`: signals from inside training jobs (docs/recovery.md)."""

from __future__ import annotations

import click

from fleetctl.cli.job.watch import watch


@click.group("job")
def job() -> None:
    """Training jobs from the inside: hang and straggler signals from each rank's progress."""


job.add_command(watch)
