"""`fleetctl site discover [NODESET]` as one domain call: from the site file in use (or Slurm's
view) to the node list, the fan-out and its transport settings, the InfiniBand files, then the
discovery written as a site file (or compared with one). The CLI parses into DiscoverOptions, picks
the base (DiscoverOptions.wants_base), calls discover_site() and renders the result."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetctl.config import load_site
from fleetctl.config.files import read_bounded
from fleetctl.discover.diff import diff_site
from fleetctl.discover.ibnet import MAX_IBNET_BYTES, parse_ibnetdiscover, parse_node_name_map
from fleetctl.discover.options import DiscoverOptions
from fleetctl.discover.run import Discovery, discover
from fleetctl.discover.sitefile import render, write_site
from fleetctl.discover import slurm_topology
from fleetctl.atomic import write_atomic
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS, UsageError
from fleetctl.fanout import FanoutOptions, get_transport
from fleetctl.inventory.from_slurm import SOURCE_PREFIX, checks_from_env
from fleetctl.nodeset import parse_nodeset

SITE_CHECKS = ("kernel_log", "simulated_gpus", "simulated_nic_stats", "state_file")  # the checks paths a discovered file keeps


@dataclass
class SiteDiscovery:
    discovery: Discovery
    data: dict | None = None  # the documented JSON (fleetctl.discover/1), "file" when written
    text: str | None = None  # the site file
    changes: dict | None = None  # with --diff: the changes against that site file, instead of both
    exit_code: int = EXIT_OK


def discover_site(base, opts: DiscoverOptions) -> SiteDiscovery:
    """`base`: the site file in use or Slurm's view (a Cluster), or None (opts.wants_base)."""
    cluster = base if base is not None and not base.source.startswith(SOURCE_PREFIX) else None  # a file
    nodes = list(parse_nodeset(opts.nodeset)) if opts.nodeset else list(base.nodes)
    options = _fanout_options(base, cluster, opts)
    name = opts.transport or (base.access["transport"] if base is not None else "srun")
    ib, names = _infiniband(opts)
    checks = dict(cluster.checks) if cluster is not None else checks_from_env()
    with get_transport(name, options) as t:
        result = discover(t, nodes, opts, ib=ib, node_names=names, simulated_gpus=checks.get("simulated_gpus", ""))
    if opts.slurm_topology:
        return _slurm_topology(result, nodes, opts, base)
    if opts.against:
        changes = diff_site(load_site(opts.against), result, nodes)
        return SiteDiscovery(result, changes=changes, exit_code=EXIT_WARNINGS if changes["changes"] else EXIT_OK)
    text = render(cluster=opts.cluster_name or (base.name if base is not None else "cluster"),
                  classes=result.classes, fabric=result.fabric, access=_access(name, options),
                  slurm=_slurm(base, topology=not result.fabric.links),
                  checks={k: v for k, v in checks.items() if k in SITE_CHECKS and v},
                  notes=result.notes + result.fabric.notes, sources=result.sources)
    data = result.to_dict()
    if opts.out:
        data["file"] = str(write_site(opts.out, text, force=opts.force))
    return SiteDiscovery(result, data=data, text=text)


def _slurm_topology(result: Discovery, nodes: list[str], opts: DiscoverOptions, base) -> SiteDiscovery:
    """Slurm's topology.conf of the discovered fabric (printed, written, or compared with --diff)."""
    topo = slurm_topology.from_fabric(result.fabric, [n for n in nodes if n in result.facts],
                                      {n: f.nvlink_domain for n, f in result.facts.items()})
    if opts.against:
        text = read_bounded(Path(opts.against), "topology.conf")
        changes = slurm_topology.diff(text, opts.against, topo, opts.slurm_topology)
        return SiteDiscovery(result, changes=changes, exit_code=EXIT_WARNINGS if changes["changes"] else EXIT_OK)
    text = slurm_topology.render(topo, opts.slurm_topology, sources=result.sources,
                                 cluster=opts.cluster_name or (base.name if base is not None else ""))
    data = {"schema": "fleetctl.slurm_topology/1", "plugin": opts.slurm_topology, "leaves": topo.leaves,
            "blocks": slurm_topology.blocks(topo)[0] if opts.slurm_topology == "block" else {},
            "nvlink_domains": topo.domains,
            "switches": topo.children, "unplaced": topo.unplaced, "multi_leaf": topo.multi_leaf,
            "notes": result.notes + result.fabric.notes, "text": text}
    if opts.out:
        target = Path(opts.out)
        if target.exists() and not opts.force:
            raise UsageError(f"{target} exists: give --force to replace it, or --diff {target} to compare")
        write_atomic(target, text)
        data["file"] = str(target)
    return SiteDiscovery(result, data=data, text=text)


def _fanout_options(base, cluster, opts: DiscoverOptions):
    """The site file's fan-out settings (defaults without one); Slurm's conf and partition for srun
    when the base is Slurm's view; --netns."""
    options = FanoutOptions.from_site(cluster)
    if opts.netns:
        options.local_netns = opts.netns
    if base is not None and cluster is None:
        options.slurm_conf, options.srun_partition = base.slurm["conf"], base.slurm["partition"]
    return options


def _infiniband(opts: DiscoverOptions):
    """The ibnetdiscover file's subnet and the node-name map, each None when not given."""
    ib = names = None
    if opts.ibnet:
        ib = parse_ibnetdiscover(read_bounded(Path(opts.ibnet), "ibnetdiscover output", limit=MAX_IBNET_BYTES),
                                 opts.ibnet)
    if opts.node_name_map:
        names = parse_node_name_map(read_bounded(Path(opts.node_name_map), "node-name map"), opts.node_name_map)
    return ib, names


def _access(name: str, options) -> dict:
    access = {"transport": name}
    if name == "local" and options.local_netns:
        access["local"] = {"netns": options.local_netns}
    if name == "srun" and options.srun_partition:
        access["srun"] = {"partition": options.srun_partition}
    return access


def _slurm(base, topology: bool) -> dict:
    """conf and partition of the site in use (or Slurm's); Slurm's topology.conf as the fabric when
    discovery found no cabling (the loader imports its switches and node links)."""
    if base is None:
        return {}
    keys = ("conf", "partition", "topology_conf") if topology else ("conf", "partition")
    return {k: v for k, v in base.slurm.items() if k in keys and v}
