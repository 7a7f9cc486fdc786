"""`fleetctl lens shards` (the site's shards) and `fleetctl lens merge` (join the shards' windows)."""

from __future__ import annotations

from pathlib import Path

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lens.common import element, text
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.errors import EXIT_OK

max_hosts_option = click.option("--max-hosts", type=click.IntRange(2, 1_000_000), default=None,
                                help="Hosts per shard (default: lens.shard_max_hosts).")


@click.command("shards")
@common_options
@max_hosts_option
@pass_app
def shards_cmd(app: Application, max_hosts) -> int:
    """The site's lens shards: whole pods, each a `lens run NODESET` of its own, and the
    switches they share (what `lens merge` judges).

    \b
    Examples:
      fleetctl lens shards --max-hosts 1250
      fleetctl lens shards --format json | jq -r '.shards[].nodes'
    """
    from fleetctl.lens.shard import site_layout

    _, layout = site_layout(app.cluster, max_hosts)
    doc = layout.to_dict()
    app.emit(doc, lambda c: _render_layout(c, doc))
    return EXIT_OK


def _render_layout(console, doc: dict) -> None:
    from rich.table import Table

    t = Table(title=f"lens shards of at most {doc['max_hosts']} hosts", show_edge=False)
    for col in ("shard", "hosts", "pods", "nodes"):
        t.add_column(col)
    for s in doc["shards"]:
        t.add_row(text(s["name"]), text(s["hosts"]), text(s["pods"]), text(s["nodes"], 120))
    console.print(t)
    console.print(f"{len(doc['shared_switches'])} switches shared between shards (judged by "
                  "`lens merge`)")
    for name in doc["unmeasured_uplinks"]:
        console.print(text(f"warning: {name} has one switch group: its uplinks are crossed by "
                           "no path of its own", 300, "yellow"))


@click.command("merge")
@common_options
@click.option("--from", "directories", metavar="DIR", multiple=True,
              help="A shard coordinator's state directory (repeat; local, shared or synced).")
@click.option("--root", metavar="DIR", default=None,
              help="Every shard's state directory is DIR/<shard> (as `lens run --shard` makes "
                   "them under lens.state_dir).")
@max_hosts_option
@click.option("--once", is_flag=True, help="Merge the newest windows once, print, exit.")
@click.option("--window", "window_s", type=FiniteFloatRange(0.2, 60), default=1.0, show_default=True,
              help="How often to merge (seconds).")
@click.option("--stale", "stale_s", type=FiniteFloatRange(0.5, 3600), default=5.0, show_default=True,
              help="A shard window older than this is left out (and said).")
@click.option("--state-dir", metavar="DIR", default="/var/lib/fleetctl/lens-merge", show_default=True,
              help="Where the merged event log and status go.")
@pass_app
def merge_cmd(app: Application, directories, root, max_hosts, once, window_s, stale_s,
              state_dir) -> int:
    """Join the shards' windows: one finding per element however many shards name it, and the
    switches the shards share named from their pooled loss and delay (docs/lens.md, "Shards").

    \b
    Exit codes with --once: 0 every shard in, nothing found; 1 a shard missing or a finding;
    2 a critical finding. As a service (no --once) it runs until stopped; read its events with
    `fleetctl lens events --state-dir DIR`.

    \b
    Examples:
      fleetctl lens merge --once --from /srv/lens/shard-0 --from /srv/lens/shard-1
      fleetctl lens merge --root /var/lib/fleetctl/lens   # shards run with `lens run --shard`
    """
    from fleetctl.errors import UsageError
    from fleetctl.lens import shard

    if bool(directories) == bool(root):
        raise UsageError("give the shards' directories with --from, or --root, one of them")
    if root:
        _, layout = shard.site_layout(app.cluster, max_hosts)
        directories = [str(Path(root) / s.name) for s in layout.shards]
    if once:
        doc = shard.merge_once(app.cluster, list(directories), max_hosts, stale_s)
        app.emit(doc, lambda c: _render_merge(c, doc))
        return doc["exit_code"]
    from fleetctl.cli.signals import stop_on_signals
    from fleetctl.lens.service import log_line

    shard.merge_forever(app.cluster, list(directories), max_hosts, stale_s, state_dir, window_s,
                        stop_on_signals(), log_line)
    return EXIT_OK


def _render_merge(console, doc: dict) -> None:
    from rich.text import Text

    console.print(f"shards in: {len(doc['shards_used'])}, missing: {len(doc['shards_missing'])}")
    for path, why in sorted(doc["why_missing"].items()):
        console.print(Text.assemble(text(path, 200), ": ", text(why, 300, "yellow")))
    if not doc["findings"]:
        console.print("no findings")
    for f in doc["findings"]:
        console.print(Text.assemble(text(f["severity"]), " ", element(f["element"]), " ",
                                    text(f["metric"]), " confidence ", text(f["confidence"]),
                                    " shards ", text(", ".join(f["evidence"].get("shards", [])), 200)))
