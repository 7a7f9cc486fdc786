"""`fleetctl lens stop`: stop the coordinator."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lens.common import existing_state_dir_option, state_directory
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("stop")
@common_options
@existing_state_dir_option
@pass_app
def stop_cmd(app: Application, state_dir) -> int:
    """Stop the coordinator (it finishes its window and saves its state).

    \b
    Examples:
      fleetctl lens stop
    """
    from fleetctl.lens.daemon import stop

    result = stop(state_directory(app, state_dir) / "lens.pid")
    app.emit(result, lambda c: c.print("lens stopped" if result["stopped"] else "lens was not running"))
    return EXIT_OK if result["stopped"] else EXIT_WARNINGS
