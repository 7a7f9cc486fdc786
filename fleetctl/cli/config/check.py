"""`fleetctl config check [PATH]`: validate a site file against the schema."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_OK


@click.command("check")
@common_options
@click.argument("path", required=False)
@pass_app
def check(app: Application, path: str | None) -> int:
    """Validate a site file (default: the one in use) against the schema."""
    from fleetctl.config import load_site

    site = load_site(path or app.site_file())
    summary = {
        "file": site.source, "cluster": site.name, "valid": True,
        "nodes": len(site.nodes), "node_classes": [c.name for c in site.node_classes],
        "switches": len(site.switches), "links": len(site.links),
    }

    def render(console):
        console.print(f"[green]ok[/green] {site.source}: cluster {site.name!r}, {summary['nodes']} nodes "
                      f"in {len(site.node_classes)} classes, {summary['switches']} switches, "
                      f"{summary['links']} links")

    app.emit(summary, render)
    return EXIT_OK
