"""What the lens subcommands share: the state directory, and printing values read from files
anybody may have planted: every value goes through `text` (one printable line, bounded, a rich
Text: never parsed as markup) or `number`."""

from __future__ import annotations

import math
from pathlib import Path

import click

from fleetctl.cli.app import Application

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
MAX_CELL = 200  # characters of one untrusted value printed

state_dir_option = click.option("--state-dir", metavar="DIR", default=None,
                                help="Lens state directory (default: the site's lens.state_dir).")
# What only reads the state: a directory named on the command line must be there (a typo is not "no events").
existing_state_dir_option = click.option("--state-dir", metavar="DIR", default=None,
                                         type=click.Path(exists=True, file_okay=False),
                                         help="Lens state directory (default: the site's lens.state_dir).")


def state_directory(app: Application, state_dir: str | None) -> Path:
    from fleetctl.lens.options import LensOptions

    opts = LensOptions(state_dir=state_dir) if state_dir else LensOptions.from_site(app.cluster)
    return Path(opts.state_dir).expanduser()


def text(value, limit: int = MAX_CELL, style: str = ""):
    from rich.text import Text

    from fleetctl.filekit import clean_text

    return Text(clean_text("-" if value is None else value, limit), style=style)


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(value) -> str:
    return f"{value:g}" if finite(value) else "-"


def element(el: dict):
    """A (validated) record's element, or a status file's element row."""
    return text(f"{el.get('type')} {el.get('direction') or el.get('id')}")


def jobs(e: dict):
    return text(", ".join(j["job_id"] for j in e.get("jobs") or []) or "-")


def metric(e: dict) -> str:
    return e["metric"] + (f" x{e['flap']['count']}" if e.get("flap") else "")


def severity(e: dict):
    return text(e["severity"], style=SEV_STYLE.get(e["severity"], ""))
