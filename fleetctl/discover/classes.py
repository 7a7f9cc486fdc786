"""Group discovered nodes into node classes by hardware fingerprint, and find what each class
expects: the majority value of every fact among its nodes (a node that differs is a deviation,
not a class of its own).

Fingerprint: GPU model and count, logical CPUs, and the fabric NICs (names and kinds). Rates, MTUs,
memory and versions are not in it: they are what drifts, and drift is what the site file is for.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from fleetctl.discover.facts import NodeFacts
from fleetctl.nodeset import fold, natural_order


@dataclass
class ClassSpec:
    name: str
    nodes: list[str]
    cpus: int
    memory_gb: float
    gpus: dict
    nics: list[dict]  # name, kind, netdev, rate_gbps, mtu
    observed: dict = field(default_factory=dict)  # majority versions, written as comments
    deviations: list[dict] = field(default_factory=list)  # {node, what, value, expected}

    @property
    def nodeset(self) -> str:
        return fold(self.nodes)


def fingerprint(f: NodeFacts) -> tuple:
    nics = tuple(sorted((n.name, n.kind) for n in f.nics if n.name in f.fabric_nics))
    return (f.gpus.get("model", ""), f.gpus.get("count", 0), f.cpus, nics)


def _majority(values):
    """The most common value (ties: the first in natural node order)."""
    counts = Counter(values)
    top = max(counts.values())
    return next(v for v in values if counts[v] == top)


def class_name(model: str, count: int, taken: set[str]) -> str:
    """`h100x8` from "NVIDIA H100 80GB HBM3" and 8; `cpu` without GPUs; -2, -3 when taken."""
    base = "cpu"
    if count:
        words = [w for w in re.split(r"[^A-Za-z0-9]+", model) if w and w.upper() not in ("NVIDIA", "GEFORCE", "TESLA")]
        key = next((w for w in words if any(c.isdigit() for c in w)), words[0] if words else "gpu")
        base = f"{key.lower()}x{count}"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def build_classes(facts: dict[str, NodeFacts]) -> list[ClassSpec]:
    groups: dict[tuple, list[str]] = {}
    for node in natural_order(facts):
        groups.setdefault(fingerprint(facts[node]), []).append(node)
    taken: set[str] = set()
    out = []
    for fp, nodes in sorted(groups.items(), key=lambda kv: natural_order(kv[1])[0]):
        out.append(_spec(class_name(fp[0], fp[1], taken), nodes, facts))
    return out


def _spec(name: str, nodes: list[str], facts: dict[str, NodeFacts]) -> ClassSpec:
    first = facts[nodes[0]]
    mem = statistics.median(facts[n].memory_gb for n in nodes)
    gpu_keys = ("pcie_gen", "pcie_width", "nvlinks")
    gpus = {"count": first.gpus.get("count", 0), "model": first.gpus.get("model", "")}
    if gpus["count"]:
        gpus.update({k: _majority([facts[n].gpus.get(k, 0) for n in nodes]) for k in gpu_keys})
    spec = ClassSpec(name=name, nodes=nodes, cpus=first.cpus, memory_gb=float(int(mem)), gpus=gpus, nics=[])
    for nic_name in [n for n in first.fabric_nics]:
        per_node = {n: facts[n].nic(nic_name) for n in nodes}
        kind = per_node[nodes[0]].kind
        entry = {"name": nic_name, "kind": kind}
        netdevs = [p.netdev for p in per_node.values() if p and p.netdev]
        if netdevs and _majority(netdevs):
            entry["netdev"] = _majority(netdevs)
        for attr in ("rate_gbps", "mtu"):
            values = [getattr(p, attr) for p in per_node.values() if p]
            expected = _majority(values)
            entry[attr] = expected
            for node, p in per_node.items():
                if p and getattr(p, attr) != expected:
                    spec.deviations.append({"node": node, "what": f"{nic_name}.{attr}",
                                            "value": getattr(p, attr), "expected": expected})
        spec.nics.append(entry)
    spec.observed = {
        "kernel": _majority([facts[n].kernel for n in nodes]),
        "gpu_driver": _majority([facts[n].gpus.get("driver_version", "") for n in nodes]),
        "memory_gb_range": [min(facts[n].memory_gb for n in nodes), max(facts[n].memory_gb for n in nodes)],
    }
    for node in nodes:
        if facts[node].memory_gb < mem * 0.95:
            spec.deviations.append({"node": node, "what": "memory_gb", "value": facts[node].memory_gb,
                                    "expected": spec.memory_gb})
    return spec
