"""Load a site file into the cluster model (fleetctl.model.cluster): validated, with its node classes,
switches and links resolved.

Beyond the schema, this checks what a schema cannot: a node in two classes, duplicate switch or link
ids, a link naming a switch, node or NIC that does not exist.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from fleetctl.config.files import MAX_SITE_BYTES, read_bounded, site_path
from fleetctl.config.schema import validate
from fleetctl.config.topology import merge_topology_conf
from fleetctl.errors import ConfigError, UsageError
from fleetctl.model.cluster import Cluster, Endpoint, GpuSpec, Link, NicSpec, NodeClass, Switch, link_id
from fleetctl.nodeset import MAX_NODES, check_node_name, empty, parse_nodeset



MAX_KEY_DEPTH = 64  # parts of one dotted key (a.b.c): tomllib's cost grows with the square of it
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_DOTTED_KEY = re.compile(_KEY_PART + r"(?:[ \t]*\.[ \t]*" + _KEY_PART + ")*")


def load_site(path: str | os.PathLike) -> Cluster:
    """Read, validate and resolve a site file."""
    path = Path(path).expanduser()
    return parse_site(read_bounded(path, "site file"), source=str(path))


def parse_site(text: str, source: str = "<site>") -> Cluster:
    if len(text) > MAX_SITE_BYTES:
        raise ConfigError(f"site file larger than {MAX_SITE_BYTES // 2**20} MiB", path=source)
    _check_key_depth(text, source)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=source) from None
    except RecursionError:
        raise ConfigError("not valid TOML: arrays or tables nested too deeply", path=source) from None
    return site_from_document(document, source)


def site_from_document(document: dict, source: str) -> Cluster:
    """Validate and resolve a site document (what a site file parses to) from any source: a file,
    or the view built from Slurm alone (fleetctl.inventory.from_slurm)."""
    data = validate(document, source)
    cluster = Cluster(name=data["cluster"]["name"], source=source, data=data)
    _resolve_node_classes(cluster)
    _resolve_switches(cluster)
    _check_addresses(cluster)
    _check_slurm(cluster)
    if data["slurm"]["topology_conf"]:
        merge_topology_conf(cluster, site_path(data["slurm"]["topology_conf"], source))
    _resolve_links(cluster)
    return cluster


def _check_key_depth(text: str, source: str) -> None:
    """Refuse dotted keys of more than MAX_KEY_DEPTH parts before tomllib sees them. The scan matches
    every part TOML allows in a key (bare, "basic", 'literal') and may over-count a dotted run inside
    a string value; no real site key comes close to the limit."""
    for match in _DOTTED_KEY.finditer(text):
        run = match.group()
        if run.count(".") >= MAX_KEY_DEPTH and len(re.findall(_KEY_PART, run)) > MAX_KEY_DEPTH:
            line = text.count("\n", 0, match.start()) + 1
            raise ConfigError(f"line {line}: a key of more than {MAX_KEY_DEPTH} dotted parts", path=source)


def _resolve_node_classes(cluster: Cluster) -> None:
    seen = empty()
    names: set[str] = set()
    for i, raw in enumerate(cluster.data["node_classes"]):
        key = f"node_classes[{i}]"
        if raw["name"] in names:
            raise ConfigError(f"duplicate node class name {raw['name']!r}", path=cluster.source,
                              key=f"{key}.name")
        names.add(raw["name"])
        nodes = parse_nodeset(raw["nodes"])  # valid: the schema parsed it
        if len(seen) + len(nodes) > MAX_NODES:
            raise ConfigError(f"the site file has more than {MAX_NODES:,} nodes", path=cluster.source,
                              key=f"{key}.nodes")
        overlap = nodes.intersection(seen)
        if overlap:
            raise ConfigError(f"nodes {overlap} are already in another node class",
                              path=cluster.source, key=f"{key}.nodes")
        seen.update(nodes)
        nic_names = [n["name"] for n in raw["nics"]]
        dup = {n for n in nic_names if nic_names.count(n) > 1}
        if dup:
            raise ConfigError(f"duplicate NIC name {sorted(dup)[0]!r}", path=cluster.source,
                              key=f"{key}.nics")
        cluster.node_classes.append(NodeClass(
            name=raw["name"], nodes=nodes, cpus=raw["cpus"], memory_gb=raw["memory_gb"],
            kernel_version=raw["kernel_version"], mounts=tuple(raw["mounts"]),
            gpus=GpuSpec(**raw["gpus"]), nics=tuple(NicSpec(**n) for n in raw["nics"])))


def _resolve_switches(cluster: Cluster) -> None:
    for i, raw in enumerate(cluster.data["fabric"]["switches"]):
        if raw["id"] in cluster.switches:
            raise ConfigError(f"duplicate switch id {raw['id']!r}", path=cluster.source,
                              key=f"fabric.switches[{i}].id")
        if cluster.node_class(raw["id"]) is not None:
            raise ConfigError(f"switch id {raw['id']!r} is also the name of a node", path=cluster.source,
                              key=f"fabric.switches[{i}].id")
        cluster.switches[raw["id"]] = Switch(**raw)


def _check_addresses(cluster: Cluster) -> None:
    for node in cluster.access["ssh"]["addresses"]:
        try:
            check_node_name(node)
        except UsageError as exc:
            raise ConfigError(exc.message, path=cluster.source, key="access.ssh.addresses") from None


def _check_slurm(cluster: Cluster) -> None:
    # The prefix marks fleetctl's own drains; a space or ':' in it would make that test ambiguous.
    prefix = cluster.slurm["drain_prefix"]
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", prefix):
        raise ConfigError(f"invalid drain prefix {prefix!r}: letters, digits, '_', '.', '-' only",
                          path=cluster.source, key="slurm.drain_prefix")


def parse_endpoint(cluster: Cluster, text: str, address: str = "", *, key: str = "") -> Endpoint:
    device, _, port = text.partition(":")
    if not device:
        raise ConfigError(f"empty link end {text!r}", path=cluster.source, key=key)
    if device in cluster.switches:
        return Endpoint("switch", device, port, address)
    cls = cluster.node_class(device)
    if cls is None:
        raise ConfigError(f"link end {text!r} names neither a switch of fabric.switches nor a node "
                          "of node_classes", path=cluster.source, key=key)
    if not port:
        return Endpoint("host", device, "", address)
    if cls.nic(port) is None:
        known = ", ".join(n.name for n in cls.nics) or "none"
        raise ConfigError(f"link end {text!r}: node class {cls.name!r} has no NIC {port!r} "
                          f"(its NICs: {known})", path=cluster.source, key=key)
    return Endpoint("nic", device, port, address)


def _resolve_links(cluster: Cluster) -> None:
    for i, raw in enumerate(cluster.data["fabric"]["links"]):
        key = f"fabric.links[{i}]"
        a = parse_endpoint(cluster, raw["a"], raw["a_address"], key=f"{key}.a")
        b = parse_endpoint(cluster, raw["b"], raw["b_address"], key=f"{key}.b")
        if a.device == b.device:
            raise ConfigError(f"link connects {a.device!r} to itself", path=cluster.source, key=key)
        if a.kind != "switch" and b.kind != "switch":
            raise ConfigError("a link must have a switch on at least one end", path=cluster.source, key=key)
        lid = raw["id"] or link_id(a, b, cluster)
        if "->" in lid or any(ch.isspace() for ch in lid):
            raise ConfigError(f"link id {lid!r} must not contain '->' or spaces", path=cluster.source,
                              key=f"{key}.id")
        if lid in cluster.links:
            raise ConfigError(f"duplicate link id {lid!r} (give parallel links explicit ids)",
                              path=cluster.source, key=f"{key}.id" if raw["id"] else key)
        cluster.links[lid] = Link(lid, a, b, raw["rate_gbps"])
