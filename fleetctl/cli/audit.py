"""`fleetctl audit [NODESET]`: node checks across the fleet, fleet consistency, Slurm drain/resume."""

from __future__ import annotations

import functools
import os
import socket
import time

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import MAX_TIMEOUT_S, FiniteFloatRange, seconds

STYLE = {"fail": "bold red", "error": "magenta", "warn": "yellow", "ok": "green", "skipped": "dim"}


@click.command("audit")
@common_options
@click.argument("nodeset", nargs=-1, metavar="[NODESET | analyze FILE.h5]")
@click.option("--level", type=click.Choice(["quick", "standard", "deep"]), default="standard",
              show_default=True, help="quick fits a Slurm prolog; deep runs DCGM, NCCL and ib_write_bw tests.")
@click.option("--escalate", is_flag=True, help="Re-run suspects (warnings, unfinished checks) at the next level.")
@click.option("--local", "local", is_flag=True, help="Check this machine in-process (no fan-out).")
@click.option("--node", metavar="NAME", help="With --local: the node name (default SLURMD_NODENAME or hostname).")
@click.option("-t", "--transport", type=click.Choice(["ssh", "srun", "local"]), default=None,
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
              help="Mesh: probes per second per NIC pair (default: from the site's mesh.probe_budget_pps).")
@click.option("--out", type=click.Path(dir_okay=False), metavar="FILE.h5",
              help="Mesh: write the run (records, matrices, clock, findings) to this HDF5 file.")
@click.option("--solver", default=None, metavar="NAME",
              help="Mesh: triangulation solver (nnls, l1, vote, netbouncer, ...; default nnls).")
@pass_app
def audit(app: Application, nodeset, level, escalate, local, node, transport, since, budget, drain,
          resume, ack_kernel_log, dry_run, idle_only, prom, history, mesh, mesh_only, duration, rate, out,
          solver) -> int:
    """Check node health (GPU, Xid, NICs, host, deep tests) and fleet consistency.

    With --mesh (or --mesh-only), also probe between all NIC pairs and triangulate loss, delay
    and dead links to a link direction, port, switch, NIC or host. `fleetctl audit analyze
    FILE.h5 [--solver NAME] [--out NEW.h5]` re-analyses a stored probe run.

    Exit codes: 0 healthy, 1 warnings only (or nodes that could not be checked), 2 failures
    (or network findings) found, 3 the audit itself could not run.
    """
    from pathlib import Path

    from fleetctl.atomic import check_writable
    from fleetctl.audit import apply_actions, build_report, collect, collect_local, plan_actions
    from fleetctl.audit.export import changes_since, previous_report
    from fleetctl.checks import since_epoch
    from fleetctl.errors import EXIT_ERROR, FleetctlError, SlurmError, UsageError
    from fleetctl.cli import mesh_view

    # Every output is proven writable before any slow work or Slurm action: a drain followed by
    # "cannot write --out" would leave the operator with actions taken and no report of them.
    if out:
        check_writable(out, "--out")
    if prom:
        check_writable(prom, "--prom")
    if history:
        check_writable(history, "--history", directory=True)

    if nodeset and nodeset[0] == "analyze":
        if len(nodeset) != 2:
            raise UsageError("usage: fleetctl audit analyze FILE.h5 [--solver NAME] [--out FILE.h5]")
        data = mesh_view.analyze_file(nodeset[1], solver, out)
        app.emit(data, lambda console: mesh_view.render(console, data))
        return mesh_view.exit_code(data)
    if len(nodeset) > 1:
        raise UsageError(f"one node set expected, got {len(nodeset)} words: {' '.join(nodeset)} "
                         "(join them with commas)")
    nodeset = nodeset[0] if nodeset else None
    if mesh_only and local:
        raise UsageError("--mesh-only probes between nodes: it cannot run with --local")
    site = app.site
    if mesh or mesh_only:
        mesh_nodes = _site_nodes(site, nodeset)
    if mesh_only:
        data = mesh_view.run_mesh(app, site, mesh_nodes, transport, duration, rate, out,
                                  solver or "nnls")
        app.emit(data, lambda console: mesh_view.render(console, data))
        return mesh_view.exit_code(data)
    since_ts = since_epoch(since)
    started = time.time()
    backend = None
    if drain or resume or idle_only:
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(site)

    if local:
        if nodeset:
            raise UsageError("--local checks this machine: give --node NAME instead of a node set")
        name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        from fleetctl.nodeset import check_node_name

        check_node_name(name, what="--node" if node else "node name of this machine")
        ack = _acknowledgements(backend, [name], resume, ack_kernel_log, dry_run)
        outcomes = {name: collect_local(site, name, level, since=since_ts, budget_s=budget, ack=ack)}
    else:
        nodes = _site_nodes(site, nodeset)
        if idle_only:
            idle = {n.name for n in backend.lookup(nodes).found.values() if n.state == "IDLE"}
            nodes = [n for n in nodes if n in idle]
            if not nodes:
                app.emit({"schema": "fleetctl.audit/1", "summary": {"nodes": 0}, "nodes": []},
                         lambda c: c.print("no idle nodes to audit"))
                return 0
        ack = _acknowledgements(backend, nodes, resume, ack_kernel_log, dry_run)
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
    errors += _write_outputs(data, report, history, prom)
    if mesh:
        try:
            data["mesh"] = mesh_view.run_mesh(app, site, mesh_nodes, transport, duration, rate, out,
                                              solver or "nnls")
        except FleetctlError as exc:
            errors.append({"step": "mesh", "message": exc.message})
    if errors:
        data["errors"] = errors

    def render_all(console):
        from rich.markup import escape

        render(console, report, data)
        if "mesh" in data:
            mesh_view.render(console, data["mesh"])
        for e in errors:
            console.print(f"[bold red]error[/] {e['step']}: {escape(e['message'])}")

    app.emit(data, render_all)
    if errors:
        return EXIT_ERROR  # the job was not (entirely) done; what was done is in the report
    if "mesh" in data and data["mesh"]["findings"]:
        return max(report.exit_code, mesh_view.exit_code(data["mesh"]))
    return report.exit_code


