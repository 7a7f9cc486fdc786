"""`fleetctl lab down`: remove everything the lab created."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lab.common import refuse_if_session_busy
from fleetctl.errors import EXIT_OK


@click.command("down")
@common_options
@pass_app
def down(app: Application) -> int:
    """Remove every namespace, link, rule, file and process the lab created.

    \b
    Examples:
      fleetctl lab down
    """
    from fleetctl.lab import lifecycle

    refuse_if_session_busy()
    removed = lifecycle.down(progress=lambda m: app.debug(m))
    app.emit({"status": "down", "removed": removed},
             lambda c: c.print(f"lab down: removed {removed['processes']} processes, "
                               f"{removed['netns']} namespaces, {removed['root_links']} links"))
    return EXIT_OK
