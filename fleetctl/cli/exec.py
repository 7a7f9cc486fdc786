"""`fleetctl exec NODESET -- COMMAND...`: run a command on nodes, identical outputs folded (clubak).

One word after `--` is a shell command line (`-- 'dmesg | tail -3'`); several words are an argv list,
each word quoted (`-- sh -c 'echo $HOSTNAME'` reaches the node intact).
Exit status: 0 every node ok, 2 any node failed (non-zero exit, timeout, unreachable, ...), 3 error.
"""

from __future__ import annotations

import threading

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_FAILURES, EXIT_OK, ConfigError
from fleetctl.fanout.registry import TRANSPORTS

PROGRESS_AFTER_S = 1.0  # a progress bar only for runs that last; quick ones print just the result


@click.command("exec")
@common_options
@click.option("-t", "--transport", type=click.Choice(sorted(TRANSPORTS)), default=None,
              help="Transport (default: the site's access.transport, else ssh).")
@click.option("--timeout", type=click.FloatRange(min=0.001), default=None, metavar="SECONDS",
              help="Time the command may run on each node (default: access.command_timeout).")
@click.option("--connect-timeout", type=click.FloatRange(min=0.001), default=None, metavar="SECONDS",
              help="Time to connect to each node (default: access.connect_timeout).")
@click.option("-f", "--fanout", type=click.IntRange(1, 4096), default=None, metavar="N",
              help="Nodes contacted at once (default: access.concurrency).")
@click.option("--no-fold", is_flag=True, help="One line per node and output line, not folded groups.")
@click.argument("nodeset")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_app
def exec_command(app: Application, nodeset: str, command: tuple[str, ...], transport: str | None,
                 timeout: float | None, connect_timeout: float | None, fanout: int | None,
                 no_fold: bool) -> int:
    """Run COMMAND on every node of NODESET (e.g. `node[01-16]`) and fold identical outputs."""
    from fleetctl.fanout.base import FanoutOptions
    from fleetctl.fanout.fold import group_results, nodes_by_status, status_counts
    from fleetctl.fanout.registry import get_transport
    from fleetctl.nodeset import fold, parse_nodeset

    nodes = list(parse_nodeset(nodeset))
    if not nodes:
        raise click.BadParameter(f"{nodeset!r} names no node", param_hint="NODESET")
    site = _site_or_none(app)
    options = FanoutOptions.from_site(site)
    if fanout is not None:
        options.concurrency = fanout
    if connect_timeout is not None:
        options.connect_timeout = connect_timeout
    cmd = command[0] if len(command) == 1 else list(command)

    with get_transport(transport, options, site=site) as backend, _Progress(app, len(nodes)) as bar:
        app.debug(f"{backend.name}: {len(nodes)} nodes, fan-out {options.concurrency}")
        results = backend.run(nodes, cmd, timeout=timeout, on_result=bar.advance)

    groups = group_results(results)
    data = {
        "transport": backend.name,
        "command": list(command) if len(command) > 1 else command[0],
        "nodes": fold(nodes),
        "summary": {"total": len(results), "ok": sum(r.ok for r in results),
                    "by_status": status_counts(results), "nodes_by_status": nodes_by_status(results)},
        "results": [r.to_dict() for r in results],
        "groups": [g.to_dict() for g in groups],
    }
    app.emit(data, lambda console: (_render_lines(console, results) if no_fold
                                    else _render_groups(console, groups)))
    failed = [r for r in results if not r.ok]
    if failed and not app.json:
        by_status = data["summary"]["nodes_by_status"]
        parts = [f"{status_counts(results)[s]} {s}: {by_status[s]}" for s in status_counts(results)]
        app.err_console.print(f"fleetctl: {len(results)} nodes: " + ", ".join(parts), markup=False,
                              highlight=False)
    return EXIT_FAILURES if failed else EXIT_OK


def _site_or_none(app: Application):
    """The site file when one is configured (errors in it are errors); None when none is."""
    try:
        app.site_file()
    except ConfigError:
        return None
    return app.site


def _render_groups(console, groups) -> None:
    from rich.text import Text

    for g in groups:
        head = f"{g.nodeset} ({len(g.nodes)})"
        if g.status != "ok":
            head += f" {g.status}" + (f" exit {g.exit_code}" if g.exit_code is not None else "")
        style = "bold" if g.status == "ok" else "bold red"
        rule = "-" * min(max(len(head), 15), 79)
        console.print(Text(f"{rule}\n{head}\n{rule}", style=style), soft_wrap=True)
        if g.error:
            console.print(Text(g.error, style="red"), soft_wrap=True)
        _print_raw(console, g.stdout)
        _print_raw(console, g.stderr, style="yellow")


def _render_lines(console, results) -> None:
    from rich.text import Text

    for r in results:
        for line in r.stdout.splitlines():
            console.print(Text(f"{r.node}: {line}"), soft_wrap=True)
        for line in r.stderr.splitlines():
            console.print(Text(f"{r.node}: {line}", style="yellow"), soft_wrap=True)
        if not r.ok:
            detail = r.error or (f"exit {r.exit_code}" if r.exit_code is not None else "")
            console.print(Text(f"{r.node}: [{r.status}] {detail}".rstrip(), style="red"), soft_wrap=True)


def _print_raw(console, text: str, style: str = "") -> None:
    """Command output exactly as the node printed it: no markup, emoji or wrapping applied."""
    from rich.text import Text

    if text:
        console.print(Text(text.removesuffix("\n"), style=style), soft_wrap=True)


class _Progress:
    """A transient rich progress bar on stderr, shown only on a terminal, in human mode, and only
    once a run has lasted PROGRESS_AFTER_S."""

    def __init__(self, app: Application, total: int):
        self.enabled = not app.json and app.err_console.is_terminal and total > 1
        self.app, self.total = app, total
        self._bar = self._task = self._timer = None
        self._lock = threading.Lock()
        self._done = 0

    def __enter__(self):
        if self.enabled:
            self._timer = threading.Timer(PROGRESS_AFTER_S, self._start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _start(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._bar is not None or self._timer is None:
                return
            self._bar = Progress(TextColumn("exec"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.app.err_console, transient=True)
            self._task = self._bar.add_task("exec", total=self.total, completed=self._done)
            self._bar.start()

    def advance(self, _result) -> None:
        with self._lock:
            self._done += 1
            if self._bar is not None:
                self._bar.advance(self._task)

    def __exit__(self, *exc):
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._bar is not None:
                self._bar.stop()
