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
import math
import sys
import time

import click

from fleetctl.cli.app import Application, common_options, pass_app, stop_on_signals
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.errors import EXIT_ERROR, EXIT_FAILURES, EXIT_OK, EXIT_WARNINGS, UsageError

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
MAX_STATUS_BYTES = 16 << 20  # status.json: 200 elements and an entry per agent and clock
MAX_CELL = 200  # characters of one untrusted value printed


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
    from fleetctl.errors import DataError
    from fleetctl.filekit import read_json
    from fleetctl.lens.daemon import running_pid
    from fleetctl.lens.eventlog import read_events

    opts, directory = _state_dir(app, state_dir)
    pid = running_pid(directory / "lens.pid")
    try:  # bounded, a regular file only (a planted FIFO never hangs), nesting bounded
        doc = read_json(directory / "status.json", "lens status file", max_bytes=MAX_STATUS_BYTES,
                        missing_ok=True, kind=dict, error=DataError) or {}
    except DataError as exc:
        doc = {"error": exc.message}
    doc["running"] = bool(pid)
    doc["pid"] = pid
    doc["state_dir"] = str(directory)
    doc["open_events"] = read_events(directory / "events.jsonl", open_only=True)
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
    if events or any(not a.get("alive") or a.get("overloaded") for a in _dicts(doc.get("agents"))):
        return EXIT_WARNINGS
    return EXIT_OK


# What the renderers print comes from files anybody may have planted: every value goes through
# _text (one printable line, bounded, a rich Text: never parsed as markup) or _number.

def _text(value, limit: int = MAX_CELL, style: str = ""):
    from rich.text import Text

    from fleetctl.filekit import clean_text

    return Text(clean_text("-" if value is None else value, limit), style=style)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value) -> str:
    return f"{value:g}" if _finite(value) else "-"


def _dicts(value) -> list[dict]:
    """The objects of a list read from a file (anything else: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _element(el: dict):
    """A (validated) record's element, or a status file's element row."""
    return _text(f"{el.get('type')} {el.get('direction') or el.get('id')}")


def _jobs(e: dict):
    return _text(", ".join(j["job_id"] for j in e.get("jobs") or []) or "-")


def _metric(e: dict) -> str:
    return e["metric"] + (f" x{e['flap']['count']}" if e.get("flap") else "")


def _severity(e: dict):
    return _text(e["severity"], style=SEV_STYLE.get(e["severity"], ""))


def _render_status(console, doc: dict) -> None:
    from rich.text import Text

    if doc.get("error"):
        console.print(Text.assemble(("status file: ", "bold red"), _text(doc["error"], 1024)))
    if not doc.get("running"):
        console.print(Text.assemble(("lens is not running", "bold red"), " (",
                                    _text(doc["state_dir"], 1024), ")"))
    else:
        lw = doc.get("last_window") if isinstance(doc.get("last_window"), dict) else {}
        console.print(Text.assemble(
            ("fleetctl lens", "bold"), " ", _text(doc.get("cluster", "")), f": pid {doc['pid']}, "
            "window ", _text(doc.get("window_s")), " s, last window ", _text(lw.get("t_end", "-")),
            " (", _text(lw.get("probes", 0)), " probes, ", _text(lw.get("set_aside", 0)),
            " set aside)"))
    _render_open_events(console, doc.get("open_events") or [])
    _render_agents(console, _dicts(doc.get("agents")), _dicts(doc.get("clock")))
    _render_loss(console, _dicts(doc.get("elements")))


def _render_open_events(console, events: list[dict]) -> None:
    from rich.table import Table

    if not events:
        console.print("no open events")
        return
    t = Table(title="Open events", show_edge=False)
    for col in ("id", "element", "metric", "severity", "since", "jobs"):
        t.add_column(col)
    for e in events:
        t.add_row(e["id"], _element(e["element"]), _metric(e), _severity(e), e["first_seen"],
                  _jobs(e))
    console.print(t)


def _render_agents(console, agents: list[dict], clocks: list[dict]) -> None:
    from rich.table import Table

    if not agents:
        return
    t = Table(title="Agents", show_edge=False)
    for col in ("host", "alive", "restarts", "pps", "cpu %", "overloaded", "last error"):
        t.add_column(col)
    for a in agents:
        t.add_row(_text(a.get("host")), _yes(a.get("alive"), bad=False),
                  _number(a.get("restarts")), _number(a.get("pps")), _number(a.get("cpu_pct")),
                  _yes(a.get("overloaded"), bad=True), _text(a.get("last_error") or "", 60))
    console.print(t)
    if clocks:
        t = Table(title="Clocks (relative to the reference host)", show_edge=False)
        for col in ("host", "offset us", "drift ppm"):
            t.add_column(col)
        for c in clocks:
            t.add_row(_text(c.get("host")), _number(c.get("offset_us")), _number(c.get("drift_ppm")))
        console.print(t)


def _yes(value, bad: bool):
    """yes/no; red when it is the bad answer (alive: no, overloaded: yes)."""
    on = value is True
    return _text("yes" if on else "no", style="red" if on == bad else "")


def _render_loss(console, elements: list[dict]) -> None:
    from rich.table import Table

    rows = [r for r in elements if _finite(r.get("loss_pct")) and r["loss_pct"] > 0][:20]
    if not rows:
        return
    t = Table(title="Elements with loss (last window)", show_edge=False)
    for col in ("element", "loss %", "delay p50 us", "probes"):
        t.add_column(col)
    for r in rows:
        t.add_row(_element(r), _number(r["loss_pct"]), _number(r.get("delay_p50_us")),
                  _number(r.get("probes")))
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
    events = read_events(path, since=cut, open_only=open_only)
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
    from fleetctl.filekit import clean_text

    if app.json:
        click.echo(json.dumps(rec, sort_keys=False))
    else:
        el = rec["element"]
        jobs = ", ".join(j["job_id"] for j in rec.get("jobs") or []) or "-"
        click.echo(f"{rec['time']} {rec['kind']:6} {rec['id']} {el['type']} "
                   f"{clean_text(el.get('direction') or el['id'], MAX_CELL)} {rec['metric']} "
                   f"{rec['severity']} jobs: {clean_text(jobs, MAX_CELL)}")
    sys.stdout.flush()


def _render_events(console, events: list[dict]) -> None:
    from rich.table import Table

    if not events:
        console.print("no events")
        return
    t = Table(show_edge=False)
    t.add_column("element", no_wrap=True)
    for col in ("state", "metric", "severity", "first seen", "jobs", "id"):
        t.add_column(col)
    for e in events:
        t.add_row(_element(e["element"]), e["state"], _metric(e), _severity(e),
                  e["first_seen"][:19].replace("T", " "), _jobs(e), e["id"])
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
