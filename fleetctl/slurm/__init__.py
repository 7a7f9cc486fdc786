"""Slurm access behind one interface (SlurmBackend) and one registry of backends.

    backend = backend_for_site(site)      # the one named by slurm.backend, configured from the site
    backend.drain(["gpu007"], "xid79", "gpu3 fell off the bus")

A new backend is one module with a SlurmBackend subclass and one `backends.register` line here.
"""

from __future__ import annotations


from fleetctl.errors import ConfigError
from fleetctl.registry import Registry
from fleetctl.slurm.base import (DrainResult, NodeLookup, Reservation, ResumeResult, SlurmBackend,
                                 SlurmJob, SlurmNode, SlurmUnreachable)

__all__ = ["DrainResult", "NodeLookup", "Reservation", "ResumeResult", "SlurmBackend",
           "SlurmJob", "SlurmNode", "SlurmUnreachable", "backend_for_site", "backends", "get_backend"]

# Imported only when chosen; an unknown name is a site-file error at slurm.backend.
backends = Registry("Slurm backend", error=ConfigError, key="slurm.backend")
backends.register("cli", "fleetctl.slurm.cli_backend:CliBackend")


def get_backend(name: str = "cli", **options) -> SlurmBackend:
    return backends.get(name)(**options)


def backend_for_site(cluster, **options) -> SlurmBackend:
    """The site's backend with its drain prefix and slurm.conf (relative to the site file)."""
    from fleetctl.config.files import site_path

    conf = site_path(cluster.slurm["conf"], cluster.source)
    options.setdefault("drain_prefix", cluster.slurm["drain_prefix"])
    if cluster.slurm["backend"] == "cli":
        options.setdefault("slurm_conf", conf)
    return get_backend(cluster.slurm["backend"], **options)
