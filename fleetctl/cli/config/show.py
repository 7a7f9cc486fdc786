"""`fleetctl config show`: the site file in use with every default filled in."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_OK


@click.command("show")
@common_options
@pass_app
def show(app: Application) -> int:
    """Print the site file in use with every default filled in (JSON).

    \b
    Examples:
      fleetctl config show | jq .access
      fleetctl --site /etc/fleetctl/site.toml config show
    """
    import json

    cluster = app.cluster
    click.echo(json.dumps({"file": cluster.source, **cluster.data}, indent=2))
    return EXIT_OK
