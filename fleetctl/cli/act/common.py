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

    return ActConfig.from_site(app.site, **({"state_dir": state_dir} if state_dir else {}))


def line(rec: dict) -> str:
    """One decision as a markup-safe line (codes, policies and reasons come from files and nodes)."""
    det = rec.get("detection") or {}
    return (f"{esc(rec['phase']):9} {esc(rec['action']):8} {esc(rec['id'])}  {esc(det.get('code'))} "
            f"\\[{esc(rec.get('policy'))}]: {esc(rec.get('why', ''), 2000)}")
