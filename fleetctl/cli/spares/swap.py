"""`fleetctl spares swap JOB_ID BAD_NODE`: move a job off a bad node onto a spare."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import seconds
from fleetctl.cli.spares.common import pool, print_warnings, state_dir_option
from fleetctl.errors import EXIT_ERROR, EXIT_OK, EXIT_WARNINGS


@click.command("swap")
@common_options
@state_dir_option
@click.argument("job_id")
@click.argument("bad_node")
@click.option("--dry-run", is_flag=True, help="Show every step; do none.")
@click.option("--wait", "wait_s", type=seconds(0.0, 86_400.0), default=0.0, metavar="SECONDS",
              help="Wait up to this long for the job to run again, and say where.")
@pass_app
def swap(app: Application, state_dir, job_id: str, bad_node: str, dry_run: bool, wait_s: float) -> int:
    """Drain BAD_NODE, release a spare, requeue JOB_ID excluding BAD_NODE (it restores its snapshot).

    \b
    Examples:
      fleetctl spares swap 4242 node7 --dry-run
      fleetctl spares swap 4242 node7 --wait 120
    """
    from fleetctl.nodeset import check_node_name
    from fleetctl.spares.swap import plan_swap, run_swap, wait_running

    check_node_name(bad_node, what="BAD_NODE")
    backend, spare_pool = pool(app, state_dir)
    plan = run_swap(plan_swap(backend, spare_pool, job_id, bad_node, dry_run=dry_run), backend, spare_pool)
    if wait_s > 0 and not dry_run and plan.ok:
        plan.running_on = wait_running(backend, job_id, wait_s)

    def render(console):
        for s in plan.steps:
            console.print(f"{s.status:8} {s.step:8} {esc(s.detail)}" + (f" -> {esc(s.result)}" if s.result else ""))
        if plan.running_on:
            console.print(f"job {job_id} running on {esc(','.join(plan.running_on))}")
        print_warnings(console, plan.warnings)

    app.emit(plan.to_dict(), render)
    if not plan.ok:
        return EXIT_ERROR
    return EXIT_WARNINGS if plan.warnings else EXIT_OK
