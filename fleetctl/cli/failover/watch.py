"""`fleetctl failover watch`: link and port events, the fleet plugin's counters, flap history."""

from __future__ import annotations

import json
import sys
import time

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import seconds
from fleetctl.cli.signals import stop_on_signals
from fleetctl.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_WARNINGS


@click.command("watch")
@common_options
@click.option("--once", is_flag=True, help="Print the current state and exit (1 when a link is down or flapping).")
@click.option("--interval", type=seconds(0.05, 3600), default=1.0, show_default=True, metavar="SECONDS",
              help="How often IB ports and counters files are read (netlink events come at once).")
@click.option("--duration", type=seconds(0, 31_536_000), default=0, metavar="SECONDS",
              help="Stop after this long (0: until interrupted).")
@click.option("--nic", "nics", multiple=True, metavar="NAME", help="Watch only this netdev or IB device "
              "(repeatable; default: every interface but loopback, every IB port).")
@click.option("--counters-dir", default=None, metavar="DIR", help="The plugin's counters directory "
              "(env FLEET_NET_COUNTERS_DIR, default /run/fleetctl/failover).")
@click.option("--prometheus", "--prom", "prom", metavar="FILE", help="Also write the state as Prometheus text to FILE "
              "(atomically, every interval; '-' prints it to stdout with --once).")
@click.option("--flap-window", type=seconds(1, 7 * 86_400), default=86_400.0, show_default=True,
              metavar="SECONDS", help="Down transitions within this window count towards flapping.")
@click.option("--flap-count", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Downs within the window that make a link flapping.")
@pass_app
def watch_cmd(app: Application, **options) -> int:
    """Link and port events, the fleet plugin's counters and flap history (JSON lines with --format json).

    \b
    Examples:
      fleetctl failover watch                         # events as they come, until Ctrl-C
      fleetctl failover watch --once --nic eth0 --nic eth1
      fleetctl failover watch --prometheus /var/lib/node_exporter/failover.prom
    """
    from fleetctl.failover.command import WatchRequest, started_watch

    request = WatchRequest(**options)
    with started_watch(request) as (watch, records):
        if request.once:
            return _once(app, watch, request.prom)
        _print_records(app, records)
        stop = stop_on_signals()
        watch.follow(lambda new: _print_records(app, new), stop, request.duration, request.prom_file)
        return EXIT_INTERRUPTED if stop.interrupted() else EXIT_OK


def _once(app: Application, watch, prom: str | None) -> int:
    problems = watch.problems()
    if prom == "-":
        click.echo(watch.prometheus(), nl=False)
        return EXIT_WARNINGS if problems else EXIT_OK
    if prom:
        watch.write_prometheus(prom)
    data = {**watch.snapshot(), "problems": problems}

    def render(console):
        for link in data["links"]:
            state = "[green]up[/green]" if link["up"] else "[red]down[/red]"
            flap = f" [yellow]flapping ({link['downs']} downs)[/yellow]" if link["flapping"] else ""
            changes = f" carrier changes {link['carrier_changes']}" if link["carrier_changes"] is not None else ""
            console.print(f"{link['link']:<16} {link['kind']:<8} {state}{changes}{flap}")
        for c in data["counters"]:
            live = "" if c["alive"] else " [dim](process gone)[/dim]"
            console.print(f"plugin pid {c['pid']}{live}: paths up {c['paths_up']}, path downs {c['path_down']}, "
                          f"failbacks {c['failbacks']}, replayed {c['replayed_bytes']} B, errors {c['errors']}")
        for path, why in {**data["damaged"], **data["refused"]}.items():
            console.print(f"counters ignored: {path}: {why}", markup=False)
        for p in problems:
            app.err_console.print(f"[yellow]warning:[/yellow] {p}")

    app.emit(data, render)
    return EXIT_WARNINGS if problems else EXIT_OK


def _print_records(app: Application, records: list[dict]) -> None:
    for rec in records:
        if app.json:
            click.echo(json.dumps(rec, separators=(", ", ": ")))
            continue
        stamp = time.strftime("%H:%M:%S", time.localtime(rec["ts"]))
        if rec["event"].startswith("link"):
            extra = f" downs {rec['downs']}" + (f" period {rec['period_s']} s" if rec.get("period_s") else "") \
                if "downs" in rec else ""
            flap = " FLAPPING" if rec.get("flapping") else ""
            app.console.print(f"{stamp} {rec['event']:<10} {rec['link']} ({rec['kind']}){extra}{flap}",
                              markup=False)
        elif rec["event"] == "counters":
            changed = ", ".join(f"{k} {v:+d}" for k, v in rec["changed"].items()) or "first seen"
            app.console.print(f"{stamp} counters   pid {rec['pid']}: {changed}", markup=False)
        else:
            why = f": {rec['why']}" if rec.get("why") else ""
            app.console.print(f"{stamp} {rec['event']} {rec.get('pid', rec.get('path', ''))}{why}", markup=False)
    sys.stdout.flush()
