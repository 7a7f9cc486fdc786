"""`fleetctl audit run [NODESET]` (also `fleetctl audit [NODESET]`): node checks across the fleet,
fleet consistency, Slurm drain/resume, and with --mesh the NIC-mesh probe. The work is
fleetctl.audit.command.run_audit; this module parses options into AuditOptions and renders."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import MAX_TIMEOUT_S, FiniteFloatRange, seconds
from fleetctl.fanout.registry import transports


@click.command("run")
@common_options
@click.argument("nodeset", nargs=-1, metavar="[NODESET]")
@click.option("--level", type=click.Choice(["quick", "standard", "deep"]), default="standard",
              show_default=True, help="quick fits a Slurm prolog; deep runs DCGM, NCCL and ib_write_bw tests.")
@click.option("--escalate", is_flag=True, help="Re-run suspects (warnings, unfinished checks) at the next level.")
@click.option("--local", "local", is_flag=True, help="Check this machine in-process (no fan-out).")
@click.option("--node", metavar="NAME", help="With --local: the node name (default SLURMD_NODENAME or hostname).")
@click.option("-t", "--transport", type=click.Choice(transports.names()), default=None,
              help="Fan-out transport (default: the site's access.transport).")
@click.option("--since", metavar="WHEN", help="Judge kernel-log lines from then on: epoch, ISO time or 15m/2h/1d.")
@click.option("--budget", type=seconds(0.1, MAX_TIMEOUT_S), metavar="S", help="Hard time budget per node (default by level).")
@click.option("--drain", is_flag=True, help="Drain nodes with failures (reason `<prefix>:<code> <text>`).")
@click.option("--resume", is_flag=True, help="Resume nodes fleetctl drained that now pass (a node drained for "
              "an Xid: its kernel log up to now is acknowledged as repaired).")
@click.option("--ack-kernel-log", is_flag=True, help="Acknowledge the audited nodes' kernel-log errors up to "
              "now as repaired (e.g. by a GPU reset without a reboot); later ones count again.")
@click.option("--dry-run", is_flag=True, help="With --drain/--resume: show the actions, change nothing.")
@click.option("--idle-only", is_flag=True, help="Audit only nodes Slurm reports idle (for cron).")
@click.option("--prometheus", "--prom", "prom", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write a Prometheus textfile-collector file.")
@click.option("--history", type=click.Path(file_okay=False), help="Keep JSON reports here; show what changed.")
@click.option("--mesh", is_flag=True, help="Also probe the NIC mesh and locate network faults.")
@click.option("--mesh-only", is_flag=True, help="Probe the NIC mesh only (no node checks).")
@click.option("--duration", type=seconds(0.1, 3600), default=5.0, show_default=True, metavar="S",
              help="Mesh: seconds of probing.")
@click.option("--rate", type=FiniteFloatRange(0.1, 1000), default=None, metavar="HZ",
              help="Mesh: probes per second per NIC pair (default: from the site's mesh.probe_budget_pps; "
                   "above the budget it warns).")
@click.option("--out", type=click.Path(dir_okay=False), metavar="FILE.h5",
              help="Mesh: write the run (records, matrices, clock, findings) to this HDF5 file.")
@click.option("--solver", default=None, metavar="NAME",
              help="Mesh: triangulation solver (nnls, l1, vote, netbouncer, ...; default nnls).")
@click.option("--wide", is_flag=True, help="One block per node instead of nodes with the same problems folded.")
@pass_app
def run(app: Application, **options) -> int:
    """Check node health (GPU, Xid, NICs, host, deep tests) and fleet consistency.

    With --mesh (or --mesh-only), also probe between all NIC pairs and triangulate loss, delay
    and dead links to a link direction, port, switch, NIC or host (`fleetctl audit analyze
    FILE.h5` re-analyses a stored run).

    Exit codes: 0 healthy, 1 warnings only (or nodes that could not be checked), 2 failures
    (or network findings) found, 3 the audit itself could not run.

    \b
    Examples:
      fleetctl audit                                 # every node, standard level
      fleetctl audit 'gpu[001-128]' --level quick --drain --resume --since 1h
      fleetctl audit --mesh-only --duration 10 --out run.h5
      fleetctl audit --local --level quick           # this machine, in-process
    """
    from fleetctl.audit.command import AuditOptions, check_outputs, run_audit
    from fleetctl.cli.audit import mesh_view

    wide = options.pop("wide")
    options["nodeset"] = tuple(app.nodes(word) for word in options["nodeset"])  # @groups
    opts = AuditOptions(**options)
    check_outputs(opts)  # before anything else, the site file included
    opts.checked_nodeset()
    cluster = app.site_or_slurm(alone=opts.local)
    result = run_audit(cluster, opts, bar=lambda total: _bar(app, total), progress=app.info)
    data = result.data
    if opts.mesh_only:
        app.emit(data, lambda console: mesh_view.render(console, data))
        return result.exit_code
    if result.report is None:  # --idle-only, no idle node
        app.emit(data, lambda c: c.print("no idle nodes to audit"))
        return result.exit_code

    def render_all(console):
        from rich.markup import escape

        from fleetctl.cli.audit.render import render

        render(console, result.report, data, wide=wide)
        for note in result.notes:
            console.print(f"[cyan]note[/] {escape(note)}")
        if "mesh" in data:
            mesh_view.render(console, data["mesh"])
        for e in result.errors:
            console.print(f"[bold red]error[/] {e['step']}: {escape(e['message'])}")

    app.emit(data, render_all)
    return result.exit_code


def _bar(app: Application, total: int):
    from fleetctl.cli.progress import ProgressBar

    # A bar from the start, and only for eight nodes or more: an audit's nodes answer together.
    return ProgressBar(app, total, "audit", min_total=8, after_s=0.0)
