"""`fleetctl snapshot verify TARGET`: check snapshots end to end."""

from __future__ import annotations

from pathlib import Path

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.snapshot.common import registry_option, resolve_target, size
from fleetctl.errors import EXIT_FAILURES, EXIT_OK


@click.command("verify")
@common_options
@registry_option
@click.argument("target")
@pass_app
def verify(app: Application, target: str, registry: str | None) -> int:
    """Check snapshots end to end: manifest, every shard present, sizes and sha256 digests.

    TARGET is a job id, a snapshot directory (every snapshot in it) or one step_N directory.
    Exit 2 when a snapshot fails (the message names what is wrong) or there is none.

    \b
    Examples:
      fleetctl snapshot verify 4242
      fleetctl snapshot verify /shared/ckpt/run7/step_1200
    """
    from fleetctl.snapshot import catalog
    from fleetctl.snapshot.registry import is_job_id

    path = Path(target).expanduser()
    verdicts = None if is_job_id(target) else catalog.single_snapshot(path)
    single = verdicts is not None
    if single:
        root, job_id, chosen = path.parent, None, None
    else:
        root, job_id = resolve_target(app, target, registry)
        verdicts, chosen = catalog.verify_all(root)
    failed = [v for v in verdicts if not v.ok]
    data = {"job_id": job_id, "directory": str(root), "ok": bool(verdicts) and not failed,
            "restore_would_use": chosen, "snapshots": [v.to_dict() for v in verdicts]}

    def render(console):
        if not verdicts:
            console.print(f"no committed snapshot in {esc(root)}")
        for v in verdicts:
            if v.ok:
                console.print(f"[green]ok[/green]   {esc(v.path)} ({size(v.bytes)})")
            else:
                console.print(f"[red]FAIL[/red] {esc(v.path)}: {esc(v.reason, 2000)}")
        if not single and verdicts:
            console.print(f"restore would use step {chosen}" if chosen is not None else
                          "restore would find no usable snapshot")

    app.emit(data, render)
    return EXIT_OK if data["ok"] else EXIT_FAILURES
