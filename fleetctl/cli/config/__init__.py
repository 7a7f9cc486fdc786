"""`fleetctl config check|show`: validate a site file and show what fleetctl makes of it."""

from __future__ import annotations

import click

from fleetctl.cli.config.check import check
from fleetctl.cli.config.show import show


@click.group("config")
def config() -> None:
    """Validate and show the site configuration."""


config.add_command(check)
config.add_command(show)
