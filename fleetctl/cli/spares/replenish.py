"""`fleetctl spares replenish`: audit what fleetctl drained; return what passes to the pool."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.spares.common import pool, print_warnings, state_dir_option
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("replenish")
@common_options
@state_dir_option
@click.option("--dry-run", is_flag=True, help="Audit, but resume and add nothing.")
@pass_app
def replenish_cmd(app: Application, state_dir, dry_run: bool) -> int:
    """Audit the nodes fleetctl drained; resume those that pass and return them to the pool.

    \b
    Examples:
      fleetctl spares replenish --dry-run
    """
    import time

    from fleetctl.act.config import ActConfig
    from fleetctl.act.incidents import holds
    from fleetctl.spares.membership import audit_nodes
    from fleetctl.spares.replenish import replenish

    backend, spare_pool = pool(app, state_dir)
    out = replenish(spare_pool, backend, lambda nodes: audit_nodes(app.cluster, spare_pool, nodes), dry_run=dry_run,
                    hold=holds(ActConfig.from_site(app.cluster), time.time()))

    def render(console):
        console.print(f"candidates: {esc(','.join(out.candidates) or 'none')}; "
                      f"passed: {esc(','.join(out.passed) or 'none')}; "
                      f"added to the pool: {esc(','.join(out.added) or 'none')}")
        for node, why in {**out.held, **out.failed, **out.refused}.items():
            console.print(f"  {esc(node)}: {esc(why)}")
        print_warnings(console, out.warnings)

    app.emit(out.to_dict(), render)
    return EXIT_WARNINGS if out.warnings or out.failed else EXIT_OK
