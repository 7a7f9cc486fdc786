"""`fleetctl act undo ACTION_ID`: reverse one action where that can be done safely."""

from __future__ import annotations

import click

from fleetctl.cli.act.common import config, state_dir_option
from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.errors import EXIT_OK


@click.command("undo")
@common_options
@state_dir_option(must_exist=True)
@click.argument("action_id")
@click.option("--dry-run", is_flag=True, help="Say what the undo would do.")
@click.option("--spares-state-dir", metavar="DIR", default=None, help="The spare pool's state.")
@pass_app
def undo_cmd(app: Application, state_dir, action_id: str, dry_run: bool, spares_state_dir) -> int:
    """Reverse one done action where it can be done safely (drain, swap, resume).

    \b
    Examples:
      fleetctl act undo act-20261201T070003-1a2b3c --dry-run
    """
    from fleetctl.act.actionlog import ActionLog
    from fleetctl.act.undo import undo
    from fleetctl.slurm import backend_for_site
    from fleetctl.spares import SparePool, SparesConfig

    backend = backend_for_site(app.cluster)
    pool = SparePool(backend, SparesConfig.from_site(app.cluster, spares_state_dir))
    out = undo(ActionLog(config(app, state_dir).state_dir), action_id, backend, pool, dry_run=dry_run)
    app.emit(out, lambda console: console.print(f"{'would ' if dry_run else 'undone: '}"
                                                f"{esc(out.get('would') or out.get('why'), 2000)}"))
    return EXIT_OK
