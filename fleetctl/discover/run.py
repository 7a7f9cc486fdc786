"""One discovery: fan the node payload out to the nodes (and to Linux switches that run lldpd),
check what comes back, build node classes and the fabric."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetctl.discover.build import discover_payload
from fleetctl.discover.classes import ClassSpec, build_classes
from fleetctl.discover.fabric import FabricSpec, assign_ids, assign_tiers, from_ibnetdiscover, from_lldp
from fleetctl.discover.facts import NodeFacts, choose_fabric_nics, parse_facts
from fleetctl.discover.ibnet import IbFabric
from fleetctl.errors import DataError, TransportError
from fleetctl.fanout.payload import json_output, run_python, with_node_fill

TRANSPORT_MARGIN_S = 10.0


@dataclass
class Discovery:
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    switch_facts: dict[str, NodeFacts] = field(default_factory=dict)
    classes: list[ClassSpec] = field(default_factory=list)
    fabric: FabricSpec = field(default_factory=FabricSpec)
    failed: dict[str, str] = field(default_factory=dict)  # node or switch -> why it gave no facts
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def sources(self) -> list[str]:
        return ["nodes"] + self.fabric.sources

    def summary(self) -> dict:
        return {"nodes": len(self.facts), "failed": len(self.failed), "classes": len(self.classes),
                "switches": len(self.fabric.switches), "links": len(self.fabric.links),
                "sources": self.sources, "elapsed_s": round(self.elapsed_s, 3)}

    def to_dict(self) -> dict:
        return {
            "schema": "fleetctl.discover/1", "summary": self.summary(),
            "classes": [{"name": c.name, "nodes": c.nodeset, "cpus": c.cpus, "memory_gb": c.memory_gb,
                         "gpus": c.gpus, "nics": c.nics, "observed": c.observed, "deviations": c.deviations}
                        for c in self.classes],
            "switches": self.fabric.switches,
            "links": [{"id": l.id, "a": l.a, "b": l.b, "a_address": l.a_address, "b_address": l.b_address,
                       "rate_gbps": l.rate_gbps, "source": l.source} for l in self.fabric.links],
            "failed": self.failed,
            "notes": self.notes + self.fabric.notes
            + [f"{n}: {note}" for n, f in self.facts.items() for note in f.notes][:200],
        }


def collect_facts(transport, nodes: list[str], args: dict, *, switch: bool = False,
                  on_result: Callable | None = None) -> tuple[dict[str, NodeFacts], dict[str, str]]:
    """Run the payload on `nodes`; (facts by node, reason by node that gave none)."""
    if not nodes:
        return {}, {}
    args = dict(args, switch=switch)
    timeout = float(args.get("budget_s", 20.0)) + TRANSPORT_MARGIN_S
    facts, failed = {}, {}
    for r in run_python(transport, nodes, with_node_fill(discover_payload()), [json.dumps(args)],
                        timeout=timeout, on_result=on_result):
        doc = json_output(r)
        if doc is None:
            failed[r.node] = r.error or r.status
            continue
        try:
            facts[r.node] = parse_facts(doc, r.node)
        except DataError as exc:
            failed[r.node] = exc.message
    return facts, failed


def discover(transport, nodes: list[str], *, switches: list[str] = (), switch_transport=None,
             include_nics: tuple[str, ...] = (), exclude_nics: tuple[str, ...] = (), lldp_socket: str = "",
             simulated_gpus: str = "", budget_s: float = 20.0, ib: IbFabric | None = None,
             node_names: dict[str, str] | None = None, on_result: Callable | None = None) -> Discovery:
    started = time.monotonic()
    out = Discovery()
    args = {"budget_s": budget_s, "lldp_socket": lldp_socket, "simulated_gpus": simulated_gpus}
    out.facts, out.failed = collect_facts(transport, list(nodes), args, on_result=on_result)
    if not out.facts:
        detail = "; ".join(f"{n}: {why}" for n, why in list(out.failed.items())[:3])
        raise TransportError(f"no node answered the discovery ({detail or 'no nodes'})")
    for f in out.facts.values():
        choose_fabric_nics(f, include_nics, exclude_nics)
    if switches:
        out.switch_facts, failed = collect_facts(switch_transport or transport, list(switches), args,
                                                 switch=True)
        out.failed.update(failed)
    out.classes = build_classes(out.facts)
    from_lldp(out.facts, out.switch_facts, out.fabric)
    if ib is not None:
        from_ibnetdiscover(ib, out.facts, out.fabric, node_names)
    if not out.fabric.links:
        out.notes.append("no LLDP neighbours and no InfiniBand subnet: the file has no fabric; give "
                         "--ibnetdiscover FILE, run lldpd on hosts (and switches), or use Slurm's "
                         "topology.conf (slurm.topology_conf)")
    assign_tiers(out.fabric)
    assign_ids(out.fabric)
    out.elapsed_s = time.monotonic() - started
    return out
