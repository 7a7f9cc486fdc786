"""What the snapshot subcommands share: the registry option, TARGET resolution, sizes and durations."""

from __future__ import annotations

import os

import click

from fleetctl.cli.app import Application


def registry_option(func):
    return click.option("--registry", metavar="DIR", default=None, type=click.Path(exists=True, file_okay=False),
                        help="Registry of job snapshot directories (env FLEETCTL_SNAPSHOT_REGISTRY; "
                             "default /var/lib/fleetctl/snapshots).")(func)


def resolve_target(app: Application, target: str, registry: str | None):
    """(directory, job id) of TARGET; a job's registry entry must be written by the job's owner: the
    calling user, or for root the owner Slurm names (registry squatting, docs/security.md)."""
    from fleetctl.snapshot.registry import is_job_id, resolve

    owner = None
    if is_job_id(target):
        owner = os.geteuid() if os.geteuid() != 0 else slurm_owner(app, target)
    return resolve(target, registry, owner=owner)


def slurm_owner(app: Application, job_id: str) -> int | None:
    from fleetctl.errors import FleetctlError
    from fleetctl.snapshot.registry import job_owner

    try:
        return job_owner(app.slurm_backend(), job_id)
    except FleetctlError:  # no site, no Slurm: entries of different owners are then refused
        return None


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.2f} h"
