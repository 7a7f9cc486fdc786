"""`fleetctl migrate JOBID NODE`: move a `fleetctl run` job's ranks off NODE to its standbys at the
next step boundary (fleetctl.recovery.migrate; docs/recovery.md)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import seconds


@click.command("migrate")
@common_options
@click.argument("job_id")
@click.argument("node")
@click.option("--store", metavar="HOST[:PORT]",
              help="The job's control store (default: the job's first node, port 29400 + job id mod 20000, "
                   "as `fleetctl run` chooses without MASTER_ADDR).")
@click.option("--reason", default="fleetctl migrate", show_default=True, help="Logged with the move.")
@click.option("--timeout", type=seconds(1, 3600), default=120.0, show_default=True, metavar="S",
              help="How long to wait for the ranks to move.")
@pass_app
def migrate_command(app: Application, job_id: str, node: str, store: str | None, reason: str,
                    timeout: float) -> int:
    """Move JOB_ID's training ranks on NODE to the job's standbys (`fleetctl run --standbys`) at
    their next step: no requeue, nothing lost. Refused when the job has fewer standbys than ranks
    on NODE (then `fleetctl spares swap` moves the whole job).

    \b
    Exit status: 0 moved; 3 not possible (no rank on NODE, no standby, store unreachable, timeout).

    \b
    Examples:
      fleetctl migrate 4242 gpu017
      fleetctl migrate 4242 gpu017 --store 10.0.0.1:29400 --reason 'lens: gray link' --format json
    """
    from fleetctl.errors import EXIT_OK, UsageError
    from fleetctl.nodeset import check_node_name
    from fleetctl.recovery.launch import BASE_PORT
    from fleetctl.recovery.migrate import connect, migrate
    from fleetctl.snapshot.registry import is_job_id

    if not is_job_id(job_id):
        raise UsageError(f"job id {job_id!r}: expected digits (or ARRAYJOB_TASK)")
    check_node_name(node)
    host, port = _store_address(app, job_id, store, BASE_PORT)
    result = migrate(connect(host, port), node, reason, timeout)
    doc = {"schema": "fleetctl.migrate/1", "job": job_id, "store": f"{host}:{port}", **result}
    if app.json:
        app.emit(doc)
    else:
        for rank, move in sorted(result["moved"].items()):
            click.echo(f"rank {rank}: {node} (task {move['from_slot']}) -> {move['to_node']} (task {move['to_slot']}), "
                       f"resumed after iteration {result['resume']}, {result['seconds']:.2f} s")
    return EXIT_OK


def _store_address(app: Application, job_id: str, store: str | None, base_port: int) -> tuple[str, int]:
    from fleetctl.recovery.launch import LaunchOptions, store_address
    from fleetctl.recovery.migrate import store_of_job

    if store:
        return store_address(LaunchOptions(store=store), {"SLURM_JOB_ID": job_id.split("_")[0]})
    return store_of_job(app.slurm_backend(), job_id, base_port)
