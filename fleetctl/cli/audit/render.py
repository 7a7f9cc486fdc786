"""The human view of an audit report (`fleetctl audit run`): problems first, then a one-line summary."""

from __future__ import annotations

from rich.markup import escape

from fleetctl.checks.payload.common import RANK
from fleetctl.fanout.fold import generalize_error
from fleetctl.nodeset import fold

STYLE = {"fail": "bold red", "error": "magenta", "warn": "yellow", "ok": "green", "skipped": "dim"}


def render(console, report, data, *, wide: bool = False) -> None:
    """Nodes with the same problems share one block under their folded node set (as `clush -b`
    does); `wide` gives every node its own block."""
    sim = " [cyan](simulated GPUs: lab data, not NVML)[/cyan]" if report.simulated else ""
    console.print(f"[bold]fleetctl audit[/bold] {report.cluster} level={report.level}{sim}")
    ok_nodes = _render_nodes(console, data["nodes"], wide)
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
        _render_changes(console, report.changes["nodes"], wide)
    s = data["summary"]
    ok_text = f" ok: {fold(ok_nodes)}" if ok_nodes else ""
    console.print(f"[{STYLE[s['status']]}]{s['status'].upper()}[/] {s['nodes']} nodes: {s['fail']} fail, "
                  f"{s['error']} error, {s['warn']} warn, {s['ok']} ok;{ok_text} "
                  f"({data['elapsed_s']:.1f} s)")


def _render_nodes(console, nodes: list[dict], wide: bool) -> list[str]:
    """Every node with a problem, its bad results worst first, nodes with identical problems folded
    together; returns the nodes that are ok."""
    ok_nodes: list[str] = []
    groups: dict[tuple, list[dict]] = {}
    for entry in nodes:
        if entry["status"] == "ok" and not entry["error"]:
            ok_nodes.append(entry["node"])
        else:
            groups.setdefault((entry["node"],) if wide else _problem(entry), []).append(entry)
    for entries in groups.values():
        _render_entry(console, entries[0], [e["node"] for e in entries])
    return ok_nodes


def _bad_results(entry: dict) -> list[dict]:
    bad = [r for r in entry["results"] if r["status"] in ("fail", "error", "warn")]
    return sorted(bad, key=lambda r: -RANK[r["status"]])


def _problem(entry: dict) -> tuple:
    """What a node's block shows: nodes with equal keys print the same block."""
    results = tuple((r["status"], r["code"], r.get("subject") or "", r["message"], bool(r.get("simulated")))
                    for r in _bad_results(entry))
    return (entry["status"], entry["action"], tuple(entry["escalated_from"]), entry["level"],
            entry["transport"], generalize_error(entry["error"], entry["node"]), results)


def _render_entry(console, entry: dict, names: list[str]) -> None:
    status = entry["status"]
    who = f"{fold(names)} ({len(names)})" if len(names) > 1 else names[0]
    head = f"[{STYLE[status]}]{status.upper():5}[/] [bold]{escape(who)}[/bold]"
    if entry["action"] not in ("none", None):
        head += f"  action: {entry['action']}"
    if entry["escalated_from"]:
        head += f"  (escalated from {', '.join(entry['escalated_from'])} to {entry['level']})"
    console.print(head)
    if entry["error"]:
        error = entry["error"] if len(names) == 1 else generalize_error(entry["error"], entry["node"])
        console.print(f"      [magenta]{entry['transport']}[/]: {escape(error)}")
    for r in _bad_results(entry):
        subject = f" {r['subject']}" if r.get("subject") else ""
        tag = " [cyan]\\[simulated][/cyan]" if r.get("simulated") else ""
        console.print(f"      [{STYLE[r['status']]}]{r['status']:5}[/] {r['code']}{escape(subject)}: "
                      f"{escape(r['message'])}{tag}")


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


def _render_changes(console, changes: dict, wide: bool) -> None:
    console.print("[bold]since the previous audit[/bold]")
    folded: dict[str, list[str]] = {}  # the same change on many nodes: one line
    for node, ch in sorted(changes.items()):
        parts = [f"{ch['status'][0]} -> {ch['status'][1]}"]
        if ch["new"]:
            parts.append("new: " + ", ".join(ch["new"]))
        if ch["resolved"]:
            parts.append("resolved: " + ", ".join(ch["resolved"]))
        text = "; ".join(parts)
        if wide:
            console.print(f"  {node}: {escape(text)}")
        else:
            folded.setdefault(text, []).append(node)
    for text, names in folded.items():
        console.print(f"  {fold(names)}: {escape(text)}")
