"""`fleetctl audit run [NODESET]` (also `fleetctl audit [NODESET]`): node checks across the fleet,
fleet consistency, Slurm drain/resume, and with --mesh the NIC-mesh probe."""

from __future__ import annotations

import functools
import time

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import MAX_TIMEOUT_S, FiniteFloatRange, seconds
from fleetctl.fanout.registry import transports

ANALYZE_USAGE = "fleetctl audit analyze FILE.h5 [--solver NAME] [--out FILE.h5]"


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
@click.option("--prom", type=click.Path(dir_okay=False), help="Write a Prometheus textfile-collector file.")
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
@pass_app
def run(app: Application, nodeset, level, escalate, local, node, transport, since, budget, drain,
        resume, ack_kernel_log, dry_run, idle_only, prom, history, mesh, mesh_only, duration, rate, out,
        solver) -> int:
    """Check node health (GPU, Xid, NICs, host, deep tests) and fleet consistency.

    With --mesh (or --mesh-only), also probe between all NIC pairs and triangulate loss, delay
    and dead links to a link direction, port, switch, NIC or host (`fleetctl audit analyze
    FILE.h5` re-analyses a stored run).

    Exit codes: 0 healthy, 1 warnings only (or nodes that could not be checked), 2 failures
    (or network findings) found, 3 the audit itself could not run.
    """
    from pathlib import Path

    from fleetctl.atomic import check_writable
    from fleetctl.audit import apply_actions, build_report, collect, collect_local, plan_actions
    from fleetctl.audit.actions import acknowledgements
    from fleetctl.audit.export import changes_since, previous_report, write_outputs
    from fleetctl.audit.runner import site_nodes
    from fleetctl.checks import since_epoch
    from fleetctl.cli.audit import mesh_view
    from fleetctl.errors import EXIT_ERROR, EXIT_FAILURES, EXIT_OK, FleetctlError, SlurmError, UsageError

    # Every output is proven writable before any slow work or Slurm action: a drain followed by
    # "cannot write --out" would leave the operator with actions taken and no report of them.
    if out:
        check_writable(out, "--out")
    if prom:
        check_writable(prom, "--prom")
    if history:
        check_writable(history, "--history", directory=True)

    if len(nodeset) == 2 and nodeset[0] == "analyze":
        raise UsageError(f"`analyze` is a subcommand: {ANALYZE_USAGE} (its options after it); "
                         "to audit a node named analyze: fleetctl audit run analyze")
    if len(nodeset) > 1:
        raise UsageError(f"one node set expected, got {len(nodeset)} words: {' '.join(nodeset)} "
                         "(join them with commas)")
    nodeset = nodeset[0] if nodeset else None
    if mesh_only and local:
        raise UsageError("--mesh-only probes between nodes: it cannot run with --local")
    site = app.site_or_slurm(alone=local)
    if mesh or mesh_only:
        mesh_nodes = site_nodes(site, nodeset)
    if mesh_only:
        data = mesh_view.run_mesh(app, site, mesh_nodes, transport, duration, rate, out, solver)
        app.emit(data, lambda console: mesh_view.render(console, data))
        return mesh_exit_code(data)
    since_ts = since_epoch(since)
    started = time.time()
    backend = None
    if drain or resume or idle_only:
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(site)

    if local:
        if nodeset:
            raise UsageError("--local checks this machine: give --node NAME instead of a node set")
        from fleetctl.audit.hooks import hook_node
        from fleetctl.nodeset import check_node_name

        name = check_node_name(node, what="--node") if node else hook_node()
        ack = acknowledgements(backend, [name], resume, ack_kernel_log, dry_run)
        outcomes = {name: collect_local(site, name, level, since=since_ts, budget_s=budget, ack=ack,
                                        alone=True)}
    else:
        nodes = site_nodes(site, nodeset)
        if idle_only:
            idle = {n.name for n in backend.lookup(nodes).found.values() if n.state == "IDLE"}
            nodes = [n for n in nodes if n in idle]
            if not nodes:
                app.emit({"schema": "fleetctl.audit/1", "summary": {"nodes": 0}, "nodes": []},
                         lambda c: c.print("no idle nodes to audit"))
                return EXIT_OK
        ack = acknowledgements(backend, nodes, resume, ack_kernel_log, dry_run)
        outcomes = _collect_with_progress(app, site, nodes, level, transport, since_ts, budget, escalate,
                                          functools.partial(collect, ack=ack))

    report = build_report(site, outcomes, level=level, started=started)
    # From the first Slurm action on, a failure is reported with the actions taken (exit 3), never
    # raised past them: the operator must learn what was drained even when the rest went wrong.
    errors: list[dict] = []
    if backend is not None and (drain or resume):
        try:
            plan = plan_actions(report, backend, drain=drain, resume=resume, dry_run=dry_run)
        except SlurmError as exc:
            report.actions = {"dry_run": dry_run, "error": exc.message}
            errors.append({"step": "slurm", "message": exc.message})
        else:
            report.actions = apply_actions(plan, backend).to_dict()
            if not plan.complete:
                errors.append({"step": "slurm", "message": f"{len(plan.failed)} Slurm action(s) failed"})
    if history:
        report.changes = changes_since(previous_report(Path(history)), report)
    data = report.to_dict()
    errors += write_outputs(data, report, history, prom)
    if mesh:
        try:
            data["mesh"] = mesh_view.run_mesh(app, site, mesh_nodes, transport, duration, rate, out, solver)
        except FleetctlError as exc:
            errors.append({"step": "mesh", "message": exc.message})
    if errors:
        data["errors"] = errors
    notes = _site_notes(site, local, outcomes)
    if notes:
        data["notes"] = notes

    def render_all(console):
        from rich.markup import escape

        from fleetctl.cli.audit.render import render

        render(console, report, data)
        for note in notes:
            console.print(f"[cyan]note[/] {escape(note)}")
        if "mesh" in data:
            mesh_view.render(console, data["mesh"])
        for e in errors:
            console.print(f"[bold red]error[/] {e['step']}: {escape(e['message'])}")

    app.emit(data, render_all)
    if errors:
        return EXIT_ERROR  # the job was not (entirely) done; what was done is in the report
    if "mesh" in data:
        return max(report.exit_code, mesh_exit_code(data["mesh"]))
    return report.exit_code


def _site_notes(site, local: bool, outcomes: dict) -> list[str]:
    """What the report should say about the site view itself: facts inferred from Slurm (no site
    file), a node checked alone because no class names it."""
    from fleetctl.inventory.from_slurm import inferred

    notes = [f"inferred: {n}" for n in inferred(site)]
    if local:
        notes += [f"node {n} is in no node class of {site.source}: checked by itself (no class "
                  "expectations, no fleet comparison)" for n in outcomes if site.node_class(n) is None]
    return notes


def mesh_exit_code(data: dict) -> int:
    from fleetctl.meshrun.analyze import exit_code

    return exit_code(data)


def _collect_with_progress(app, site, nodes, level, transport, since_ts, budget, escalate, collect):
    from fleetctl.cli.progress import ProgressBar
    from fleetctl.fanout import get_transport

    # A bar from the start, and only for eight nodes or more: an audit's nodes answer together.
    with get_transport(transport, site=site) as t, \
            ProgressBar(app, len(nodes), "audit", min_total=8, after_s=0.0) as bar:
        return collect(site, nodes, level, transport=t, since=since_ts, budget_s=budget,
                       escalate=escalate, on_result=bar.advance)
