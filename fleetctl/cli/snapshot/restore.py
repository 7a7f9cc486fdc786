"""`fleetctl snapshot restore JOB_ID`: requeue a job so that it restores its newest verified snapshot."""

from __future__ import annotations

import os

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.snapshot.common import registry_option, resolve_target, slurm_owner
from fleetctl.errors import EXIT_OK


@click.command("restore")
@common_options
@registry_option
@click.argument("job_id")
@click.option("--dry-run", is_flag=True, help="Say which snapshot the job would restore; requeue nothing.")
@pass_app
def restore(app: Application, job_id: str, registry: str | None, dry_run: bool) -> int:
    """Requeue JOB_ID (scontrol requeue) so that its Snapshotter restores the newest verified snapshot.

    \b
    Examples:
      fleetctl snapshot restore 4242 --dry-run    # which snapshot, and which newer ones are passed over
      fleetctl snapshot restore 4242
    """
    from fleetctl.snapshot import SnapshotError, catalog
    from fleetctl.snapshot.registry import is_job_id

    if not is_job_id(job_id):
        raise SnapshotError(f"{job_id[:40]!r} is not a Slurm job id")
    root, _ = resolve_target(app, job_id, registry)
    owner = os.geteuid() if os.geteuid() != 0 else slurm_owner(app, job_id)
    choice = catalog.choose(root, owner=owner)  # what the job's own restore will choose
    if choice.step is None:
        why = "; ".join(f"step {s['step']}: {s['reason']}" for s in choice.skipped[:4])
        raise SnapshotError(f"job {job_id}: no verified snapshot in {root}" + (f" ({why})" if why else ""),
                            hint="requeueing now would restart the job from scratch: "
                                 "`scontrol requeue` it yourself if that is meant")
    if not dry_run:
        app.slurm_backend().requeue(job_id)
    data = {"job_id": job_id, "directory": str(root), "requeued": not dry_run, **choice.to_dict()}

    def render(console):
        for skipped in choice.skipped:
            app.err_console.print(f"[yellow]skipping[/yellow] step {skipped['step']}: "
                                  f"{esc(skipped['reason'], 2000)}")
        verb = "would restore" if dry_run else "requeued; it will restore"
        console.print(f"job {job_id} {verb} step {choice.step} ({esc(choice.path)})")

    app.emit(data, render)
    return EXIT_OK
