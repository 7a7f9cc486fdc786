"""A cluster model from Slurm alone, for a site without a site file (zero configuration).

Nodes and partitions come from scontrol, GPUs from each node's GRES, the switch hierarchy from
Slurm's topology.conf where Slurm uses topology/tree, and the fan-out transport is srun. Nodes are
grouped into classes by what Slurm says about them (GPU type and count, CPUs, memory), so that each
node is judged by its own checks and against the majority of the nodes that look like it; NICs are
not in Slurm, so each node's checks find its NICs themselves. `inferred(cluster)` lists what was
inferred, for reports.

The document built here goes through the same validation as a site file
(fleetctl.config.site_from_document): one model, two sources.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fleetctl.config import site_from_document
from fleetctl.errors import SlurmError
from fleetctl.model.cluster import Cluster
from fleetctl.nodeset import fold, is_node_name, natural_order
from fleetctl.slurm.parse import parse_records

SOURCE_PREFIX = "slurm:"
DEFAULT_CONF_PATHS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")
# Lab and test overrides of the check data paths (`{node}` is replaced), as checks.* keys would set
# them in a site file: real nodes read /dev/kmsg and NVML and need none of these.
CHECK_ENV = {"kernel_log": "FLEETCTL_CHECKS_KERNEL_LOG", "simulated_gpus": "FLEETCTL_CHECKS_SIMULATED_GPUS",
             "simulated_nic_stats": "FLEETCTL_CHECKS_SIMULATED_NIC_STATS",
             "state_file": "FLEETCTL_CHECKS_STATE_FILE"}
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::([A-Za-z0-9_.\-]+))?:(\d{1,6})\b")


def slurm_configured() -> str:
    """The slurm.conf a zero-configuration run would use ('' when there is none to try)."""
    conf = os.environ.get("SLURM_CONF", "")
    if conf:
        return conf
    return next((p for p in DEFAULT_CONF_PATHS if os.path.isfile(p)), "")


def checks_from_env() -> dict:
    return {key: os.environ[var] for key, var in CHECK_ENV.items() if os.environ.get(var)}


def gpu_gres(gres: str) -> tuple[str, int]:
    """("h100", 8) from `gpu:h100:8(S:0-1)`, ("", 4) from `gpu:4`; ("", 0) without GPUs."""
    text = re.sub(r"\([^)]*\)", "", gres or "")
    count, kind = 0, ""
    for m in _GPU_GRES.finditer(text):
        count += int(m.group(2))
        kind = kind or (m.group(1) or "")
    return kind, count


def _count(record: dict, key: str) -> int:
    """A node's CPUTot or RealMemory (MiB): 0 when Slurm gives none, SlurmError when not a number."""
    value = record.get(key) or "0"
    if not re.fullmatch(r"\d{1,12}", value):
        raise SlurmError(f"scontrol show node: {record.get('NodeName', '?')}: {key}={value[:40]!r} is not a number")
    return int(value)


def _config(backend) -> dict[str, str]:
    out = {}
    for line in backend.run("scontrol", "show", "config").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def cluster_from_slurm(backend) -> Cluster:
    """The cluster as Slurm describes it (SlurmError when Slurm cannot be asked)."""
    config = _config(backend)
    records = [r for r in parse_records(backend.run("scontrol", "show", "node", "--oneliner"))
               if is_node_name(r.get("NodeName", ""))]
    if not records:
        raise SlurmError("Slurm lists no nodes")
    partitions = parse_records(backend.run("scontrol", "show", "partition", "--oneliner"))
    default = next((p["PartitionName"] for p in partitions if p.get("Default") == "YES"), "")
    groups: dict[tuple, list[str]] = {}
    for r in records:
        kind, count = gpu_gres(r.get("Gres", ""))
        cpus = _count(r, "CPUTot")
        mem_gb = _count(r, "RealMemory") // 1024
        groups.setdefault((kind, count, cpus, mem_gb), []).append(r["NodeName"])
    classes, taken = [], set()
    for (kind, count, cpus, mem_gb), nodes in sorted(groups.items(), key=lambda kv: natural_order(kv[1])[0]):
        base = f"slurm-{kind or 'gpu'}x{count}" if count else f"slurm-cpu{cpus}"
        name, i = base, 2
        while name in taken:
            name, i = f"{base}-{i}", i + 1
        taken.add(name)
        cls = {"name": name, "nodes": fold(nodes), "cpus": cpus, "memory_gb": mem_gb}
        if count:
            cls["gpus"] = {"count": count}
        classes.append(cls)
    conf = backend.slurm_conf or slurm_configured()
    slurm = {"conf": conf, "partition": default}
    topology = Path(conf).parent / "topology.conf" if conf else None
    if config.get("TopologyPlugin", "").endswith("tree") and topology is not None and topology.is_file():
        slurm["topology_conf"] = str(topology)
    slurm_name = config.get("ClusterName", "")
    name = re.sub(r"[^A-Za-z0-9_.\-]", "-", slurm_name) if slurm_name not in ("", "(null)") else "slurm"
    document = {
        "cluster": {"name": name, "description": "built from Slurm alone (no site file)"},
        "access": {"transport": "srun"}, "slurm": slurm, "node_classes": classes,
        "checks": checks_from_env(),
    }
    cluster = site_from_document(document, f"{SOURCE_PREFIX}{conf or 'default'}")
    cluster.data["inferred"] = [
        f"no site file: {len(records)} nodes and their classes from Slurm (scontrol; classes by GPU "
        "GRES, CPUs and memory: each node is also judged against the majority of its class)",
        "NICs: each node's checks find its own (Slurm does not list NICs)",
        "fan-out: srun" + (f" in partition {default}" if default else ""),
        f"fabric: {'topology.conf ' + slurm['topology_conf'] if 'topology_conf' in slurm else 'none (no topology.conf)'}",
    ]
    return cluster


def inferred(cluster) -> list[str]:
    """What a Slurm-built cluster inferred ([] for a site file)."""
    return list(cluster.data.get("inferred") or [])
