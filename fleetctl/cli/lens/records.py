"""`fleetctl lens records`: the sampled per-probe debug records (lens.debug_records)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lens.common import existing_state_dir_option, number, state_directory, text
from fleetctl.errors import EXIT_OK


@click.command("records")
@common_options
@click.option("--node", "nodeset", metavar="NODESET", default=None,
              help="Only probes sent from or to these nodes.")
@click.option("--flow", type=click.IntRange(0, 2**31 - 1), default=None,
              help="Only this flow (its id, as in the run's flow table).")
@click.option("--since", metavar="WHEN", default=None,
              help="Only probes sent at or after WHEN: epoch, ISO time or an age (30s, 15m, 2h, 1d).")
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=100, show_default=True,
              help="The newest this many records that match.")
@existing_state_dir_option
@pass_app
def records_cmd(app: Application, nodeset, flow, since, limit, state_dir) -> int:
    """The sampled per-probe records lens keeps when lens.debug_records is set (every probe of
    a fixed share of flows, beside the summaries): what individual probes saw.

    \b
    Examples:
      fleetctl lens records --node node3 --since 10m
      fleetctl lens records --flow 1234 --limit 20
      fleetctl lens records --format json | jq '.records[] | select(.result != "answered")'
    """
    from fleetctl.checks import since_epoch
    from fleetctl.lens.debugstore import DIRECTORY, read_records
    from fleetctl.nodeset import parse_nodeset

    nodes = parse_nodeset(nodeset, what="--node") if nodeset else None
    when = since_epoch(since) if since else None
    doc = read_records(state_directory(app, state_dir) / DIRECTORY, since=when, nodes=nodes,
                       flow=flow, limit=limit)
    app.emit(doc, lambda c: _render(c, doc))
    return EXIT_OK


def _render(console, doc: dict) -> None:
    from rich.table import Table

    for s in doc["skipped"]:
        console.print(text(f"skipped {s['file']}: {s['error']}", 400, style="yellow"))
    rows = doc["records"]
    if not rows:
        console.print(text(f"no sampled records in {doc['directory']} (lens.debug_records is 0, "
                           "or nothing matched)", 1024))
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("sent (UTC)", "flow", "from", "to", "seq", "result", "rtt us", "raw fwd/back us"):
        t.add_column(col, no_wrap=col == "sent (UTC)")
    for r in rows:
        raw = "-" if r["fwd_raw_us"] is None else \
            f"{number(r['fwd_raw_us'])}/{number(r['back_raw_us'])}"
        t.add_row(r["time"][5:23].replace("T", " ") or "-", str(r["flow"]), text(r["src"]),
                  text(r["dst"]), str(r["seq"]),
                  text(r["result"], style="" if r["result"] == "answered" else "red"),
                  number(r["rtt_us"]), raw)
    console.print(t)
    console.print(f"{len(rows)} records from {doc['files_read']} of {doc['files']} files; times "
                  "are the sender's clock, raw one-way times include the two hosts' clock offset",
                  markup=False)
