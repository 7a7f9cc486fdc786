"""`fleetctl site discover [NODESET] [--out site.toml | --diff site.toml]`. The work is
fleetctl.discover.command.discover_site; this module parses options into DiscoverOptions and renders."""

from __future__ import annotations

import os

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import seconds
from fleetctl.fanout.registry import transports


@click.command("discover")
@common_options
@click.argument("nodeset", required=False)
@click.option("--out", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the site file here (default: print it).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--diff", "against", type=click.Path(dir_okay=False, exists=True), metavar="SITE",
              help="Show what changed against this site file (a topology.conf with --slurm-topology) instead "
                   "(exit 1 when something did).")
@click.option("-t", "--transport", type=click.Choice(transports.names()), default=None,
              help="Fan-out transport (default: the site's, else srun).")
@click.option("--netns", metavar="TEMPLATE", help="Local transport: each node's network namespace "
              "(`{node}` is replaced; the lab's is fl-{node}).")
@click.option("--switches", metavar="NODESET", help="Linux switches running lldpd to ask as well "
              "(SONiC, Cumulus, the lab's), through the same transport.")
@click.option("--lldp-socket", metavar="TEMPLATE", envvar="FLEETCTL_LLDP_SOCKET",
              help="lldpd control socket on each node (`{node}` replaced; env FLEETCTL_LLDP_SOCKET; "
                   "default lldpd's own).")
@click.option("--ibnetdiscover", "ibnet", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="ibnetdiscover output of the InfiniBand subnet.")
@click.option("--node-name-map", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="GUID -> name map for --ibnetdiscover (ibnetdiscover's --node-name-map format).")
@click.option("--source", type=click.Choice(["auto", "lldp", "trace"]), default="auto", show_default=True,
              help="Fabric source: lldp; trace (TTL-traced paths of a routed fabric, LLDP ignored); auto: "
                   "LLDP, and traces when LLDP gives no switch-to-switch cable on a routed fabric.")
@click.option("--trace", is_flag=True, help="With --source auto: trace the paths even when LLDP gives cabling.")
@click.option("--nics", metavar="GLOBS", help="Fabric NICs: exactly these (comma-separated globs).")
@click.option("--exclude-nics", metavar="GLOBS", help="Never these NICs (comma-separated globs).")
@click.option("--slurm-topology", type=click.Choice(["tree", "block"]), default=None,
              help="Write Slurm's topology.conf for topology/tree or topology/block instead of a site "
                   "file (--out FILE, --diff FILE as for a site file).")
@click.option("--name", "cluster_name", metavar="NAME", help="Cluster name (default: Slurm's ClusterName).")
@click.option("--budget", type=seconds(1, 600), default=20.0, show_default=True, metavar="S",
              help="Time budget of the collection on each node.")
@pass_app
def discover(app: Application, **options) -> int:
    """Collect GPUs, NICs, CPUs, memory and LLDP neighbours from every node (srun, ssh or local),
    group nodes into classes by hardware, read the fabric (LLDP, an ibnetdiscover file, TTL-traced
    paths of a routed fabric) and write a
    commented site file that `fleetctl config check` accepts.

    Without NODESET: the nodes of the site file in use, else every node Slurm knows.

    \b
    Examples:
      fleetctl site discover 'gpu[0001-1250]' --out /etc/fleetctl/site.toml
      fleetctl site discover --diff /etc/fleetctl/site.toml     # what changed since
      fleetctl site discover --ibnetdiscover fabric.topo --node-name-map guids.map --out site.toml
      fleetctl site discover --slurm-topology tree --out /etc/slurm/topology.conf
      fleetctl site discover --slurm-topology block --diff /etc/slurm/topology.conf
    """
    from fleetctl.discover.command import discover_site
    from fleetctl.discover.options import DiscoverOptions
    from fleetctl.errors import EXIT_OK

    opts = DiscoverOptions(**{**options, "nodeset": app.nodes(options["nodeset"])})
    opts.check()
    site_given = bool(app.site_path or os.environ.get("FLEETCTL_SITE"))
    base = _base_site(app, need=not opts.nodeset) if opts.wants_base(site_given) else None
    found = discover_site(base, opts)
    if opts.against:
        render = _render_topology_diff if opts.slurm_topology else _render_diff
        app.emit(found.changes, lambda console: render(console, found.changes))
        return found.exit_code
    data = found.data
    if opts.slurm_topology:
        app.emit(data, lambda console: _render_topology(console, data))
        return EXIT_OK
    if app.json:
        app.emit(data)
    elif opts.out:
        _render_summary(app.console, data)
    else:
        from fleetctl.config import parse_site

        parse_site(found.text, source="<discovered>")  # what `config check` would say
        click.echo(found.text, nl=False)
        _render_summary(app.err_console, data)
    return EXIT_OK


