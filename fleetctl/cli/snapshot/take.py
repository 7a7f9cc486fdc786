"""`fleetctl snapshot take TARGET`: ask a job for a snapshot at its next iteration boundary."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import seconds
from fleetctl.cli.snapshot.common import registry_option, resolve_target
from fleetctl.errors import EXIT_OK

MAX_WAIT_S = 86_400.0


@click.command("take")
@common_options
@registry_option
@click.argument("target")
@click.option("--wait", is_flag=True, help="Wait until the snapshot is published (LATEST names it).")
@click.option("--timeout", type=seconds(0.1, MAX_WAIT_S), default=600.0, show_default=True,
              metavar="SECONDS", help="How long --wait waits.")
@click.option("--drain", is_flag=True, help="Mark the request as taken before a planned drain.")
@click.option("--signal", "send_signal", is_flag=True,
              help="Also send SIGUSR2 to the job's steps (scancel --signal=USR2): only for jobs whose "
                   "every step runs the Snapshotter, since USR2 kills a process that does not catch it.")
@click.option("--no-request", is_flag=True,
              help="With --signal: write no request file (a directory this host cannot write, e.g. NFS "
                   "with root_squash); --wait then waits for any newer snapshot.")
@pass_app
def take(app: Application, target: str, registry: str | None, wait: bool, timeout: float, drain: bool,
         send_signal: bool, no_request: bool) -> int:
    """Ask the job (JOBID or snapshot DIR) for a snapshot at its next iteration boundary.

    \b
    Examples:
      fleetctl snapshot take 4242 --wait          # request, then wait until it is published
      fleetctl snapshot take /shared/ckpt/run7    # a directory instead of a job id
      fleetctl snapshot take 4242 --signal        # also SIGUSR2 to every step of the job
    """
    from fleetctl.snapshot.requests import request_snapshot

    from fleetctl.snapshot import SnapshotError

    root, job_id = resolve_target(app, target, registry)
    if send_signal and job_id is None:
        raise SnapshotError("--signal needs a job id, not a directory")
    backend = app.slurm_backend() if send_signal else None  # before any side effect
    data = request_snapshot(root, reason="drain" if drain else "request", job_id=job_id, backend=backend,
                            write=not no_request, wait_s=timeout if wait else None)
    request_id = data["request"]
    app.info(f"requested a snapshot of {job_id or root}" + (f" (request {request_id})" if request_id else " (signal)"))

    def render(console):
        if data["snapshot"]:
            console.print(f"snapshot step {data['snapshot']['step']} published: {esc(data['snapshot']['path'])}")
        elif request_id:
            console.print(f"request {esc(request_id)} written to {esc(root)}")
        else:
            console.print(f"SIGUSR2 sent to the steps of job {esc(job_id)}")

    app.emit(data, render)
    return EXIT_OK
