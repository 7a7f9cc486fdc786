"""`fleetctl lens`: continuous fabric monitoring (docs/lens.md).

    lens run [--foreground] [NODESET]   the coordinator (daemonises with a pid file by default)
    lens status                         health per element now, agents, clocks, open events
    lens events [--since] [--follow] [--open]
    lens stop

The work is in fleetctl.lens; this module parses, starts and renders. Exit codes
(docs/exit-codes.md): status 0 healthy, 1 warnings (an agent down or overloaded, a warning event
open), 2 a critical event open, 3 no coordinator running; events 0; stop 0 stopped, 1 none was
running.
"""

from __future__ import annotations

import json
import sys
import time

import click

from fleetctl.cli.app import Application, common_options, pass_app, stop_on_signals
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.errors import EXIT_ERROR, EXIT_FAILURES, EXIT_OK, EXIT_WARNINGS, UsageError

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _state_dir(app: Application, state_dir: str | None):
    from pathlib import Path

    from fleetctl.lens.options import LensOptions

    if state_dir:
        opts = LensOptions(state_dir=state_dir)
    else:
        opts = LensOptions.from_site(app.site)
    return opts, Path(opts.state_dir).expanduser()


state_dir_option = click.option("--state-dir", metavar="DIR", default=None,
                                help="Lens state directory (default: the site's lens.state_dir).")


@click.group()
@common_options
def lens() -> None:
    """Continuous probing of a running cluster: events per fabric element, with the jobs they
    touch (docs/lens.md)."""


@lens.command("run")
@common_options
@click.argument("nodeset", required=False)
@click.option("--foreground", is_flag=True, help="Stay in the foreground (no pid file daemon).")
@click.option("--rate", type=FiniteFloatRange(0.1, 1000), default=None,
              help="Probes per second per NIC pair (default: lens.rate, else the probe budget's).")
@click.option("--window", "window_s", type=FiniteFloatRange(0.2, 60), default=None,
              help="Analysis window in seconds (default: lens.window_s, 1).")
@click.option("--transport", type=click.Choice(["ssh", "srun", "local"]), default=None,
              help="How agents are started (default: the site's access.transport).")
@state_dir_option
@pass_app
def run_cmd(app: Application, nodeset, foreground, rate, window_s, transport, state_dir) -> int:
    """Start the coordinator over NODESET (default: every node of the site file)."""
    from fleetctl.audit.runner import site_nodes
    from fleetctl.extras import require
    from fleetctl.lens.daemon import PidLock, daemonize, running_pid
    from fleetctl.lens.options import LensOptions

    require("mesh", "lens run")
    site = app.site
    opts = LensOptions.from_site(site)
    if state_dir:
        opts.state_dir = state_dir
    if rate is not None:
        opts.rate = rate
    if window_s is not None:
        opts.window_s = window_s
    opts.validate()
    nodes = site_nodes(site, nodeset)
    if len(nodes) < 2:
        raise UsageError("lens probes between nodes: give at least two")
    pid_file = opts.path("lens.pid")
    pid = running_pid(pid_file)
    if pid:
        raise UsageError(f"a lens coordinator already runs for {opts.state_dir} (pid {pid})",
                         hint="fleetctl lens stop")
    if not foreground:
        if not daemonize(opts.path("lens.log")):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not running_pid(pid_file):
                time.sleep(0.05)
            pid = running_pid(pid_file)
            if not pid:
                raise UsageError(f"the lens coordinator did not start; see {opts.path('lens.log')}")
            app.emit({"started": True, "pid": pid, "state_dir": opts.state_dir,
                      "log": str(opts.path("lens.log"))},
                     lambda c: c.print(f"lens coordinator started (pid {pid}); log "
                                       f"{opts.path('lens.log')}"))
            return EXIT_OK
    lock = PidLock(pid_file)
    lock.acquire()
    try:
        return _serve(app, site, nodes, transport, opts)
    finally:
        lock.release()