def _base_site(app: Application, need: bool):
    """The site file in use, else Slurm's view (for the node list and srun); None when neither is
    needed and neither is there."""
    from fleetctl.errors import ConfigError, SlurmError

    try:
        return app.site_or_slurm()
    except (ConfigError, SlurmError):
        if need:
            raise
        return None


def _render_summary(console, data: dict) -> None:
    from rich.markup import escape

    s = data["summary"]
    where = f" -> {data['file']}" if data.get("file") else ""
    console.print(f"[green]discovered[/green] {s['nodes']} nodes in {s['classes']} classes, {s['switches']} "
                  f"switches, {s['links']} links ({', '.join(s['sources'])}; {s['elapsed_s']:.1f} s){where}")
    for c in data["classes"]:
        nic_text = ", ".join(n["name"] for n in c["nics"]) or "none"
        console.print(f"  class {c['name']}: {c['nodes']} (GPUs {c['gpus'].get('count', 0)}, NICs {nic_text})"
                      + (f", {len(c['deviations'])} deviations" if c["deviations"] else ""))
    for node, why in data["failed"].items():
        console.print(f"  [magenta]no facts[/] {node}: {escape(why)}")
    for note in data["notes"][:20]:
        console.print(f"  [cyan]note[/] {escape(note)}")


def _render_topology(console, data: dict) -> None:
    if data.get("file"):
        console.print(f"[green]wrote[/green] {data['file']}: topology/{data['plugin']}, "
                      f"{len(data['leaves'])} leaves, {len(data['switches'])} switches above them")
    else:
        click.echo(data["text"], nl=False)


def _diff_header(console, d: dict) -> bool:
    """The first line of a --diff report; False when there is nothing more to say."""
    from rich.markup import escape

    if not d["changes"]:
        console.print(f"[green]no changes[/green] against {escape(d['against'])}")
        return False
    console.print(f"[yellow]{d['changes']} changes[/yellow] against {escape(d['against'])}")
    return True


def _render_topology_diff(console, d: dict) -> None:
    if not _diff_header(console, d):
        return
    for m in d["moved"]:
        console.print(f"  ~ node {m['node']} moved: {m['from']} -> {m['to']}")
    for n in d["new_nodes"]:
        console.print(f"  + node {n}")
    for n in d["missing_nodes"]:
        console.print(f"  - node {n} (did not answer, or no switch cable seen)")
    for s in d["new_switches"]:
        console.print(f"  + switch {s}")
    for s in d["missing_switches"]:
        console.print(f"  - switch {s}")
    for c in d["children"]:
        console.print(f"  ~ switch {c['switch']}: {','.join(c['from'])} -> {','.join(c['to'])}")


def _render_diff(console, d: dict) -> None:
    from rich.markup import escape

    if not _diff_header(console, d):
        return
    for n in d["new_nodes"]:
        console.print(f"  + node {n} (in no node class)")
    for m in d["missing_nodes"]:
        console.print(f"  - node {m['node']}: {escape(m['why'])}")
    for c in d["nics"] + d["gpus"]:
        subject = f"{c['node']}:{c['nic']}" if "nic" in c else f"{c['node']} GPUs"
        if c["what"] == "missing":
            console.print(f"  - NIC {subject} is missing")
        else:
            console.print(f"  ~ {subject} {c['what']} {c['expected']} -> {c['value']}")
    for lid in d["missing_links"]:
        console.print(f"  - link {lid} (not seen: down or removed)")
    for lid in d["new_links"]:
        console.print(f"  + link {lid}")
    for m in d["moved"]:
        console.print(f"  ~ cable of {m['nic']} moved: {m['from']} -> {m['to']}")
