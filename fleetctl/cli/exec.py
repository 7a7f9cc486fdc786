"""`fleetctl exec NODESET -- COMMAND...`: run a command on nodes, identical outputs folded (clubak).

One word after `--` is a shell command line (`-- 'dmesg | tail -3'`); several words are an argv list,
each word quoted (`-- sh -c 'echo $HOSTNAME'` reaches the node intact).
Exit status: 0 every node ok, 2 any node failed (non-zero exit, timeout, unreachable, ...), 3 error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import MAX_CONNECT_TIMEOUT_S, MAX_TIMEOUT_S, seconds
from fleetctl.cli.progress import ProgressBar
from fleetctl.errors import EXIT_FAILURES, EXIT_OK, ConfigError
from fleetctl.fanout.registry import transports



@click.command("exec")
@common_options
@click.option("-t", "--transport", type=click.Choice(transports.names()), default=None,
              help="Transport (default: the site's access.transport, else ssh).")
@click.option("--timeout", type=seconds(0.001, MAX_TIMEOUT_S), default=None, metavar="SECONDS",
              help="Time the command may run on each node (default: access.command_timeout).")
@click.option("--connect-timeout", type=seconds(0.001, MAX_CONNECT_TIMEOUT_S), default=None, metavar="SECONDS",
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
    """Run COMMAND on every node of NODESET (e.g. `node[01-16]`) and fold identical outputs.

    \b
    One word after -- is a shell command line:  -- 'dmesg | tail -3'
    Several words are an argv list, each word quoted:  -- sh -c 'echo $HOSTNAME'
    Exit status: 0 all nodes ok; 2 a node failed, timed out or could not be reached; 3 error.

    \b
    Examples:
      fleetctl exec 'gpu[001-128]' -- nvidia-smi -L
      fleetctl exec @partition:gpu -t clush -- 'dmesg | tail -3'
      fleetctl exec 'gpu[001-004]' --no-fold --timeout 10 -- uptime
    """
    from fleetctl.fanout.base import FanoutOptions
    from fleetctl.fanout.fold import group_results, nodes_by_status, status_counts
    from fleetctl.fanout.registry import get_transport
    from fleetctl.nodeset import fold, parse_nodeset

    nodes = list(parse_nodeset(app.nodes(nodeset)))
    if not nodes:
        raise click.BadParameter(f"{nodeset!r} names no node", param_hint="NODESET")
    cluster = _site_or_none(app)
    options = FanoutOptions.from_site(cluster)
    if fanout is not None:
        options.concurrency = fanout
    if connect_timeout is not None:
        options.connect_timeout = connect_timeout
    cmd = command[0] if len(command) == 1 else list(command)

    start = time.monotonic()
    with get_transport(transport, options, cluster=cluster) as backend, ProgressBar(app, len(nodes), "exec") as bar:
        app.debug(f"{backend.name}: {len(nodes)} nodes, fan-out {options.concurrency}")
        results = backend.run(nodes, cmd, timeout=timeout, on_result=bar.advance)
    duration = time.monotonic() - start

    groups = group_results(results)
    data = {
        "transport": backend.name,
        "command": list(command) if len(command) > 1 else command[0],
        "nodes": fold(nodes),
        "summary": {"total": len(results), "ok": sum(r.ok for r in results),
                    "by_status": status_counts(results), "nodes_by_status": nodes_by_status(results),
                    "duration_s": round(duration, 4)},
        "results": [r.to_dict() for r in results],
        "groups": [g.to_dict() for g in groups],
    }
    if app.json:
        app.emit(data)
    else:
        _write(app, _group_lines(groups) if not no_fold else _node_lines(results))
    failed = [r for r in results if not r.ok]
    if failed and not app.json:
        counts, by_status = status_counts(results), data["summary"]["nodes_by_status"]
        parts = [f"{counts[s]} {s}: {by_status[s]}" for s in counts]
        click.echo(f"fleetctl: {len(results)} nodes: " + ", ".join(parts), err=True)
    return EXIT_FAILURES if failed else EXIT_OK


def _site_or_none(app: Application):
    """The site file when one is configured (errors in it are errors); None when none is."""
    try:
        app.site_file()
    except ConfigError:
        return None
    return app.cluster


Line = tuple[str, str]  # (text, rich style); text is printed verbatim


def _group_lines(groups) -> Iterator[Line]:
    """clubak -b style: a header per group of identical results, then the output once."""
    for g in groups:
        head = f"{g.nodeset} ({len(g.nodes)})"
        if g.status != "ok":
            head += f" {g.status}" + (f" exit {g.exit_code}" if g.exit_code is not None else "")
        style = "bold" if g.status == "ok" else "bold red"
        rule = "-" * min(max(len(head), 15), 79)
        yield from ((rule, style), (head, style), (rule, style))
        if g.error:
            yield g.error, "red"
        if g.stdout:
            yield g.stdout.removesuffix("\n"), ""
        if g.stderr:
            yield g.stderr.removesuffix("\n"), "yellow"


def _node_lines(results) -> Iterator[Line]:
    """--no-fold: `node: line` for every output line, stdout then stderr, node by node."""
    for r in results:
        for line in r.stdout.splitlines():
            yield f"{r.node}: {line}", ""
        for line in r.stderr.splitlines():
            yield f"{r.node}: {line}", "yellow"
        if not r.ok:
            detail = r.error or (f"exit {r.exit_code}" if r.exit_code is not None else "")
            yield f"{r.node}: [{r.status}] {detail}".rstrip(), "red"


def _write(app: Application, lines: Iterable[Line]) -> None:
    """Styled through rich on a colour terminal; plain otherwise, without importing rich at all
    (it is a good part of a short run's start-up cost). Never markup, emoji or wrapping."""
    if app.no_color or not sys.stdout.isatty():
        for text, _style in lines:
            click.echo(text)
        return
    from rich.text import Text

    for text, style in lines:
        app.console.print(Text(text, style=style), soft_wrap=True)
