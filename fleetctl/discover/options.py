"""The options of one `fleetctl site discover`, as the command line gives them (the CLI parses into
DiscoverOptions; discover.command and discover.run read it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetctl.errors import UsageError
from fleetctl.nodeset import parse_nodeset


@dataclass(frozen=True)
class DiscoverOptions:
    nodeset: str | None = None  # none: the nodes of the site file in use, else every node Slurm knows
    out: str | None = None  # write the site file here
    force: bool = False  # replace `out`
    against: str | None = None  # --diff SITE: the changes against that site file instead
    transport: str | None = None  # default: the site's, else srun
    netns: str | None = None  # local transport: each node's namespace (`{node}` replaced)
    switches: str | None = None  # node set of Linux switches running lldpd
    lldp_socket: str | None = None
    ibnet: str | None = None  # ibnetdiscover output
    node_name_map: str | None = None
    source: str = "auto"  # fabric source: auto, lldp or trace
    trace: bool = False  # with auto: trace even when LLDP gives cabling
    nics: str | None = None  # comma-separated globs: exactly these fabric NICs
    exclude_nics: str | None = None  # comma-separated globs: never these
    cluster_name: str | None = None
    budget: float = 20.0  # seconds of collection on each node
    slurm_topology: str | None = None  # tree | block: write (or --diff) Slurm's topology.conf instead

    def check(self) -> None:
        """UsageError for options that cannot go together, before anything is read."""
        if self.out and self.against:
            raise UsageError("--out writes a site file and --diff compares with one: give one of them")
        if self.out and not self.force and Path(self.out).exists():
            raise UsageError(f"{self.out} exists: give --force to replace it, or --diff {self.out} to compare")

    def wants_base(self, site_given: bool) -> bool:
        """Whether the site file in use (or Slurm's view) is read: for the node list, for srun, or
        because one was given (`site_given`: --site or FLEETCTL_SITE)."""
        return site_given or not self.nodeset or self.transport in (None, "srun")

    def switch_nodes(self) -> list[str]:
        return list(parse_nodeset(self.switches)) if self.switches else []

    def include_globs(self) -> tuple[str, ...]:
        return _globs(self.nics)

    def exclude_globs(self) -> tuple[str, ...]:
        return _globs(self.exclude_nics)


def _globs(value: str | None) -> tuple[str, ...]:
    return tuple(g.strip() for g in (value or "").split(",") if g.strip())