def _write_outputs(data: dict, report, history: str | None, prom: str | None) -> list[dict]:
    """Write the history report and the Prometheus file; each failure is returned, not raised."""
    from pathlib import Path

    from fleetctl.audit.export import prometheus_text, write_atomic, write_history
    from fleetctl.errors import FleetctlError

    errors = []
    if history:
        try:
            write_history(Path(history), data)
        except FleetctlError as exc:
            errors.append({"step": "history", "message": exc.message})
    if prom:
        try:
            write_atomic(Path(prom), prometheus_text(report))
        except FleetctlError as exc:
            errors.append({"step": "prom", "message": exc.message})
    return errors


def _site_nodes(site, nodeset: str | None) -> list[str]:
    """The nodes of NODESET (default: all of the site file), each of which the site file must know."""
    from fleetctl.errors import UsageError
    from fleetctl.nodeset import parse_nodeset

    nodes = list(parse_nodeset(nodeset)) if nodeset else list(site.nodes)
    unknown = [n for n in nodes if site.node_class(n) is None]
    if unknown:
        raise UsageError(f"nodes not in the site file {site.source}: {','.join(unknown[:5])}")
    return nodes


def _acknowledgements(backend, nodes: list[str], resume: bool, ack_all: bool, dry_run: bool) -> dict | None:
    """Which nodes acknowledge their kernel log in this audit: all of them with --ack-kernel-log; with
    --resume, those fleetctl drained for an Xid (resuming them is the operator saying it was repaired).
    Nothing with --dry-run: a dry run changes no node's state."""
    if dry_run:
        return None
    if ack_all:
        return {"by": "fleetctl audit --ack-kernel-log", "nodes": list(nodes)}
    if not resume or backend is None:
        return None
    from fleetctl.slurm.reasons import parse_reason

    drained_for_xid = []
    for state in backend.lookup(nodes).found.values():
        reason = parse_reason(state.reason, backend.drain_prefix) if state.drained else None
        if reason is not None and reason.code.startswith(("xid.", "sxid.")):
            drained_for_xid.append(state.name)
    return {"by": "fleetctl audit --resume", "nodes": drained_for_xid} if drained_for_xid else None


