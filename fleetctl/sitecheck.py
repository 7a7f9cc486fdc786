"""Every check the runtime makes of a site file, in one pass: what `fleetctl config check` runs.

The schema (config/) checks types, ranges and names when any command loads a site file; each
command then reads its own section through its domain's function (the Prolog builds the payload
arguments, act parses its policies, lens its options, failover its settings, fan-out its access
options, the mesh its topology). A file the schema accepts but one of those refuses used to pass
`config check` and fail every Prolog (which then fails open: GPU gating silently off fleet-wide).
This module calls those same functions, not copies of their rules, so there is one validation path:
a rule added to a domain's reader is checked here as soon as that reader is listed below.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetctl.errors import FleetctlError


def _checks(cluster) -> None:
    from fleetctl.checks.builder import LEVELS, payload_args

    for cls in cluster.node_classes:
        node = next(iter(cls.nodes), None)
        if node is not None:
            for level in LEVELS:
                payload_args(cluster, node, level)


def _act(cluster) -> None:
    from fleetctl.act.config import ActConfig
    from fleetctl.act.policies import policies_from_site

    ActConfig.from_site(cluster)
    policies_from_site(cluster)


def _lens(cluster) -> None:
    from fleetctl.lens.options import LensOptions

    LensOptions.from_site(cluster).validate()


def _spares(cluster) -> None:
    from fleetctl.spares import SparesConfig

    SparesConfig.from_site(cluster)


def _failover(cluster) -> None:
    from fleetctl.failover.plan import site_settings

    site_settings(cluster)


def _access(cluster) -> None:
    from fleetctl.fanout.base import FanoutOptions
    from fleetctl.slurm import backends

    FanoutOptions.from_site(cluster)
    if cluster.slurm["backend"] not in backends:
        backends.get(cluster.slurm["backend"])  # the registry's error: the name and the choices


def _fabric(cluster) -> str | None:
    if not cluster.links:
        return None
    from fleetctl.extras import install_hint, missing_modules

    missing = missing_modules("mesh")
    if missing:  # a node's install: the fabric's readers (mesh, lens) do not run here
        return (f"fabric paths not checked: needs {', '.join(missing)} ({install_hint('mesh')}), "
                "as the commands that read the fabric do")
    from fleetctl.model.fabric import Topology

    Topology.from_site(cluster)
    return None


# (site section, the runtime's reader of it)
READERS: tuple[tuple[str, Callable], ...] = (
    ("checks", _checks), ("act", _act), ("lens", _lens), ("spares", _spares),
    ("failover", _failover), ("access", _access), ("fabric", _fabric),
)


def check_site(cluster, notes: list[str] | None = None) -> list[dict]:
    """Every problem the runtime would raise for this site file: [{"section", "message"}] (empty
    when every reader accepts it). Each reader's first problem is reported; all readers run. What a
    reader could not check here (a missing extra) is appended to `notes`."""
    problems = []
    for section, reader in READERS:
        try:
            note = reader(cluster)
        except FleetctlError as exc:
            problems.append({"section": section, "message": exc.message})
        else:
            if note and notes is not None:
                notes.append(note)
    return problems
