"""`fleetctl act run|log|undo`: the Detect -> Act loop (docs/act.md).

`act run` is a dry run (every decision logged as `dry-run`) until the site file sets `act.enabled`;
`--dry-run` forces one. Exit codes: 0 ran; 1 something was refused or failed; 3 fleetctl could not
run (site file, Slurm, an unreadable input).
"""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app, stop_on_signals
from fleetctl.cli.params import seconds
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


def _config(app: Application, state_dir: str | None):
    from fleetctl.act.config import ActConfig

    return ActConfig.from_site(app.site, **({"state_dir": state_dir} if state_dir else {}))


def _state_dir_option(func):
    return click.option("--state-dir", metavar="DIR", default=None,
                        help="Action log and cursors (default: act.state_dir).")(func)


@click.group("act")
def act() -> None:
    """Detections to actions, by the site's policies, with a budget, a log and undo."""


@act.command("run")
@common_options
@_state_dir_option
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
def run(app: Application, state_dir, reports, events, hooks, audit_nodes, once, duration, dry_run,
        spares_state_dir, registry) -> int:
    """Consume audit reports, lens events and hook drains; decide and act by policy."""
    from fleetctl.act.engine import Engine
    from fleetctl.act.policies import policies_from_site
    from fleetctl.act.run import Runner, Sources
    from fleetctl.slurm import backend_for_site
    from fleetctl.spares import SparePool, SparesConfig

    site = app.site
    config = _config(app, state_dir)
    policies = policies_from_site(site)
    backend = backend_for_site(site)
    pool = SparePool(backend, SparesConfig.from_site(site, spares_state_dir))
    engine = Engine(backend, policies, config, pool=pool, dry_run=dry_run or not config.enabled,
                    registry=registry)
    recovered = engine.recover()
    audit = None
    if audit_nodes:
        from fleetctl.audit import build_report, collect
        from fleetctl.audit.runner import site_nodes
        import time

        nodes = site_nodes(site, audit_nodes)

        def audit():
            started = time.time()
            return build_report(site, collect(site, nodes, "quick", since=started - 300), level="quick",
                                started=started).to_dict()

    sources = Sources(reports=list(reports), events=events if events is not None else config.lens_events,
                      hooks=hooks, audit=audit)
    runner = Runner(engine, sources, config.state_dir)
    decisions: list[dict] = []
    if once:
        decisions = runner.once()
    else:
        def show(got):
            decisions.extend(got)
            if not app.json:
                for rec in got:
                    app.console.print(_line(rec))
        runner.loop(duration, config.poll_s, show, stop=stop_on_signals())
    data = {"dry_run": engine.dry_run, "recovered": recovered, "decisions": decisions,
            "skipped_event_lines": runner.skipped_lines, "log": str(engine.log.path)}

    def render(console):
        if engine.dry_run:
            console.print("[dim]dry run: act.enabled is not set (or --dry-run); nothing was changed[/dim]")
        for rec in recovered:
            console.print(f"recovered {esc(rec['id'])}: {esc(rec['phase'])} ({esc(rec['why'], 2000)})")
        if once:
            for rec in decisions:
                console.print(_line(rec))
        if not decisions:
            console.print("no decisions")

    app.emit(data, render)
    bad = [r for r in decisions if r["phase"] in ("refused", "failed")]
    return EXIT_WARNINGS if bad else EXIT_OK


def _line(rec: dict) -> str:
    """One decision as a markup-safe line (codes, policies and reasons come from files and nodes)."""
    det = rec.get("detection") or {}
    return (f"{esc(rec['phase']):9} {esc(rec['action']):8} {esc(rec['id'])}  {esc(det.get('code'))} "
            f"\\[{esc(rec.get('policy'))}]: {esc(rec.get('why', ''), 2000)}")


@act.command("log")
@common_options
@_state_dir_option
@click.option("--last", type=click.IntRange(1, 100000), default=50, show_default=True, help="Actions shown.")
@pass_app
def log_cmd(app: Application, state_dir, last: int) -> int:
    """Every action's current phase (from the action log)."""
    from fleetctl.act.actionlog import ActionLog

    view = sorted(ActionLog(_config(app, state_dir).state_dir).current().values(), key=lambda r: r["time"])[-last:]
    app.emit({"actions": view}, lambda console: [console.print(_line(r)) for r in view] or
             console.print("no actions logged"))
    return EXIT_OK


@act.command("undo")
@common_options
@_state_dir_option
@click.argument("action_id")
@click.option("--dry-run", is_flag=True, help="Say what the undo would do.")
@click.option("--spares-state-dir", metavar="DIR", default=None, help="The spare pool's state.")
@pass_app
def undo_cmd(app: Application, state_dir, action_id: str, dry_run: bool, spares_state_dir) -> int:
    """Reverse one done action where it can be done safely (drain, swap, resume)."""
    from fleetctl.act.actionlog import ActionLog
    from fleetctl.act.undo import undo
    from fleetctl.slurm import backend_for_site
    from fleetctl.spares import SparePool, SparesConfig

    backend = backend_for_site(app.site)
    pool = SparePool(backend, SparesConfig.from_site(app.site, spares_state_dir))
    out = undo(ActionLog(_config(app, state_dir).state_dir), action_id, backend, pool, dry_run=dry_run)
    app.emit(out, lambda console: console.print(f"{'would ' if dry_run else 'undone: '}"
                                                f"{esc(out.get('would') or out.get('why'), 2000)}"))
    return EXIT_OK
