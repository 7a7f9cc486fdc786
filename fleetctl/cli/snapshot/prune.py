"""`fleetctl snapshot prune TARGET --keep N`: retention by hand."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.snapshot.common import registry_option, resolve_target
from fleetctl.errors import EXIT_OK


@click.command("prune")
@common_options
@registry_option
@click.argument("target")
@click.option("--keep", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Committed snapshots to keep (LATEST's and the newest that verifies are always kept).")
@click.option("--dry-run", is_flag=True, help="List what would be removed.")
@pass_app
def prune(app: Application, target: str, registry: str | None, keep: int, dry_run: bool) -> int:
    """Remove old snapshots beyond --keep and leftovers of interrupted writes.

    \b
    Examples:
      fleetctl snapshot prune 4242 --keep 2 --dry-run
    """
    from fleetctl.snapshot import catalog

    root, job_id = resolve_target(app, target, registry)
    plan = catalog.prune_plan(root, keep)
    for entry in plan if not dry_run else ():
        catalog.remove(entry)
    data = {"job_id": job_id, "directory": str(root), "keep": keep, "dry_run": dry_run,
            "removed": [str(e.path) for e in plan]}

    def render(console):
        verb = "would remove" if dry_run else "removed"
        for path in data["removed"]:
            console.print(f"{verb} {esc(path)}")
        if not plan:
            console.print("nothing to prune")

    app.emit(data, render)
    return EXIT_OK
