"""What the act subcommands share: the state directory option, act's config, one decision's line."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, esc


def state_dir_option(func=None, *, must_exist: bool = False):
    """--state-dir; `must_exist` for what only reads it (a typo is an error, not an empty state)."""
    option = click.option("--state-dir", metavar="DIR", default=None,
                          type=click.Path(exists=True, file_okay=False) if must_exist else None,
                          help="Action log and cursors (default: act.state_dir).")
    return option(func) if func is not None else option


def config(app: Application, state_dir: str | None):
    from fleetctl.act.config import ActConfig

    return ActConfig.from_site(app.cluster, **({"state_dir": state_dir} if state_dir else {}))


def line(rec: dict) -> str:
    """One decision as a markup-safe line (codes, policies and reasons come from files and nodes)."""
    det = rec.get("detection") or {}
    return (f"{esc(rec['phase']):9} {esc(rec['action']):8} {esc(rec['id'])}  {esc(det.get('code'))} "
            f"\\[{esc(rec.get('policy'))}]: {esc(rec.get('why', ''), 2000)}")


def folded_lines(records: list[dict]) -> list[str]:
    """Records that differ only in their node(s) and id, as one line each: the ids' range, the
    folded node set and how many (`act log` without --wide; clush -b's habit)."""
    from fleetctl.fanout.fold import generalize_node
    from fleetctl.nodeset import fold

    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        nodes = [str(n) for n in (rec.get("targets") or {}).get("nodes") or []]
        why = str(rec.get("why", ""))
        for node in nodes:
            why = generalize_node(why, node)
        det = rec.get("detection") or {}
        key = (rec.get("phase"), rec.get("action"), det.get("code"), rec.get("policy"), why, len(nodes) == 1)
        groups.setdefault(key, []).append(rec)
    out = []
    for (phase, action, code, policy, why, _), recs in groups.items():
        if len(recs) == 1:
            out.append(line(recs[0]))
            continue
        nodes = [str(n) for r in recs for n in (r.get("targets") or {}).get("nodes") or []]
        ids = f"{esc(recs[0]['id'])}..{esc(recs[-1]['id'])} ({len(recs)})"
        who = f"{esc(fold(nodes))}: " if nodes else ""
        out.append(f"{esc(phase):9} {esc(action):8} {ids}  {esc(code)} \\[{esc(policy)}]: {who}{esc(why, 2000)}")
    return out
