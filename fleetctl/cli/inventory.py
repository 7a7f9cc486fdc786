"""`fleetctl inventory [NODESET]`: nodes with class, Slurm state, reason, GPUs and NICs; or the links
(`--links`) or switches (`--switches`) of the fabric. Exit code 1 when there are warnings (Slurm not
reachable, nodes only in Slurm or only in the site file)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("inventory")
@common_options
@click.argument("nodeset", required=False)
@click.option("--links", "view", flag_value="links", help="Show the links (of the selected nodes).")
@click.option("--switches", "view", flag_value="switches", help="Show the switches.")
@click.option("--no-slurm", is_flag=True, help="Do not ask Slurm; show the site file's view only.")
@click.option("--wide", is_flag=True, help="One row per node instead of nodes with identical rows folded.")
@pass_app
def inventory(app: Application, nodeset: str | None, view: str | None, no_slurm: bool, wide: bool) -> int:
    """Nodes, NICs, GPUs, switches and links, with each node's Slurm state and drain reason.

    Nodes whose rows are identical (class, state, reason, GPUs, NICs and their switches) share one
    row under their folded node set; --wide gives every node its own.

    \b
    Examples:
      fleetctl inventory 'gpu[001-016]'
      fleetctl inventory --links gpu007
      fleetctl inventory --format json | jq '.nodes[] | select(.slurm.drained)'
    """
    from fleetctl.inventory import build_inventory
    from fleetctl.nodeset import parse_nodeset

    wanted = parse_nodeset(app.nodes(nodeset)) if nodeset else None
    cluster = app.cluster
    slurm = None
    if not no_slurm:
        from fleetctl.slurm import backend_for_site

        slurm = backend_for_site(cluster, timeout=15.0)
    inv = build_inventory(cluster, wanted, slurm)
    data = inv.to_dict()
    if view == "links":
        data = {"cluster": inv.cluster, "warnings": inv.warnings, "links": data["links"]}
    elif view == "switches":
        data = {"cluster": inv.cluster, "warnings": inv.warnings, "switches": data["switches"]}

    def render(console):
        from rich.table import Table

        if view is None:
            table = _nodes_table(inv, Table, wide)
        else:
            table = {"links": _links_table, "switches": _switches_table}[view](inv, Table)
        console.print(table)
        for warning in inv.warnings:
            app.err_console.print(f"[yellow]warning:[/yellow] {warning}")

    app.emit(data, render)
    return EXIT_WARNINGS if inv.warnings else EXIT_OK


def _state_style(node) -> str:
    if node.slurm is None:
        return "dim"
    if node.slurm.drained or not node.slurm.available:
        return "red" if not node.slurm.ours else "yellow"
    return "green"


def _nodes_table(inv, Table, wide: bool):
    from fleetctl.nodeset import fold

    title = f"{inv.cluster}: {len(inv.nodes)} nodes"
    with_state = [n.slurm for n in inv.nodes.values() if n.slurm is not None]
    if with_state:
        drained = [s for s in with_state if s.drained]
        title += (f", {len(with_state) - sum(not s.available for s in with_state)} available, "
                  f"{len(drained)} drained ({sum(s.ours for s in drained)} by fleetctl)")
    table = Table(title=title, title_justify="left")
    for col in ("node", "class", "slurm state", "reason", "GPUs", "NICs"):
        table.add_column(col, overflow="fold")
    rows: dict[tuple, list[str]] = {}
    for node in inv.nodes.values():
        row = _node_row(node)
        rows.setdefault((node.name,) + row if wide else row, []).append(node.name)
    for row, names in rows.items():
        who = fold(names) + (f" ({len(names)})" if len(names) > 1 else "")
        table.add_row(_escape(who), *row[-5:])
    return table


def _node_row(node) -> tuple[str, ...]:
    """A node's row without its name: class, state, reason, GPUs, NICs."""
    if node.slurm is not None:
        state = f"[{_state_style(node)}]{node.slurm.state.lower()}[/]"
        reason = _escape(node.slurm.reason)
        if reason and node.slurm.reason_user:
            reason += f" [dim]({node.slurm.reason_user} {node.slurm.reason_time})[/dim]"
    else:
        state = "[dim]not in Slurm[/dim]" if node.in_slurm is False else "[dim]?[/dim]"
        reason = ""
    gpus = f"{node.gpus.count} x {node.gpus.model}" if node.gpus.model else str(node.gpus.count)
    nics = ", ".join(f"{n.name}" + (f"->{'/'.join(n.switches)}" if n.switches else "") for n in node.nics)
    cls = node.node_class or "[red]not in site file[/red]"
    return cls, state, reason, gpus if node.in_site else "", nics


def _links_table(inv, Table):
    table = Table(title=f"{inv.cluster}: {len(inv.links)} links", title_justify="left")
    for col in ("link", "a", "b", "rate Gb/s", "addresses"):
        table.add_column(col, overflow="fold")
    for link in inv.links.values():
        addrs = " / ".join(a for a in (link.a_address, link.b_address) if a)
        table.add_row(link.id, link.a, link.b, f"{link.rate_gbps:g}" if link.rate_gbps else "", addrs)
    return table


def _switches_table(inv, Table):
    table = Table(title=f"{inv.cluster}: {len(inv.switches)} switches", title_justify="left")
    for col in ("switch", "tier", "model", "address", "links", "neighbours"):
        table.add_column(col, overflow="fold")
    for sw in inv.switches.values():
        neighbours = sw.neighbours if len(sw.neighbours) <= 6 else sw.neighbours[:6] + ["..."]
        table.add_row(sw.id, str(sw.tier), sw.model, sw.address, str(len(sw.links)),
                      ", ".join(neighbours))
    return table


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
