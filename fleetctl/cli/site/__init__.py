"""`fleetctl site discover`: write the site file from what the nodes and the fabric say."""

from __future__ import annotations

import click

from fleetctl.cli.site.discover import discover


@click.group("site")
def site() -> None:
    """Discover the site: nodes, classes, NICs, switches and cables, as a site file."""


site.add_command(discover)
