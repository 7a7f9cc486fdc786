"""What the act subcommands share: the state directory option, act's config, one decision's line."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, esc


def state_dir_option(func):
    return click.option("--state-dir", metavar="DIR", default=None,
                        help="Action log and cursors (default: act.state_dir).")(func)


def config(app: Application, state_dir: str | None):
    from fleetctl.act.config import ActConfig

    return ActConfig.from_site(app.site, **({"state_dir": state_dir} if state_dir else {}))


def line(rec: dict) -> str:
    """One decision as a markup-safe line (codes, policies and reasons come from files and nodes)."""
    det = rec.get("detection") or {}
    return (f"{esc(rec['phase']):9} {esc(rec['action']):8} {esc(rec['id'])}  {esc(det.get('code'))} "
            f"\\[{esc(rec.get('policy'))}]: {esc(rec.get('why', ''), 2000)}")
