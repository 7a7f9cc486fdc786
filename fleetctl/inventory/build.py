"""Build the inventory: the site file's view of the cluster, merged with live Slurm state.

Slurm is optional: when it is not given or not reachable, the site view is still returned, with a
warning saying why Slurm state is missing. Disagreements between the two (a node Slurm knows that the
site file does not, and the reverse) are flagged, never silently dropped.
"""

from __future__ import annotations

from fleetctl.errors import SlurmError
from fleetctl.inventory.model import GpuInfo, Inventory, Link, NicInfo, Node, Switch
from fleetctl.model.cluster import Cluster, SlurmInfo
from fleetctl.nodeset import NodeSet, fold, from_names, parse_nodeset
from fleetctl.slurm.reasons import is_ours


def build_inventory(cluster: Cluster, nodeset=None, slurm=None) -> Inventory:
    """Inventory of `cluster`, limited to `nodeset` (text or NodeSet) when given.

    `slurm` is a SlurmBackend or None (site view only); when given, its state is attached to `cluster`
    first (`attach_slurm`).
    """
    wanted = None if nodeset is None else (
        nodeset if isinstance(nodeset, NodeSet) else parse_nodeset(nodeset))
    inv = Inventory(cluster=cluster.name, site_file=cluster.source)
    addresses = cluster.access["ssh"]["addresses"]

    for name in cluster.nodes:
        if wanted is not None and name not in wanted:
            continue
        cls = cluster.node_class(name)
        node = Node(name=name, node_class=cls.name, address=addresses.get(name, ""),
                    gpus=GpuInfo(cls.gpus.count, cls.gpus.model, cls.gpus.driver_version),
                    nics=[NicInfo(n) for n in cls.nics])
        inv.nodes[name] = node

    _add_fabric(cluster, inv, wanted)
    if slurm is not None:
        _merge_slurm(inv, cluster, attach_slurm(cluster, slurm), wanted)
    if wanted is not None:
        unknown = wanted - from_names(inv.nodes)
        if unknown:
            where = "the site file or Slurm" if inv.slurm_queried and not inv.slurm_error else "the site file"
            inv.warnings.append(f"nodes {unknown} are not in {where}")
    return inv


def _add_fabric(cluster: Cluster, inv: Inventory, wanted) -> None:
    for link in cluster.links.values():
        if wanted is not None and link.a.device not in wanted and link.b.device not in wanted:
            continue
        inv.links[link.id] = Link(link.id, str(link.a), str(link.b), link.a.kind, link.b.kind,
                                  link.a.address, link.b.address, link.rate_gbps)
        for end, other in ((link.a, link.b), (link.b, link.a)):
            if end.kind == "switch":
                sw = cluster.switches[end.device]
                entry = inv.switches.setdefault(sw.id, Switch(sw.id, sw.tier, sw.model, sw.address))
                entry.links.append(link.id)
                if other.device not in entry.neighbours:
                    entry.neighbours.append(other.device)
                continue
            node = inv.nodes.get(end.device)
            if node is None:  # the far end of a link of a selected node
                continue
            node.links.append(link.id)
            nic = node.nic(end.port) if end.kind == "nic" else None
            if nic is not None:
                nic.links.append(link.id)
                if other.kind == "switch" and other.device not in nic.switches:
                    nic.switches.append(other.device)
                if end.address:
                    nic.addresses.append(end.address)
    if wanted is None:  # switches without any link still belong to the full view
        for sw in cluster.switches.values():
            inv.switches.setdefault(sw.id, Switch(sw.id, sw.tier, sw.model, sw.address))
    inv.switches = dict(sorted(inv.switches.items(), key=lambda kv: (kv[1].tier, kv[0])))


def attach_slurm(cluster: Cluster, slurm) -> str:
    """Ask `slurm` (a SlurmBackend) for every node's live state and attach it to `site.slurm_state`.
    Returns "" or, when Slurm cannot be asked, why (site.slurm_state is then left empty)."""
    cluster.slurm_state = {}
    try:
        snodes = slurm.nodes()
        jobs = slurm.jobs(states=["RUNNING", "COMPLETING"])
    except SlurmError as exc:
        return exc.message
    running: dict[str, list[str]] = {}
    for job in jobs:
        for name in job.nodes:
            running.setdefault(name, []).append(job.job_id)
    for sn in snodes:
        cluster.slurm_state[sn.name] = SlurmInfo(
            state=sn.state_text, drained=sn.drained, available=sn.available, reason=sn.reason,
            reason_user=sn.reason_user, reason_time=sn.reason_time,
            ours=is_ours(sn.reason, slurm.drain_prefix), partitions=sn.partitions,
            features=sn.features, jobs=running.get(sn.name, []))
    return ""


def _merge_slurm(inv: Inventory, cluster: Cluster, error: str, wanted) -> None:
    inv.slurm_queried = True
    if error:
        inv.slurm_error = error
        inv.warnings.append(f"Slurm state unavailable, showing the site file only: {error}")
        return
    seen = set()
    for name, state in cluster.slurm_state.items():
        if wanted is not None and name not in wanted:
            continue
        seen.add(name)
        node = inv.nodes.get(name)
        if node is None:
            node = inv.nodes[name] = Node(name=name, node_class=None, in_site=False)
        node.in_slurm = True
        node.slurm = state
    for node in inv.nodes.values():
        if node.in_site and node.name not in seen:
            node.in_slurm = False
    if inv.only_in_slurm:
        inv.warnings.append(f"nodes {fold(inv.only_in_slurm)} are in Slurm but not in the site file")
    if inv.only_in_site:
        inv.warnings.append(f"nodes {fold(inv.only_in_site)} are in the site file but not in Slurm")
