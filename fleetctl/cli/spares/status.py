"""`fleetctl spares status`: the pool's members, verdicts and use."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.spares.common import pool, print_warnings, state_dir_option
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("status")
@common_options
@state_dir_option(must_exist=True)
@click.option("--wide", is_flag=True, help="One row per member instead of members alike folded.")
@pass_app
def status(app: Application, state_dir: str | None, wide: bool) -> int:
    """Members, their last audit verdict and its age, free or in use. Members with the same state,
    use and verdict are one row (their node set, the range of their audits' ages); --wide for one
    row per member.

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
        for row in member_rows(st.members, wide):
            table.add_row(*row)
        console.print(table if st.members else f"spare pool {esc(st.reservation)}: empty")
        print_warnings(console, st.warnings)

    app.emit(st.to_dict(), render)
    return EXIT_WARNINGS if st.warnings else EXIT_OK


def member_rows(members: list[dict], wide: bool) -> list[tuple[str, ...]]:
    """Table rows (markup-safe): one per member, or one per (state, use, verdict) with the folded
    node set and its count, and the audits' ages as a range."""
    from fleetctl.nodeset import fold

    groups: dict[tuple, list[dict]] = {}
    for m in members:
        use = "in use" if m["in_use"] else ("free" if m["free"] else "unusable")
        key = (m["state"], use, m["verdict"] or "none")
        groups.setdefault((m["node"],) + key if wide else key, []).append(m)
    rows = []
    for key, group in groups.items():
        names = [m["node"] for m in group]
        ages = sorted(m["audit_age_s"] for m in group if m["audit_age_s"] is not None)
        age = "-" if not ages else (f"{ages[0]:.0f} s" if round(ages[0]) == round(ages[-1])
                                    else f"{ages[0]:.0f}-{ages[-1]:.0f} s")
        who = fold(names) + (f" ({len(names)})" if len(names) > 1 else "")
        rows.append((esc(who), *(esc(v) for v in key[-3:]), age))
    return rows