def _serve(app, site, nodes, transport_name, opts) -> int:
    import shutil

    from fleetctl.fanout import get_transport
    from fleetctl.lens.coordinator import Coordinator
    from fleetctl.lens.outputs import Outputs

    def log(message: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} lens: {message}", file=sys.stderr,
              flush=True)

    stop = stop_on_signals()
    slurm = None
    if shutil.which("squeue"):
        from fleetctl.slurm import backend_for_site

        slurm = backend_for_site(site)
    outputs = Outputs(opts, log, site=site)
    try:
        with get_transport(transport_name, site=site) as t:
            log(f"starting on {len(nodes)} nodes over {t.name}, window {opts.window_s:g} s, "
                f"state {opts.state_dir}")
            Coordinator(site, nodes, t, opts, outputs, log, slurm).run(stop)
    finally:
        outputs.close()
        log("stopped")
    return EXIT_OK


@lens.command("status")
@common_options
@state_dir_option
@pass_app
def status_cmd(app: Application, state_dir) -> int:
    """Health per element now, agents, clock offsets and drift, open events."""
    from fleetctl.lens.daemon import running_pid

    opts, directory = _state_dir(app, state_dir)
    pid = running_pid(directory / "lens.pid")
    try:
        with open(directory / "status.json", "rb") as fh:  # bounded: a file is input too
            doc = json.loads(fh.read(16 << 20))
        if not isinstance(doc, dict):
            raise ValueError("not an object")
    except FileNotFoundError:
        doc = {}
    except (OSError, ValueError) as exc:
        doc = {"error": f"status.json unreadable: {exc}"}
    doc["running"] = bool(pid)
    doc["pid"] = pid
    doc["state_dir"] = str(directory)
    from fleetctl.lens.eventlog import read_events

    doc["open_events"] = read_events(directory / "events.jsonl", open_only=True) \
        if (directory / "events.jsonl").exists() else []
    code = _status_code(doc)
    doc["exit_code"] = code
    app.emit(doc, lambda c: _render_status(c, doc))
    return code


def _status_code(doc: dict) -> int:
    if not doc.get("running"):
        return EXIT_ERROR
    events = doc.get("open_events") or []
    if any(e.get("severity") == "critical" for e in events):
        return EXIT_FAILURES
    agents = doc.get("agents") or []
    if events or any(not a.get("alive") or a.get("overloaded") for a in agents):
        return EXIT_WARNINGS
    return EXIT_OK


