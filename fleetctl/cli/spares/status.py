"""`fleetctl spares status`: the pool's members, verdicts and use."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.spares.common import pool, print_warnings, state_dir_option
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("status")
@common_options
@state_dir_option(must_exist=True)
@pass_app
def status(app: Application, state_dir: str | None) -> int:
    """Members, their last audit verdict and its age, free or in use.

    \b
    Examples:
      fleetctl spares status
      fleetctl spares status --format json | jq '.members[] | select(.free)'
    """
    _, spare_pool = pool(app, state_dir)
    st = spare_pool.status()

    def render(console):
        from rich.table import Table

        table = Table(title=f"spare pool {esc(st.reservation)} (floor {st.floor})", title_justify="left")
        for col in ("node", "state", "use", "last audit", "age"):
            table.add_column(col)
        for m in st.members:
            age = f"{m['audit_age_s']:.0f} s" if m["audit_age_s"] is not None else "-"
            use = "in use" if m["in_use"] else ("free" if m["free"] else "unusable")
            table.add_row(esc(m["node"]), esc(m["state"]), use, esc(m["verdict"] or "none"), age)
        console.print(table if st.members else f"spare pool {esc(st.reservation)}: empty")
        print_warnings(console, st.warnings)

    app.emit(st.to_dict(), render)
    return EXIT_WARNINGS if st.warnings else EXIT_OK
