"""`fleetctl failover plan`: per node class, which NICs back each other up and what a job's
environment must say for it.

Two routes (docs/failover.md):
- TCP/Ethernet classes: the fleet plugin (`libnccl-net-fleet.so`): NCCL_NET_PLUGIN, NCCL_NET=fleet and
  FLEET_NET_IFACES, one virtual device per NIC group.
- InfiniBand/RoCE classes: NCCL's own resiliency inside virtual NICs merged by NCCL_NET_FORCE_MERGE:
  NCCL_IB_RESILIENCY_PORT_FAILOVER (NCCL >= 2.29.7), NCCL_IB_RESILIENCY_PORT_RECOVERY (>= 2.30).

NIC groups: NICs behind the same PCIe switch (else the same NUMA node) are merged, so a virtual NIC
keeps the GPU locality of its members; inside a locality the NICs are taken in rail order (the leaf
switch of each NIC's link in the site file). Affinity comes from sysfs, read only for the class of
the node the plan runs on; elsewhere the plan pairs NICs in the site file's order.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from fleetctl.errors import ConfigError, UsageError
from fleetctl.failover import versions
from fleetctl.failover.sysfs import Affinity
from fleetctl.model.cluster import Cluster, NodeClass
from fleetctl.nodeset import NodeSet, contains, expand, fold

PLUGIN_LIB = "libnccl-net-fleet.so"
MODE_PLUGIN = "fleet-plugin"
MODE_IB = "ib-resiliency"
_ENV_NAME = re.compile(r"^(NCCL|FLEET_NET)_[A-Z0-9_]{1,60}$")
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,;:/=+-]{0,1000}$")


@dataclass(frozen=True)
class NicPlan:
    name: str
    kind: str
    device: str  # what the environment names: the netdev for the plugin, the RDMA device for NCCL IB
    rail: str = ""  # the switch at the other end of the NIC's link in the site file
    numa_node: int | None = None
    pcie_switch: str = ""


@dataclass(frozen=True)
class Requirement:
    variable: str
    min_nccl: str
    enabled: bool  # set in `env` (the version allows it, or the version is unknown)


@dataclass
class ClassPlan:
    name: str
    nodes: str
    mode: str
    nics: list[NicPlan]
    groups: list[list[str]]
    env: dict[str, str]
    nccl_version: str
    nccl_version_source: str
    requires: list[Requirement] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    affinity_from: str = ""  # the node whose sysfs gave NUMA/PCIe, "" when none did

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FailoverPlan:
    cluster: str
    classes: list[ClassPlan]

    @property
    def warnings(self) -> list[str]:
        return [f"{c.name}: {w}" for c in self.classes for w in c.warnings]

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "classes": [c.to_dict() for c in self.classes],
                "warnings": self.warnings}


def _rails(cluster: Cluster, cls: NodeClass, nodes: list[str]) -> dict[str, str]:
    """NIC name -> switch it is cabled to, from the first node of the class with links."""
    for node in nodes:
        out = {}
        for link in cluster.links.values():
            for near, far in ((link.a, link.b), (link.b, link.a)):
                if near.kind == "nic" and near.device == node and far.kind == "switch":
                    out[near.port] = far.device
        if out:
            return out
    return {}


def group_nics(nics: list[NicPlan], size: int) -> list[list[str]]:
    """Groups of `size` NICs sharing a PCIe switch (when every NIC's is known), else a NUMA node
    (likewise), else in the given order; each locality sorted by rail; a NIC left alone in its
    locality joins the last group formed, so that no NIC is without a partner while others exist."""
    if size < 1:
        raise UsageError(f"--group-size {size}: at least 1")
    if all(n.pcie_switch for n in nics):
        key = lambda n: n.pcie_switch  # noqa: E731
    elif all(n.numa_node is not None for n in nics):
        key = lambda n: str(n.numa_node)  # noqa: E731
    else:
        key = lambda n: ""  # noqa: E731
    buckets: dict[str, list[NicPlan]] = {}
    for nic in nics:
        buckets.setdefault(key(nic), []).append(nic)
    groups: list[list[str]] = []
    strays: list[str] = []
    for members in buckets.values():
        members = sorted(members, key=lambda n: (n.rail, nics.index(n))) if any(n.rail for n in members) \
            else members
        chunk = [members[i:i + size] for i in range(0, len(members), size)]
        if len(chunk) > 1 and len(chunk[-1]) == 1:
            chunk[-2].extend(chunk.pop())
        for g in chunk:
            if len(g) == 1 and size > 1:
                strays.append(g[0].name)
            else:
                groups.append([n.name for n in g])
    for i in range(0, len(strays), size):
        groups.append(strays[i:i + size])
    if len(groups) > 1 and len(groups[-1]) == 1 and size > 1:
        groups[-2].extend(groups.pop())
    return groups


@dataclass(frozen=True)
class _Context:
    """What every class's plan reads besides the class: the site, this host, the choices made."""

    cluster: Cluster
    here: str | None  # this host's short name
    in_any_class: bool  # this host is a node of the site file
    affinity: Callable[[str], Affinity] | None
    plugin_dir: str
    group_size: int
    nccl_option: str | None  # --nccl-version
    nccl_site: str  # failover.nccl_version
    detected: tuple[versions.Version | None, str]  # the libnccl found on this host


def _version_for(ctx: _Context, cls: NodeClass):
    if ctx.nccl_option:
        return versions.parse(ctx.nccl_option, what="--nccl-version"), "option --nccl-version"
    if ctx.nccl_site:
        try:
            return versions.parse(ctx.nccl_site, what="failover.nccl_version"), "site failover.nccl_version"
        except UsageError as exc:
            raise ConfigError(exc.message, key="failover.nccl_version") from None
    version, path = ctx.detected
    if version and ((ctx.here and contains(cls.nodes, ctx.here)) or not ctx.in_any_class):
        return version, f"detected {path}"
    return None, "unknown"


def _env_plugin(groups, by_name, plugin_dir, version, warnings):
    reqs = [Requirement("NCCL_NET_PLUGIN", versions.show(versions.PLUGIN_MIN), True)]
    if version and version < versions.PLUGIN_MIN:
        warnings.append(f"NCCL {versions.show(version)} is too old for the fleet plugin (ncclNetPlugin_v8 "
                        f"needs NCCL >= {versions.show(versions.PLUGIN_MIN)}): no failover")
        return {}, [Requirement("NCCL_NET_PLUGIN", versions.show(versions.PLUGIN_MIN), False)]
    ifaces = ";".join(",".join(by_name[n].device for n in g) for g in groups)
    return {"NCCL_NET_PLUGIN": f"{plugin_dir.rstrip('/')}/{PLUGIN_LIB}", "NCCL_NET": "fleet",
            "FLEET_NET_IFACES": ifaces}, reqs


def _env_ib(groups, by_name, version, warnings):
    failover_ok = version is None or version >= versions.IB_FAILOVER_MIN
    recovery_ok = version is None or version >= versions.IB_RECOVERY_MIN
    reqs = [Requirement("NCCL_NET_FORCE_MERGE", versions.show(versions.IB_FAILOVER_MIN), failover_ok),
            Requirement("NCCL_IB_RESILIENCY_PORT_FAILOVER", versions.show(versions.IB_FAILOVER_MIN), failover_ok),
            Requirement("NCCL_IB_RESILIENCY_PORT_RECOVERY", versions.show(versions.IB_RECOVERY_MIN), recovery_ok)]
    if version is None:
        warnings.append(f"NCCL version unknown: IB port failover needs NCCL >= {versions.show(versions.IB_FAILOVER_MIN)}, "
                        f"fail-back >= {versions.show(versions.IB_RECOVERY_MIN)} (set failover.nccl_version "
                        "or --nccl-version, or run the plan on a node of the class)")
    elif not failover_ok:
        warnings.append(f"NCCL {versions.show(version)} has no IB port failover (needs >= "
                        f"{versions.show(versions.IB_FAILOVER_MIN)}): a port failure stops the job; upgrade NCCL")
        return {}, reqs
    elif not recovery_ok:
        warnings.append(f"NCCL {versions.show(version)} fails over but never fails back (needs >= "
                        f"{versions.show(versions.IB_RECOVERY_MIN)}): a recovered port stays unused until the job ends")
    env = {"NCCL_NET_FORCE_MERGE": ";".join(",".join(by_name[n].device for n in g) for g in groups),
           "NCCL_IB_RESILIENCY_PORT_FAILOVER": "1"}
    if recovery_ok:
        env["NCCL_IB_RESILIENCY_PORT_RECOVERY"] = "1"
    return env, reqs


def site_settings(cluster: Cluster) -> dict:
    """The site's [failover] table, checked beyond the schema (config check runs this too)."""
    settings = cluster.data.get("failover") or {}
    if settings.get("plugin_dir") and not str(settings["plugin_dir"]).startswith("/"):
        # a relative NCCL_NET_PLUGIN would be loaded from each job's working directory
        raise ConfigError(f"{settings['plugin_dir']!r}: not an absolute path", path=cluster.source,
                          key="failover.plugin_dir")
    if settings.get("nccl_version"):
        try:
            versions.parse(settings["nccl_version"], what="failover.nccl_version")
        except UsageError as exc:
            raise ConfigError(exc.message, path=cluster.source, key="failover.nccl_version") from None
    return settings


def build_plan(cluster: Cluster, nodeset: NodeSet | None = None, *, nccl_version: str | None = None,
               plugin_dir: str | None = None, group_size: int | None = None,
               affinity: Callable[[str], Affinity] | None = None, hostname: str | None = None,
               detected: tuple[versions.Version | None, str] | None = None) -> FailoverPlan:
    """The plan for every class with a node in `nodeset` (all classes without one). `affinity` reads
    this node's sysfs (fleetctl.failover.sysfs.affinity) for the class this host belongs to."""
    settings = site_settings(cluster)
    if plugin_dir is not None and not plugin_dir.startswith("/"):
        raise UsageError(f"--plugin-dir {plugin_dir!r}: not an absolute path")
    here = hostname if hostname is not None else socket.gethostname().split(".")[0]
    ctx = _Context(cluster=cluster, here=here,
                   in_any_class=any(contains(c.nodes, here) for c in cluster.node_classes) if here else False,
                   affinity=affinity, plugin_dir=plugin_dir or settings.get("plugin_dir") or "/usr/lib/fleetctl",
                   group_size=group_size or settings.get("group_size") or 2, nccl_option=nccl_version,
                   nccl_site=settings.get("nccl_version", ""),
                   detected=detected if detected is not None else versions.detect())
    classes = []
    for cls in cluster.node_classes:
        nodes = expand(cls.nodes)
        if nodeset is not None:
            nodes = [n for n in nodes if contains(nodeset, n)]
            if not nodes:
                continue
        classes.append(_class_plan(ctx, cls, nodes))
    if nodeset is not None and not classes:
        raise UsageError(f"no node of {fold(expand(nodeset))} is in the site file")
    return FailoverPlan(cluster.name, classes)


def _class_plan(ctx: _Context, cls: NodeClass, nodes: list[str]) -> ClassPlan:
    warnings: list[str] = []
    local = bool(ctx.affinity and ctx.here and contains(cls.nodes, ctx.here))
    rails = _rails(ctx.cluster, cls, [ctx.here] if local else nodes)
    rdma = [n for n in cls.nics if n.kind in ("infiniband", "roce")]
    mode = MODE_IB if rdma else MODE_PLUGIN
    chosen = rdma or list(cls.nics)
    nics = []
    for spec in chosen:
        device = spec.name if mode == MODE_IB else (spec.netdev or spec.name)
        aff = ctx.affinity(spec.name) if local else Affinity()
        nics.append(NicPlan(spec.name, spec.kind, device, rails.get(spec.name, ""), aff.numa_node,
                            aff.pcie_switch))
    version, source = _version_for(ctx, cls)
    if not nics:
        return ClassPlan(cls.name, fold(nodes), "none", [], [], {}, versions.show(version), source,
                         warnings=["no NICs in the site file: nothing to fail over to"])
    groups = group_nics(nics, ctx.group_size)
    if len(nics) < 2:
        warnings.append(f"one NIC ({nics[0].name}): no second path to fail over to")
    by_name = {n.name: n for n in nics}
    for g in groups:
        shared = {by_name[n].rail for n in g if by_name[n].rail}
        if len(g) > 1 and len(shared) == 1 and all(by_name[n].rail for n in g):
            warnings.append(f"group {','.join(g)}: every NIC is cabled to {shared.pop()}: a failure of that "
                            "switch takes the whole group down")
    if mode == MODE_PLUGIN:
        env, reqs = _env_plugin(groups, by_name, ctx.plugin_dir, version, warnings)
    else:
        env, reqs = _env_ib(groups, by_name, version, warnings)
    return ClassPlan(cls.name, fold(nodes), mode, nics, groups, env, versions.show(version), source, reqs,
                     warnings, ctx.here if local else "")


def env_file_text(env: dict[str, str], *, header: str = "") -> str:
    """KEY=VALUE lines the SPANK plugin's `env_file=` reads (spank_plugin/src/envfile.c): names
    NCCL_* or FLEET_NET_*, values without spaces, quotes or control characters."""
    lines = [f"# {line}" for line in header.splitlines() if line]
    for name, value in env.items():
        # fullmatch: `$` also matches before a final newline, which would split the line in the file
        if not _ENV_NAME.fullmatch(name) or not _ENV_VALUE.fullmatch(value):
            raise UsageError(f"environment {name}={value!r}: cannot be written to an env file")
        lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"
