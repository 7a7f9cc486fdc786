"""`fleetctl lens run [NODESET]`: start the coordinator."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lens.common import state_dir_option
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.cli.signals import stop_on_signals
from fleetctl.errors import EXIT_OK


@click.command("run")
@common_options
@click.argument("nodeset", required=False)
@click.option("--foreground", is_flag=True, help="Stay in the foreground (no pid file daemon).")
@click.option("--rate", type=FiniteFloatRange(0.1, 1000), default=None,
              help="Probes per second per NIC pair (default: lens.rate, else the probe budget's).")
@click.option("--window", "window_s", type=FiniteFloatRange(0.2, 60), default=None,
              help="Analysis window in seconds (default: lens.window_s, 1).")
@click.option("--transport", type=click.Choice(["ssh", "srun", "local"]), default=None,
              help="How agents are started (default: the site's access.transport).")
@click.option("--agents", type=click.Choice(["started", "registered"]), default=None,
              help="started: the coordinator starts its agents over the transport; registered: "
                   "node-resident agents (`fleetctl lens agent`) connect to it (default: lens.agents).")
@click.option("--listen", metavar="ADDRESS:PORT", default=None,
              help="Where registered agents connect (default: lens.listen, 0.0.0.0:61250).")
@click.option("--key-file", metavar="PATH", default=None,
              help="The key registered agents share (default: lens.key_file).")
@click.option("--trace-via", type=click.Choice(["agents", "transport"]), default=None,
              help="With registered agents, who traces the flows' paths when lens plans: the "
                   "agents themselves (no ssh to the nodes) or the transport (default: "
                   "lens.trace_via, agents).")
@click.option("--shard", metavar="NAME", default=None,
              help="Run as that shard of the site (`fleetctl lens shards`): its nodes, state in "
                   "<lens.state_dir>/NAME, a document per window for `lens merge`.")
@state_dir_option
@pass_app
def run_cmd(app: Application, **options) -> int:
    """Start the coordinator over NODESET (default: every node of the site file).

    \b
    Examples:
      fleetctl lens run                      # daemonised, every node, the site's settings
      fleetctl lens run 'node[1-64]' --foreground --window 2
      fleetctl lens run --agents registered --listen 10.0.0.5:61250
      fleetctl lens run --foreground --shard shard-3   # one shard (lens.shard_max_hosts)
    """
    from fleetctl.extras import require
    from fleetctl.lens.service import RunRequest, start

    require("mesh", "lens run")
    started = start(app.cluster, RunRequest(**options), stop_on_signals())
    if started is not None:
        app.emit(started, lambda c: c.print(f"lens coordinator started (pid {started['pid']}); log "
                                            f"{started['log']}", markup=False))
    return EXIT_OK
