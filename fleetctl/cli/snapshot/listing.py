"""`fleetctl snapshot list [TARGET]`: a job's snapshots, or the jobs in the registry."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.snapshot.common import registry_option, resolve_target, size
from fleetctl.errors import EXIT_OK

STATE_STYLE = {"ok": "green", "bad": "red", "partial": "yellow"}


@click.command("list")
@common_options
@registry_option
@click.argument("target", required=False)
@click.option("--verify", "digests", is_flag=True, help="Also check every file's sha256 (reads all data).")
@pass_app
def list_command(app: Application, target: str | None, registry: str | None, digests: bool) -> int:
    """Snapshots of a job (JOBID or DIR); without TARGET, the jobs in the registry.

    \b
    Examples:
      fleetctl snapshot list                  # every job in the registry
      fleetctl snapshot list 4242 --verify    # its snapshots, every digest checked
    """
    from fleetctl.snapshot import catalog
    from fleetctl.snapshot.registry import entries

    if target is None:
        data = {"jobs": entries(registry)}
        app.emit(data, lambda console: _render_jobs(console, data["jobs"]))
        return EXIT_OK
    root, job_id = resolve_target(app, target, registry)
    data = {"job_id": job_id, **catalog.describe(root, digests=digests)}
    app.emit(data, lambda console: _render_snapshots(app, console, root, data))
    return EXIT_OK


def _render_jobs(console, jobs: list[dict]) -> None:
    from rich.table import Table

    table = Table("job", "directory", "problem", box=None)
    for row in jobs:
        table.add_row(esc(row["job_id"]), esc(row["directory"] or "-"), esc(row["problem"] or ""))
    console.print(table if jobs else "no job in the snapshot registry")


def _render_snapshots(app: Application, console, root, data: dict) -> None:
    from rich.table import Table

    table = Table("step", "state", "size", "reason", "latest", "problems", box=None, title=esc(root))
    for row in data["snapshots"]:
        style = STATE_STYLE[row["state"]]
        table.add_row(str(row["step"]), f"[{style}]{row['state']}[/{style}]", size(row["bytes"]),
                      esc(row["reason"] or ""), "LATEST" if row["latest"] else "",
                      esc("; ".join(row["problems"]), 2000))
    console.print(table if data["snapshots"] else f"no snapshot in {esc(root)}")
    if data["latest_problem"]:
        app.err_console.print(f"[yellow]warning:[/yellow] {esc(data['latest_problem'])}")
