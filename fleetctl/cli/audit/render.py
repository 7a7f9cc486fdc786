"""The human view of an audit report (`fleetctl audit run`): problems first, then a one-line summary."""

from __future__ import annotations

from rich.markup import escape

from fleetctl.checks.payload.common import RANK
from fleetctl.nodeset import fold

STYLE = {"fail": "bold red", "error": "magenta", "warn": "yellow", "ok": "green", "skipped": "dim"}


def render(console, report, data) -> None:
    sim = " [cyan](simulated GPUs: lab data, not NVML)[/cyan]" if report.simulated else ""
    console.print(f"[bold]fleetctl audit[/bold] {report.cluster} level={report.level}{sim}")
    ok_nodes = _render_nodes(console, data["nodes"])
    if report.fleet:
        console.print("[bold]fleet consistency[/bold]")
        for f in sorted(report.fleet, key=lambda f: f["status"] != "fail"):
            console.print(f"  [{STYLE.get(f['status'], '')}]{f['status']:5}[/] {f['code']} "
                          f"[bold]{f['nodes']}[/bold]: {escape(f['message'])}")
    if report.actions and "error" in report.actions:
        console.print(f"[bold]slurm[/bold] [bold red]no action taken[/]: {escape(report.actions['error'])}")
    elif report.actions:
        _render_actions(console, report.actions)
    if report.changes and report.changes["nodes"]:
        _render_changes(console, report.changes["nodes"])
    s = data["summary"]
    ok_text = f" ok: {fold(ok_nodes)}" if ok_nodes else ""
    console.print(f"[{STYLE[s['status']]}]{s['status'].upper()}[/] {s['nodes']} nodes: {s['fail']} fail, "
                  f"{s['error']} error, {s['warn']} warn, {s['ok']} ok;{ok_text} "
                  f"({data['elapsed_s']:.1f} s)")


def _render_nodes(console, nodes: list[dict]) -> list[str]:
    """Every node with a problem, its bad results worst first; returns the nodes that are ok."""
    ok_nodes = []
    for entry in nodes:
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
        for r in sorted(bad, key=lambda r: -RANK[r["status"]]):
            subject = f" {r['subject']}" if r.get("subject") else ""
            tag = " [cyan]\\[simulated][/cyan]" if r.get("simulated") else ""
            console.print(f"      [{STYLE[r['status']]}]{r['status']:5}[/] {r['code']}{escape(subject)}: "
                          f"{escape(r['message'])}{tag}")
    return ok_nodes


def _render_actions(console, a: dict) -> None:
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


def _render_changes(console, changes: dict) -> None:
    console.print("[bold]since the previous audit[/bold]")
    for node, ch in sorted(changes.items()):
        parts = [f"{ch['status'][0]} -> {ch['status'][1]}"]
        if ch["new"]:
            parts.append("new: " + ", ".join(ch["new"]))
        if ch["resolved"]:
            parts.append("resolved: " + ", ".join(ch["resolved"]))
        console.print(f"  {node}: {'; '.join(parts)}")
