"""`fleetctl run [OPTIONS] -- COMMAND...`: launch a training process that survives the loss of a
rank, one launcher per Slurm task (docs/recovery.md, "No rollback"). The work is
fleetctl.recovery.launch; the training loop uses fleetctl.recovery.resilient.Resilient."""

from __future__ import annotations

import shlex

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import FiniteFloatRange, seconds
from fleetctl.errors import UsageError


@click.command("run", context_settings={"allow_interspersed_args": False})
@common_options
@click.option("--standbys", type=click.IntRange(0, 100_000), default=0, show_default=True, metavar="K",
              help="The last K Slurm tasks stand by warm, to take a lost rank's place.")
@click.option("--store", metavar="HOST[:PORT]",
              help="The control store, served by task 0's launcher (default: MASTER_ADDR/MASTER_PORT, "
                   "else the job's first node and port 29400 + job id mod 20000).")
@click.option("--dead-after", type=seconds(0.5, 3600), default=5.0, show_default=True, metavar="S",
              help="A process without a heartbeat for S seconds is lost (frozen, or its node is gone).")
@click.option("--collective-timeout", type=seconds(1, 86_400), default=60.0, show_default=True, metavar="S",
              help="The process group's timeout: a collective stuck this long fails and the ranks restart.")
@click.option("--grace", type=seconds(1, 86_400), default=None, metavar="S",
              help="A rank that neither fails nor reports while the others wait this long is the hung one "
                   "(default: the collective timeout + 30 s).")
@click.option("--start-timeout", type=seconds(1, 86_400), default=600.0, show_default=True, metavar="S",
              help="Every training rank must have started within S seconds.")
@click.option("--hang-factor", type=FiniteFloatRange(1, 100), default=3.0, show_default=True, metavar="X",
              help="A hang: no iteration for X times the median iteration time + the floor; the rank still in "
                   "its own work while the others wait is lost and its rank goes to a standby.")
@click.option("--hang-floor", type=seconds(0, 86400), default=10.0, show_default=True, metavar="S")
@click.option("--events", metavar="FILE", envvar="FLEETCTL_RUN_EVENTS",
              help="lens's event log: task 0 writes the job's `hang` and `straggler` events there (as "
                   "`fleetctl job watch`) and, when the run ends for requeue, a `rank_lost` event on each "
                   "lost rank's node, for an act policy to swap the job (env FLEETCTL_RUN_EVENTS).")
@click.option("--requeue-wait", type=seconds(0, 3600), default=0.0, show_default=True, metavar="S",
              help="Then keep the job running up to S seconds, so that act's swap can requeue it.")
@click.option("--replenish", type=click.IntRange(0, 1024), default=0, show_default=True, metavar="N",
              help="When a standby takes a lost rank's place, task 0 submits a one-node Slurm job for a new "
                   "standby that joins the run (at most N over the run; 0: none).")
@click.option("--replenish-args", default="", metavar="ARGS",
              help="sbatch options for those jobs, e.g. \"--partition=gpu --reservation=standby --time=1-0\" "
                   "(split as a shell splits words; never run through one).")
@click.option("--join", metavar="HOST:PORT",
              help="Stand by for the running job whose control store is HOST:PORT, as its next slot "
                   "(what a --replenish job runs).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_app
def run_command(app: Application, command: tuple[str, ...], standbys: int, store: str | None,
                dead_after: float, collective_timeout: float, grace: float | None, start_timeout: float,
                hang_factor: float, hang_floor: float, events: str | None, requeue_wait: float, replenish: int,
                replenish_args: str, join: str | None) -> int:
    """Run COMMAND as one rank of a training job that goes on when a rank is lost: a standby takes
    its place with its state from a peer's memory; no requeue, no disk read, no new allocation.

    \b
    Run under srun, one task per launcher; N + K tasks give N training ranks and K standbys:
      sbatch -N5 --no-kill --wrap 'srun --no-kill fleetctl run --standbys 1 -- python train.py'
    The loop uses fleetctl.recovery.resilient.Resilient (docs/recovery.md).
    Exit status: 0 training finished (or this task's standby or lost rank was not needed);
    2 the run ended unfinished (no standby left: requeue; a rank's own error: abort); 3 error.

    \b
    Examples:
      fleetctl run --standbys 1 -- python train.py
      fleetctl run --standbys 2 --dead-after 10 --collective-timeout 120 -- python train.py --config big.yaml
      fleetctl run --store 10.0.0.1:29400 --format json -- python train.py
      fleetctl run --standbys 1 --replenish 4 --replenish-args "-p gpu --reservation=standby" -- python train.py
    """
    from fleetctl.recovery.control import Timing
    from fleetctl.recovery.launch import LaunchOptions, launch
    from fleetctl.recovery.signals import Thresholds

    if join and (standbys or store or replenish):
        raise UsageError("--join stands by for another job's run: it takes no --standbys, --store or --replenish")
    try:
        sbatch_args = shlex.split(replenish_args)
    except ValueError as exc:
        raise UsageError(f"--replenish-args {replenish_args[:80]!r}: {exc}") from None
    timing = Timing(dead_after_s=dead_after, grace_s=grace or collective_timeout + 30.0, start_s=start_timeout)
    result = launch(list(command), LaunchOptions(standbys, store, timing, collective_timeout, events, requeue_wait,
                                                 Thresholds(hang_factor=hang_factor, hang_floor_s=hang_floor),
                                                 join, replenish, sbatch_args))
    if app.json:
        app.emit({"schema": "fleetctl.run/1", **result.to_dict()})
    elif result.exit_code:  # the generations were logged as they happened
        click.echo(f"fleetctl run: slot {result.slot}: the run ended unfinished ({result.end or 'unknown'})",
                   err=True)
    return result.exit_code