def _render_status(console, doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not doc.get("running"):
        console.print(f"[bold red]lens is not running[/bold red] ({escape(doc['state_dir'])})")
    else:
        lw = doc.get("last_window") or {}
        console.print(f"[bold]fleetctl lens[/bold] {escape(str(doc.get('cluster', '')))}: pid "
                      f"{doc['pid']}, window {doc.get('window_s')} s, last window "
                      f"{lw.get('t_end', '-')} ({lw.get('probes', 0)} probes, "
                      f"{lw.get('set_aside', 0)} set aside)")
    events = doc.get("open_events") or []
    if events:
        t = Table(title="Open events", show_edge=False)
        for col in ("id", "element", "metric", "severity", "since", "jobs"):
            t.add_column(col)
        for e in events:
            el = e["element"]
            t.add_row(e["id"], escape(f"{el['type']} {el.get('direction') or el['id']}"),
                      e["metric"] + (f" x{e['flap']['count']}" if e.get("flap") else ""),
                      f"[{SEV_STYLE.get(e['severity'], '')}]{e['severity']}[/]", e["first_seen"],
                      escape(", ".join(j["job_id"] for j in e.get("jobs") or []) or "-"))
        console.print(t)
    else:
        console.print("no open events")
    agents = doc.get("agents") or []
    if agents:
        t = Table(title="Agents", show_edge=False)
        for col in ("host", "alive", "restarts", "pps", "cpu %", "overloaded", "last error"):
            t.add_column(col)
        clock = {c["host"]: c for c in doc.get("clock") or []}
        for a in agents:
            t.add_row(a["host"], "yes" if a["alive"] else "[red]no[/red]", str(a["restarts"]),
                      f"{a['pps']:g}", f"{a['cpu_pct']:g}",
                      "[red]yes[/red]" if a.get("overloaded") else "no",
                      escape((a.get("last_error") or "")[:60]))
        console.print(t)
        if clock:
            t = Table(title="Clocks (relative to the reference host)", show_edge=False)
            for col in ("host", "offset us", "drift ppm"):
                t.add_column(col)
            for h, c in clock.items():
                t.add_row(h, f"{c['offset_us']:g}", f"{c['drift_ppm']:g}")
            console.print(t)
    rows = [r for r in doc.get("elements") or [] if (r.get("loss_pct") or 0) > 0][:20]
    if rows:
        t = Table(title="Elements with loss (last window)", show_edge=False)
        for col in ("element", "loss %", "delay p50 us", "probes"):
            t.add_column(col)
        for r in rows:
            t.add_row(escape(f"{r['type']} {r.get('direction') or r['id']}"), f"{r['loss_pct']:g}",
                      str(r.get("delay_p50_us")), str(r["probes"]))
        console.print(t)


@lens.command("events")
@common_options
@click.option("--since", metavar="WHEN", default=None,
              help="Only events written at or after WHEN (ISO time, or seconds ago like 10m, 2h).")
@click.option("--follow", is_flag=True, help="Keep printing records as they are appended.")
@click.option("--open", "open_only", is_flag=True, help="Only open events.")
@state_dir_option
@pass_app
def events_cmd(app: Application, since, follow, open_only, state_dir) -> int:
    """The event log: the current view of each event (with --follow, every new record)."""
    from fleetctl.lens.eventlog import follow as follow_log
    from fleetctl.lens.eventlog import read_events

    _opts, directory = _state_dir(app, state_dir)
    path = directory / "events.jsonl"
    cut = _since(since)
    events = read_events(path, since=cut, open_only=open_only) if path.exists() else []
    if not follow:
        app.emit({"events": events, "log": str(path)}, lambda c: _render_events(c, events))
        return EXIT_OK
    for e in events:
        _print_record(app, e)
    for rec in follow_log(path, stop=stop_on_signals()):
        if open_only and rec.get("state") != "open":
            continue
        _print_record(app, rec)
    return EXIT_OK


def _since(text: str | None):
    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip()
    if t[-1:] in units and t[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(t[:-1]) * units[t[-1]]
    from fleetctl.lens.eventlog import parse_time

    try:
        return parse_time(t)
    except Exception:  # noqa: BLE001 - the reader's own error names the value
        raise UsageError(f"--since {text!r}: an ISO time (2026-01-02T03:04:05Z) or an age "
                         "like 30s, 10m, 2h, 1d") from None


def _print_record(app, rec: dict) -> None:
    if app.json:
        click.echo(json.dumps(rec, sort_keys=False))
    else:
        el = rec["element"]
        jobs = ", ".join(j["job_id"] for j in rec.get("jobs") or []) or "-"
        click.echo(f"{rec['time']} {rec['kind']:6} {rec['id']} {el['type']} "
                   f"{el.get('direction') or el['id']} {rec['metric']} {rec['severity']} "
                   f"jobs: {jobs}")
    sys.stdout.flush()


def _render_events(console, events: list[dict]) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not events:
        console.print("no events")
        return
    t = Table(show_edge=False)
    t.add_column("element", no_wrap=True)
    for col in ("state", "metric", "severity", "first seen", "jobs", "id"):
        t.add_column(col)
    for e in events:
        el = e["element"]
        t.add_row(escape(f"{el['type']} {el.get('direction') or el['id']}"), e["state"],
                  e["metric"] + (f" x{e['flap']['count']}" if e.get("flap") else ""),
                  f"[{SEV_STYLE.get(e['severity'], '')}]{e['severity']}[/]",
                  e["first_seen"][:19].replace("T", " "),
                  escape(", ".join(j["job_id"] for j in e.get("jobs") or []) or "-"), e["id"])
    console.print(t)


@lens.command("stop")
@common_options
@state_dir_option
@pass_app
def stop_cmd(app: Application, state_dir) -> int:
    """Stop the coordinator (it finishes its window and saves its state)."""
    from fleetctl.lens.daemon import stop

    _opts, directory = _state_dir(app, state_dir)
    result = stop(directory / "lens.pid")
    app.emit(result, lambda c: c.print("lens stopped" if result["stopped"]
                                       else "lens was not running"))
    return EXIT_OK if result["stopped"] else EXIT_WARNINGS
