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
from fleetctl.discover.options import DiscoverOptions
from fleetctl.discover.trace_run import fabric_nics, run_traces
from fleetctl.discover.traced import infer, merge
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


SOURCES = ("auto", "lldp", "trace")


def discover(transport, nodes: list[str], opts: DiscoverOptions = DiscoverOptions(), *,
             ib: IbFabric | None = None, node_names: dict[str, str] | None = None, simulated_gpus: str = "",
             switch_transport=None, on_result: Callable | None = None) -> Discovery:
    """opts.source: `lldp` reads LLDP only; `trace` ignores LLDP and traces the routed fabric; `auto`
    reads LLDP and traces when it gives no switch-to-switch cable on a routed fabric (or always
    with opts.trace). `ib`, `node_names`: an InfiniBand subnet as ibnetdiscover describes it."""
    switches = opts.switch_nodes()
    source = opts.source
    if source not in SOURCES:
        raise ValueError(f"unknown fabric source {source!r}")
    started = time.monotonic()
    out = Discovery()
    args = {"budget_s": opts.budget, "lldp_socket": opts.lldp_socket or "", "simulated_gpus": simulated_gpus}
    out.facts, out.failed = collect_facts(transport, list(nodes), args, on_result=on_result)
    if not out.facts:
        detail = "; ".join(f"{n}: {why}" for n, why in list(out.failed.items())[:3])
        raise TransportError(f"no node answered the discovery ({detail or 'no nodes'})")
    include, exclude = opts.include_globs(), opts.exclude_globs()
    for f in out.facts.values():
        if source == "trace":
            f.lldp = []  # ignored: the fabric comes from the traces alone
        choose_fabric_nics(f, include, exclude)
    if switches and source != "trace":
        out.switch_facts, failed = collect_facts(switch_transport or transport, list(switches), args,
                                                 switch=True)
        out.failed.update(failed)
    out.classes = build_classes(out.facts)
    if source != "trace":
        from_lldp(out.facts, out.switch_facts, out.fabric)
    if ib is not None:
        from_ibnetdiscover(ib, out.facts, out.fabric, node_names)
    if source == "trace" or (source == "auto" and ib is None and (opts.trace or _trace_helps(out))):
        _add_traces(transport, out)
    if not out.fabric.links:
        out.notes.append("no LLDP neighbours, no InfiniBand subnet and no traced path: the file has no "
                         "fabric; give --ibnetdiscover FILE, run lldpd on hosts (and switches), trace a "
                         "routed fabric (--source trace), or use Slurm's topology.conf (slurm.topology_conf)")
    assign_tiers(out.fabric)
    assign_ids(out.fabric)
    out.elapsed_s = time.monotonic() - started
    return out


def _trace_helps(d: Discovery) -> bool:
    """LLDP gave no switch-to-switch cable, and the fabric is routed to the hosts: most addressed
    fabric NICs sit in a point-to-point subnet (/30, /31) with their switch."""
    spec = d.fabric
    if any(a in spec.switches and b in spec.switches for a, b in (l.devices() for l in spec.links)):
        return False
    prefixes = [p for _a, p, _d in fabric_nics(d.facts).values()]
    return len({n for n in d.facts if d.facts[n].fabric_nics}) >= 2 and \
        sum(p >= 30 for p in prefixes) * 2 > len(prefixes)


def _add_traces(transport, d: Discovery) -> None:
    nics, traces, failed, errors = run_traces(transport, d.facts)
    for node, why in failed.items():
        d.notes.append(f"{node}: path tracing failed: {why}")
    d.notes += [f"path tracer: {e}" for e in errors[:5]]
    if not traces:
        return
    if not any(any(t.hops) for t in traces):
        d.notes.append("traced paths: no hop answered (ICMP time-exceeded filtered or rate-limited?)")
        return
    names = {l.a: l.devices()[1] for l in d.fabric.links
             if l.devices()[1] in d.fabric.switches and ":" in l.a}
    traced = infer(nics, traces, names=names, taken=set(d.facts) | set(d.fabric.switches))
    merge(d.fabric, traced)
    d.notes.append(f"fabric from TTL-traced paths: {len(traces)} flows from "
                   f"{len({t.src.split(':', 1)[0] for t in traces})} nodes; switches and cables inferred "
                   "from the addresses that answered (see each switch's comment)")
