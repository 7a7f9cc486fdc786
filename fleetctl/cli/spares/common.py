"""What the spares subcommands share: the pool, its state directory option, warnings."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, esc


def pool(app: Application, state_dir: str | None):
    """(Slurm backend, SparePool) of the site in use."""
    from fleetctl.slurm import backend_for_site
    from fleetctl.spares import SparePool, SparesConfig

    backend = backend_for_site(app.cluster)
    return backend, SparePool(backend, SparesConfig.from_site(app.cluster, state_dir))


def state_dir_option(func=None, *, must_exist: bool = False):
    """--state-dir; `must_exist` for what only reads it (a typo is an error, not an empty state)."""
    option = click.option("--state-dir", metavar="DIR", default=None,
                          type=click.Path(exists=True, file_okay=False) if must_exist else None,
                          help="The pool's lock and audit verdicts (default: spares.state_dir).")
    return option(func) if func is not None else option


def print_warnings(console, warnings) -> None:
    for w in warnings:
        console.print(f"[yellow]warning[/yellow]: {esc(w)}")
