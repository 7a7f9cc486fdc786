"""`fleetctl snapshot interval [TARGET]`: Young's and Daly's optimum snapshot intervals."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.cli.snapshot.common import duration, registry_option, resolve_target
from fleetctl.errors import EXIT_OK


@click.command("interval")
@common_options
@registry_option
@click.argument("target", required=False)
@click.option("--cost", type=FiniteFloatRange(1e-6, 86_400.0), metavar="SECONDS",
              help="Snapshot cost (blocking time); default: the job's measured cost, else 10 s.")
@click.option("--mtbf-hours", type=FiniteFloatRange(1e-3, 1e7), metavar="H", help="The job's MTBF.")
@click.option("--node-mtbf-hours", type=FiniteFloatRange(1e-3, 1e8), metavar="H",
              help="One node's MTBF (default 6300 h, from Llama 3's published failure counts).")
@click.option("--nodes", type=click.IntRange(1, 1_000_000), default=None, help="Nodes the job spans.")
@click.option("--restart", type=FiniteFloatRange(0.0, 86_400.0), default=0.0, metavar="SECONDS",
              help="Restart time R, for Daly's formula.")
@pass_app
def interval(app: Application, target: str | None, registry: str | None, **inputs) -> int:
    """The optimum snapshot interval: Young sqrt(2 C M) and Daly sqrt(2 C (R + M)), with their inputs.

    \b
    Examples:
      fleetctl snapshot interval 4242                   # from the job's measured cost
      fleetctl snapshot interval --cost 8 --nodes 256   # before the job exists
    """
    from fleetctl.snapshot.interval import advise
    from fleetctl.snapshot.layout import read_status

    status = {}
    if target is not None:
        root, _ = resolve_target(app, target, registry)
        status = read_status(root) or {}
    data = advise(status, **inputs)
    i = data["inputs"]

    def render(console):
        console.print(f"Young  {duration(data['young_s'])}  = sqrt(2 x {i['cost_s']:g} s x {i['mtbf_s']:g} s)")
        console.print(f"Daly   {duration(data['daly_s'])}  = sqrt(2 x {i['cost_s']:g} s x "
                      f"({i['restart_s']:g} s + {i['mtbf_s']:g} s))")
        console.print(f"cost: {esc(i['cost_source'])}; MTBF: {esc(i['mtbf_source'])}")

    app.emit(data, render)
    return EXIT_OK
