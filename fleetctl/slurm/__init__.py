"""Slurm access behind one interface (SlurmBackend) and one registry of backends.

    backend = backend_for_site(site)      # the one named by slurm.backend, configured from the site
    backend.drain(["gpu007"], "xid79", "gpu3 fell off the bus")

A new backend is one module with a SlurmBackend subclass and one line in BACKENDS.
"""

from __future__ import annotations

import importlib

from fleetctl.errors import ConfigError
from fleetctl.slurm.base import (DrainResult, NodeLookup, Reservation, ResumeResult, SlurmBackend,
                                 SlurmJob, SlurmNode, SlurmUnreachable)

__all__ = ["BACKENDS", "DrainResult", "NodeLookup", "Reservation", "ResumeResult", "SlurmBackend",
           "SlurmJob", "SlurmNode", "SlurmUnreachable", "backend_for_site", "get_backend"]

# name -> "module:class"; imported only when chosen.
BACKENDS: dict[str, str] = {
    "cli": "fleetctl.slurm.cli_backend:CliBackend",
}


def get_backend(name: str = "cli", **options) -> SlurmBackend:
    target = BACKENDS.get(name)
    if target is None:
        raise ConfigError(f"unknown Slurm backend {name!r}; known: {', '.join(sorted(BACKENDS))}",
                          key="slurm.backend")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)(**options)


def backend_for_site(site, **options) -> SlurmBackend:
    """The site's backend with its drain prefix and slurm.conf (relative to the site file)."""
    from fleetctl.config.files import site_path

    conf = site_path(site.slurm["conf"], site.source)
    options.setdefault("drain_prefix", site.slurm["drain_prefix"])
    if site.slurm["backend"] == "cli":
        options.setdefault("slurm_conf", conf)
    return get_backend(site.slurm["backend"], **options)
