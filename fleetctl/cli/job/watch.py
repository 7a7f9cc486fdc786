"""`fleetctl job watch JOBID`: follow a job's progress files; hang and straggler events into lens's
event log. The work is fleetctl.recovery.watch.JobWatcher."""

from __future__ import annotations

import os
import time

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import FiniteFloatRange, seconds


@click.command("watch")
@common_options
@click.argument("job_id")
@click.option("--dir", "directory", metavar="DIR", envvar="FLEETCTL_PROGRESS_DIR",
              help="Where the ranks write their progress (env FLEETCTL_PROGRESS_DIR, as in the job).")
@click.option("--events", metavar="FILE", help="lens's event log to write to (default: lens.state_dir's "
              "events.jsonl of the site file; without one, events are only printed).")
@click.option("--once", is_flag=True, help="Look once and exit.")
@click.option("--duration", type=seconds(1, 10 ** 7), default=None, metavar="S",
              help="Stop after S seconds (default: until the job's files are gone or Ctrl-C).")
@click.option("--interval", type=seconds(0.2, 60), default=1.0, show_default=True, metavar="S")
@click.option("--hang-factor", type=FiniteFloatRange(1, 100), default=3.0, show_default=True,
              help="A hang: no iteration for this many median iterations ...")
@click.option("--hang-floor", type=seconds(0, 86400), default=10.0, show_default=True, metavar="S",
              help="... plus this many seconds.")
@click.option("--straggler-pct", type=FiniteFloatRange(1, 1000), default=20.0, show_default=True,
              help="A straggler: a rank's compute this much slower than the job's median.")
@pass_app
def watch(app: Application, job_id: str, **options) -> int:
    """Follow JOB_ID's ranks (fleetctl.recovery.Progress in the training loop) and raise a `hang`
    (no progress past the threshold, naming the rank that stands out) or a `straggler` (a rank's own
    compute slower than the job's median) as lens events on the rank's node, closed when it clears.
    act policies on `host.hang` or `host.straggler` act on them.

    \b
    Examples:
      fleetctl job watch 4242 --dir /shared/fleetctl/progress
      fleetctl job watch 4242 --once --format json
    """
    from fleetctl.errors import EXIT_OK, EXIT_WARNINGS, UsageError
    from fleetctl.lens.eventlog import EventLog
    from fleetctl.recovery.signals import Thresholds
    from fleetctl.recovery.watch import JobWatcher

    directory, duration, interval = options["directory"], options["duration"], options["interval"]
    if not directory:
        raise UsageError("no progress directory: give --dir or set FLEETCTL_PROGRESS_DIR (as the job does)")
    path = options["events"] or _site_events(app)
    watcher = JobWatcher(directory, job_id, EventLog(path) if path else None,
                         Thresholds(options["hang_factor"], options["hang_floor"], options["straggler_pct"]))
    written, end = [], (time.monotonic() + duration) if duration else None
    while True:
        new = watcher.poll()
        written += new
        if not app.json:
            for rec in new:
                app.console.print(f"{esc(rec['kind']):5} {esc(rec['metric']):9} {esc(rec['element']['id'])} "
                                  f"job {esc(job_id)}: {esc(rec['evidence'].get('message', ''), 400)}")
        if options["once"] or (end is not None and time.monotonic() >= end):
            break
        time.sleep(interval)
    doc = {"schema": "fleetctl.job_watch/1", "job": job_id, "events_file": path, "records": written,
           "open": list(watcher.open.values()), "skipped_files": watcher.skipped}
    if app.json:
        app.emit(doc)
    return EXIT_WARNINGS if watcher.open else EXIT_OK


def _site_events(app: Application) -> str | None:
    if not (app.site_path or os.environ.get("FLEETCTL_SITE")):
        return None
    from fleetctl.cli.lens.common import state_directory

    return str(state_directory(app, None) / "events.jsonl")
