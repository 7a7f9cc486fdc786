"""`fleetctl hook prolog|epilog|healthcheck`: run by slurmd through the wrapper (fleetctl/audit/hook.sh).

The verdict is fleetctl.audit.hooks.run_hook's; this module logs it and prints it.
"""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.audit.hooks import DEFAULT_LEVEL, MAX_HOOK_BUDGET_S
from fleetctl.cli.params import seconds


def _run(app: Application, name: str, level: str, budget: float | None) -> int:
    from fleetctl.audit.hooks import judge_and_record

    verdict, line = judge_and_record(lambda: app.cluster, name, level, budget,
                                     warn=lambda text: click.echo(text, err=True))
    if app.json:
        app.emit(verdict.to_dict())
    else:
        click.echo(line)  # one plain line, without rich: a Prolog's every millisecond is a job's
    return verdict.exit_code


def _hook_command(name: str, default_level: str, doc: str) -> click.Command:
    @click.command(name, help=doc)
    @common_options
    @click.option("--level", type=click.Choice(["quick", "standard"]), default=default_level,
                  show_default=True)
    @click.option("--budget", type=seconds(0.5, MAX_HOOK_BUDGET_S), help="Hard time budget in seconds.")
    @pass_app
    def command(app: Application, level: str, budget: float | None) -> int:
        return _run(app, name, level, budget)

    return command


def _examples(name: str) -> str:
    return (f"\n\n\b\nExamples:\n  /etc/slurm/fleetctl/fleetctl-{name}   # as slurmd runs it (the wrapper)"
            f"\n  SLURMD_NODENAME=gpu017 fleetctl hook {name} --format json   # by hand, to see the verdict")


HELP = {
    "prolog": "Quick checks of this node before a job; exit 2 and drain on a definite hardware failure.",
    "epilog": "After a job: what went wrong during it (new Xids, ECC, flaps); drains on a definite "
              "failure, always exits 0 itself.",
    "healthcheck": "HealthCheckProgram: drain on a definite failure, resume a node fleetctl drained once "
                   "it passes.",
}
prolog, epilog, healthcheck = (_hook_command(name, DEFAULT_LEVEL[name], HELP[name] + _examples(name))
                               for name in ("prolog", "epilog", "healthcheck"))
