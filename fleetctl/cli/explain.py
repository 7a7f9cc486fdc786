"""`fleetctl explain FINDING|EVENT|NODE|JOBID`: a plain-language account from the evidence (docs/act.md)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.errors import EXIT_OK


@click.command("explain")
@common_options
@click.argument("target")
@click.option("--report", metavar="FILE", default=None,
              help="Audit report to explain findings from (default: the last one act consumed).")
@click.option("--events", metavar="PATH", default=None, help="Lens event log (default: act.lens_events).")
@click.option("--state-dir", metavar="DIR", default=None, type=click.Path(exists=True, file_okay=False),
              help="act's state (default: act.state_dir).")
@click.option("--no-slurm", is_flag=True, help="Do not ask Slurm (node states, jobs).")
@pass_app
def explain(app: Application, target: str, report, events, state_dir, no_slurm: bool) -> int:
    """What is wrong, where, since when, how sure and why, which jobs, what fleetctl did, what next.

    TARGET: NODE:CODE (a finding, e.g. node2:xid.79), ev-... (a lens event), a node, or a job id.

    \b
    Examples:
      fleetctl explain gpu017:xid.79
      fleetctl explain ev-20261201T070001-0002   # a lens event (ids: fleetctl lens events)
      fleetctl explain gpu017 --format json
    """
    from pathlib import Path

    from fleetctl.act.actionlog import ActionLog
    from fleetctl.act.config import ActConfig
    from fleetctl.act.explain import Context, explain as explain_target
    from fleetctl.act.incidents import IncidentLog
    from fleetctl.act.run import read_report

    config = ActConfig.from_site(app.cluster, **({"state_dir": state_dir} if state_dir else {}))
    audit = None
    if report:
        audit = read_report(report)
    elif (Path(config.state_dir) / "last-audit.json").is_file():
        audit = read_report(str(Path(config.state_dir) / "last-audit.json"))
    backend = None
    if not no_slurm:
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(app.cluster)
    ctx = Context(backend=backend, log=ActionLog(config.state_dir),
                  events_path=events if events is not None else config.lens_events, audit=audit,
                  incidents=IncidentLog.from_config(config))
    out = explain_target(target, ctx)

    def render(console):
        console.print(f"[bold]{esc(out['kind'])} {esc(out['subject'])}[/bold]")
        for key, label in (("what", "what"), ("where", "where"), ("since", "since"), ("how_sure", "how sure")):
            console.print(f"  {label:9} {esc(out[key] or 'unknown', 2000)}")
        for line in out["why"]:
            console.print(f"  evidence  {esc(line, 2000)}")
        jobs = ", ".join(str(j.get("job_id")) for j in out["jobs"] if isinstance(j, dict))
        console.print(f"  jobs      {esc(jobs or 'none')}")
        for a in out["fleetctl"]:
            console.print(f"  fleetctl  {esc(a.get('action'))} {esc(a.get('phase'))} {esc(a.get('id'))}: "
                          f"{esc(a.get('why'), 2000)}")
        if not out["fleetctl"]:
            console.print("  fleetctl  no action")
        console.print(f"  next      {esc(out['next'], 2000)}")

    app.emit(out, render)
    return EXIT_OK
