"""`fleetctl lens events`: the event log, or every new record with --follow."""

from __future__ import annotations

import json
import sys

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lens.common import (MAX_CELL, element, existing_state_dir_option, jobs, metric, severity,
                                      state_directory)
from fleetctl.cli.signals import stop_on_signals
from fleetctl.errors import EXIT_OK


@click.command("events")
@common_options
@click.option("--since", metavar="WHEN", default=None,
              help="Only events written at or after WHEN: epoch, ISO time or an age (30s, 15m, 2h, 1d).")
@click.option("--follow", is_flag=True, help="Keep printing records as they are appended.")
@click.option("--open", "open_only", is_flag=True, help="Only open events.")
@existing_state_dir_option
@pass_app
def events_cmd(app: Application, since, follow, open_only, state_dir) -> int:
    """The event log: the current view of each event (with --follow, every new record).

    \b
    Examples:
      fleetctl lens events --open
      fleetctl lens events --since 2h --format json
      fleetctl lens events --follow          # one line per record, until Ctrl-C
    """
    from fleetctl.lens.eventlog import follow as follow_log
    from fleetctl.lens.eventlog import read_events

    path = state_directory(app, state_dir) / "events.jsonl"
    events = read_events(path, since=_since(since), open_only=open_only)
    if not follow:
        app.emit({"events": events, "log": str(path)}, lambda c: _render(c, events))
        return EXIT_OK
    for e in events:
        _print_record(app, e)
    for rec in follow_log(path, stop=stop_on_signals()):
        if open_only and rec.get("state") != "open":
            continue
        _print_record(app, rec)
    return EXIT_OK


def _since(text: str | None):
    """The same --since grammar as `audit`: epoch seconds, an ISO time, or an age (30s, 10m, 2h, 1d)."""
    from fleetctl.checks import since_epoch

    return since_epoch(text) if text else None


def _print_record(app, rec: dict) -> None:
    from fleetctl.filekit import clean_text

    if app.json:
        click.echo(json.dumps(rec, sort_keys=False))
    else:
        el = rec["element"]
        job_text = ", ".join(j["job_id"] for j in rec.get("jobs") or []) or "-"
        click.echo(f"{rec['time']} {rec['kind']:6} {rec['id']} {el['type']} "
                   f"{clean_text(el.get('direction') or el['id'], MAX_CELL)} {rec['metric']} "
                   f"{rec['severity']} jobs: {clean_text(job_text, MAX_CELL)}")
    sys.stdout.flush()


def _render(console, events: list[dict]) -> None:
    from rich.table import Table

    if not events:
        console.print("no events")
        return
    t = Table(show_edge=False)
    t.add_column("element", no_wrap=True)
    for col in ("state", "metric", "severity", "first seen", "jobs"):
        t.add_column(col)
    # The id is what `fleetctl explain` takes: never cut, however narrow the terminal.
    t.add_column("id", no_wrap=True, min_width=max(len(str(e["id"])) for e in events))
    for e in events:
        t.add_row(element(e["element"]), e["state"], metric(e), severity(e),
                  e["first_seen"][:19].replace("T", " "), jobs(e), e["id"])
    console.print(t)
