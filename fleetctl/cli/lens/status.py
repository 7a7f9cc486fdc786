"""`fleetctl lens status`: health per element now, agents, clocks, open events."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lens.common import (element, existing_state_dir_option, finite, jobs, metric, number, severity,
                                      state_directory, text)


@click.command("status")
@common_options
@existing_state_dir_option
@pass_app
def status_cmd(app: Application, state_dir) -> int:
    """Health per element now, agents, clock offsets and drift, open events.

    \b
    Examples:
      fleetctl lens status
      fleetctl lens status --format json | jq .open_events
    """
    from fleetctl.lens.status import read_status

    doc = read_status(state_directory(app, state_dir))
    app.emit(doc, lambda c: _render(c, doc))
    return doc["exit_code"]


def _render(console, doc: dict) -> None:
    from rich.text import Text

    from fleetctl.lens.status import dicts

    if doc.get("error"):
        console.print(Text.assemble(("status file: ", "bold red"), text(doc["error"], 1024)))
    if not doc.get("running"):
        console.print(Text.assemble(("lens is not running", "bold red"), " (", text(doc["state_dir"], 1024), ")"))
    else:
        lw = doc.get("last_window") if isinstance(doc.get("last_window"), dict) else {}
        console.print(Text.assemble(
            ("fleetctl lens", "bold"), " ", text(doc.get("cluster", "")), f": pid {doc['pid']}, "
            "window ", text(doc.get("window_s")), " s, last window ", text(lw.get("t_end", "-")),
            " (", text(lw.get("probes", 0)), " probes, ", text(lw.get("set_aside", 0)), " set aside)"))
        base = doc.get("delay_baselines") if isinstance(doc.get("delay_baselines"), dict) else {}
        if base:  # delay is judged only on paths with a learnt baseline
            console.print(Text.assemble("delay baselines learnt: ", text(base.get("learnt", "-")),
                                        " of ", text(base.get("paths", "-")), " paths"))
    _open_events(console, doc.get("open_events") or [])
    _agents(console, dicts(doc.get("agents")), dicts(doc.get("clock")))
    _loss(console, dicts(doc.get("elements")))


def _open_events(console, events: list[dict]) -> None:
    from rich.table import Table

    if not events:
        console.print("no open events")
        return
    t = Table(title="Open events", show_edge=False)
    for col in ("id", "element", "metric", "severity", "since", "jobs"):
        t.add_column(col)
    for e in events:
        t.add_row(e["id"], element(e["element"]), metric(e), severity(e), e["first_seen"], jobs(e))
    console.print(t)


def _agents(console, agents: list[dict], clocks: list[dict]) -> None:
    from rich.table import Table

    if not agents:
        return
    t = Table(title="Agents", show_edge=False)
    for col in ("host", "alive", "restarts", "pps", "cpu %", "overloaded", "last error"):
        t.add_column(col)
    for a in agents:
        t.add_row(text(a.get("host")), _yes(a.get("alive"), bad=False), number(a.get("restarts")),
                  number(a.get("pps")), number(a.get("cpu_pct")), _yes(a.get("overloaded"), bad=True),
                  text(a.get("last_error") or "", 60))
    console.print(t)
    if clocks:
        t = Table(title="Clocks (relative to the reference host)", show_edge=False)
        for col in ("host", "offset us", "drift ppm"):
            t.add_column(col)
        for c in clocks:
            t.add_row(text(c.get("host")), number(c.get("offset_us")), number(c.get("drift_ppm")))
        console.print(t)


def _yes(value, bad: bool):
    """yes/no; red when it is the bad answer (alive: no, overloaded: yes)."""
    on = value is True
    return text("yes" if on else "no", style="red" if on == bad else "")


def _loss(console, elements: list[dict]) -> None:
    from rich.table import Table

    rows = [r for r in elements if finite(r.get("loss_pct")) and r["loss_pct"] > 0][:20]
    if not rows:
        return
    t = Table(title="Elements with loss (last window)", show_edge=False)
    for col in ("element", "loss %", "delay p50 us", "probes"):
        t.add_column(col)
    for r in rows:
        t.add_row(element(r), number(r["loss_pct"]), number(r.get("delay_p50_us")), number(r.get("probes")))
    console.print(t)
