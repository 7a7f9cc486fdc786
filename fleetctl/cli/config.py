"""`fleetctl config check|show`: validate a site file and show what fleetctl makes of it."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app


@click.group("config")
def config() -> None:
    """Validate and show the site configuration."""


@config.command("check")
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
    return 0


@config.command("show")
@common_options
@pass_app
def show(app: Application) -> int:
    """Print the site file in use with every default filled in (JSON)."""
    import json

    site = app.site
    click.echo(json.dumps({"file": site.source, **site.data}, indent=2))
    return 0
