"""`fleetctl config check [PATH]`: validate a site file against the schema."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.errors import EXIT_OK, ConfigError


@click.command("check")
@common_options
@click.argument("path", required=False)
@pass_app
def check(app: Application, path: str | None) -> int:
    """Validate a site file (default: the one in use): the schema, then every check the commands
    make when they read their sections (the Prolog's payload arguments, act's policies, lens, ...).
    Exit 3 when anything would be refused at run time.

    \b
    Examples:
      fleetctl config check /etc/fleetctl/site.toml
      fleetctl config check --format json        # the site file in use (FLEETCTL_SITE)
    """
    from fleetctl.config import load_site
    from fleetctl.sitecheck import check_site

    cluster = load_site(path or app.site_file())
    notes: list[str] = []
    problems = check_site(cluster, notes)
    if problems:
        first = problems[0]
        first["message"] = first["message"].removeprefix(f"{cluster.source}: ")
        more = f" (and {len(problems) - 1} more: {'; '.join(p['section'] for p in problems[1:])})" \
            if len(problems) > 1 else ""
        raise ConfigError(f"[{first['section']}] {first['message']}{more}", path=cluster.source,
                          hint="every command that reads this section refuses it the same way")
    summary = {
        "file": cluster.source, "cluster": cluster.name, "valid": True,
        "nodes": len(cluster.nodes), "node_classes": [c.name for c in cluster.node_classes],
        "switches": len(cluster.switches), "links": len(cluster.links), "not_checked": notes,
    }

    def render(console):
        console.print(f"[green]ok[/green] {esc(cluster.source)}: cluster {esc(repr(cluster.name))}, {summary['nodes']} nodes "
                      f"in {len(cluster.node_classes)} classes, {summary['switches']} switches, "
                      f"{summary['links']} links")
        for note in notes:
            console.print(f"[cyan]note[/cyan] {esc(note)}", markup=True, highlight=False)

    app.emit(summary, render)
    return EXIT_OK
