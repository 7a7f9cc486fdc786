"""`fleetctl lab env`: shell exports for the running lab (eval "$(fleetctl lab env)")."""

from __future__ import annotations

import shlex

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_OK


@click.command("env")
@common_options
@pass_app
def env(app: Application) -> int:
    """Shell exports for the running lab: eval "$(fleetctl lab env)".

    \b
    Examples:
      eval "$(fleetctl lab env)"
    """
    from fleetctl.lab import lifecycle

    values = lifecycle.env()
    if app.json:
        app.emit(values)
    else:
        for key, value in values.items():
            click.echo(f"export {key}={shlex.quote(value)}")
    return EXIT_OK
