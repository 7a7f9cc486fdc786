"""`fleetctl hook prolog|epilog|healthcheck` (run by slurmd) and `fleetctl hook install DIR`."""

from __future__ import annotations

import click

from fleetctl.cli.hook.install import install
from fleetctl.cli.hook.run import epilog, healthcheck, prolog


@click.group("hook")
def hook() -> None:
    """Slurm Prolog, Epilog and HealthCheckProgram hooks (prolog_epilog/README.md)."""


for _command in (prolog, epilog, healthcheck, install):
    hook.add_command(_command)