def _collect_with_progress(app, site, nodes, level, transport, since_ts, budget, escalate, collect):
    from fleetctl.fanout import get_transport

    t = get_transport(transport, site=site)
    if app.json or len(nodes) < 8 or not app.err_console.is_terminal:
        with t:
            return collect(site, nodes, level, transport=t, since=since_ts, budget_s=budget,
                           escalate=escalate)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with t, Progress(TextColumn("audit"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                     console=app.err_console, transient=True) as progress:
        task = progress.add_task("audit", total=len(nodes))
        return collect(site, nodes, level, transport=t, since=since_ts, budget_s=budget,
                       escalate=escalate, on_result=lambda _r: progress.advance(task))


def render(console, report, data) -> None:
    from rich.markup import escape

    from fleetctl.nodeset import fold

    sim = " [cyan](simulated GPUs: lab data, not NVML)[/cyan]" if report.simulated else ""
    console.print(f"[bold]fleetctl audit[/bold] {report.cluster} level={report.level}{sim}")
    ok_nodes = []
    for entry in data["nodes"]:
        status = entry["status"]
        if status == "ok" and not entry["error"]:
            ok_nodes.append(entry["node"])
            continue
        head = f"[{STYLE[status]}]{status.upper():5}[/] [bold]{entry['node']}[/bold]"
        if entry["action"] not in ("none", None):
            head += f"  action: {entry['action']}"
        if entry["escalated_from"]:
            head += f"  (escalated from {', '.join(entry['escalated_from'])} to {entry['level']})"
        console.print(head)
        if entry["error"]:
            console.print(f"      [magenta]{entry['transport']}[/]: {escape(entry['error'])}")
        bad = [r for r in entry["results"] if r["status"] in ("fail", "error", "warn")]
        for r in sorted(bad, key=lambda r: ("fail", "error", "warn").index(r["status"])):
            subject = f" {r['subject']}" if r.get("subject") else ""
            tag = " [cyan]\\[simulated][/cyan]" if r.get("simulated") else ""
            console.print(f"      [{STYLE[r['status']]}]{r['status']:5}[/] {r['code']}{escape(subject)}: "
                          f"{escape(r['message'])}{tag}")
    if report.fleet:
        console.print("[bold]fleet consistency[/bold]")
        for f in sorted(report.fleet, key=lambda f: f["status"] != "fail"):
            console.print(f"  [{STYLE.get(f['status'], '')}]{f['status']:5}[/] {f['code']} "
                          f"[bold]{f['nodes']}[/bold]: {escape(f['message'])}")
    if report.actions and "error" in report.actions:
        console.print(f"[bold]slurm[/bold] [bold red]no action taken[/]: {escape(report.actions['error'])}")
    elif report.actions:
        a = report.actions
        verb = "would drain" if a["dry_run"] else "drained"
        drains = [d["node"] for d in a["drain"]] if a["dry_run"] else a["drained"]
        resumes = a["resume"] if a["dry_run"] else a["resumed"]
        if drains:
            console.print(f"[bold]slurm[/bold] {verb} {fold(drains)}")
        if resumes:
            console.print(f"[bold]slurm[/bold] {'would resume' if a['dry_run'] else 'resumed'} {fold(resumes)}")
        if a.get("not_responding"):
            console.print(f"[bold]slurm[/bold] {fold(a['not_responding'])}: slurmd not answering slurmctld's "
                          "ping yet (idle*): check slurmd on the node")
        for node, why in sorted(a["skipped"].items()):
            console.print(f"[bold]slurm[/bold] left {node} alone: {escape(why)}")
        if a.get("unknown"):
            console.print(f"[bold]slurm[/bold] [magenta]not known to Slurm[/]: {fold(a['unknown'])}")
        for node, why in sorted(a.get("failed", {}).items()):
            console.print(f"[bold]slurm[/bold] [bold red]FAILED[/] {node}: {escape(why)}")
    if report.changes and report.changes["nodes"]:
        console.print("[bold]since the previous audit[/bold]")
        for node, ch in sorted(report.changes["nodes"].items()):
            parts = [f"{ch['status'][0]} -> {ch['status'][1]}"]
            if ch["new"]:
                parts.append("new: " + ", ".join(ch["new"]))
            if ch["resolved"]:
                parts.append("resolved: " + ", ".join(ch["resolved"]))
            console.print(f"  {node}: {'; '.join(parts)}")
    s = data["summary"]
    ok_text = f" ok: {fold(ok_nodes)}" if ok_nodes else ""
    console.print(f"[{STYLE[s['status']]}]{s['status'].upper()}[/] {s['nodes']} nodes: {s['fail']} fail, "
                  f"{s['error']} error, {s['warn']} warn, {s['ok']} ok;{ok_text} "
                  f"({data['elapsed_s']:.1f} s)")
