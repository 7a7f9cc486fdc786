"""`fleetctl audit`: `run` (the default: `fleetctl audit [NODESET]`) and `analyze FILE.h5`."""

from __future__ import annotations

import click

from fleetctl.cli.audit.analyze import analyze
from fleetctl.cli.audit.run import run
from fleetctl.cli.groups import DefaultCommandGroup


@click.group("audit", cls=DefaultCommandGroup, default="run",
             context_settings={"help_option_names": ["-h", "--help"]})
def audit() -> None:
    """Check node health and fleet consistency; drain and resume in Slurm; probe the NIC mesh.

    `fleetctl audit [NODESET] [OPTIONS]` runs `audit run` (see `fleetctl audit run --help`).
    `fleetctl audit analyze FILE.h5` re-analyses a stored probe run. A node named like a
    subcommand is audited with `fleetctl audit run analyze` or `fleetctl audit -- analyze`.
    """


audit.add_command(run)
audit.add_command(analyze)
