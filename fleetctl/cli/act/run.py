"""`fleetctl act run`: consume audit reports, lens events and hook drains; decide and act by policy."""

from __future__ import annotations

import click

from fleetctl.cli.act.common import line, state_dir_option
from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import seconds
from fleetctl.cli.signals import stop_on_signals
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("run")
@common_options
@state_dir_option
@click.option("--report", "reports", multiple=True, metavar="FILE",
              help="An audit report (fleetctl audit --format json) to act on; repeatable.")
@click.option("--events", metavar="PATH", default=None, help="Lens event log (default: act.lens_events).")
@click.option("--hooks", is_flag=True, help="Act on nodes fleetctl's Slurm hooks drained (move their jobs).")
@click.option("--audit", "audit_nodes", metavar="NODESET", default=None,
              help="Also audit these nodes (quick level) at every pass.")
@click.option("--once", is_flag=True, help="One pass over the inputs, then exit.")
@click.option("--duration", type=seconds(0.0, 366 * 86_400.0), default=None, metavar="SECONDS",
              help="Stop after this long (default: until SIGTERM or SIGINT).")
@click.option("--dry-run", is_flag=True, help="Decide and log, act on nothing (the default until act.enabled).")
@click.option("--spares-state-dir", metavar="DIR", default=None, help="The spare pool's state (spares.state_dir).")
@click.option("--registry", metavar="DIR", default=None, help="Snapshot registry (FLEETCTL_SNAPSHOT_REGISTRY).")
@pass_app
def run(app: Application, once: bool, duration: float | None, **options) -> int:
    """Consume audit reports, lens events and hook drains; decide and act by policy.

    \b
    Examples:
      fleetctl act run --once --report audit.json --dry-run   # what would be done, nothing changed
      fleetctl act run --hooks                                # the daemon (systemd unit): until SIGTERM
    """
    from fleetctl.act.run import RunOptions, start

    runner, recovered = start(app.cluster, RunOptions(**options))
    engine = runner.engine
    decisions: list[dict] = []
    if once:
        decisions = runner.once()
    else:
        def show(got):
            decisions.extend(got)
            if not app.json:
                for rec in got:
                    app.console.print(line(rec))
        runner.loop(duration, engine.config.poll_s, show, stop=stop_on_signals())
    data = {"dry_run": engine.dry_run, "recovered": recovered, "decisions": decisions,
            "skipped_event_lines": runner.skipped_lines, "log": str(engine.log.path)}

    def render(console):
        if engine.dry_run:
            console.print("[dim]dry run: act.enabled is not set (or --dry-run); nothing was changed[/dim]")
        for rec in recovered:
            console.print(f"recovered {esc(rec['id'])}: {esc(rec['phase'])} ({esc(rec['why'], 2000)})")
        for rec in decisions if once else ():
            console.print(line(rec))
        if not decisions:
            console.print("no decisions")

    app.emit(data, render)
    bad = [r for r in decisions if r["phase"] in ("refused", "failed")]
    return EXIT_WARNINGS if bad else EXIT_OK
