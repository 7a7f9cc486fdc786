"""Trace the routed fabric from the nodes: the mesh's path tracer (fleetctl/mesh/trace_agent.py) on
every node at once, from each fabric NIC towards other nodes' NIC addresses with several source
ports (ECMP spreads them over the paths), then traced.infer on the hop lists.

Each NIC traces towards at most MAX_DESTS NICs of other nodes, spread over the node list (rack
layouts put neighbours on one leaf), and MAX_FLOWS bounds the whole plan, so the work per NIC and
the payload stay bounded whatever the fleet size. The
tracer's output comes from the nodes: it is checked and bounded here.
"""

from __future__ import annotations

import ipaddress
import re

from fleetctl.discover.facts import NodeFacts
from fleetctl.discover.traced import Trace
from fleetctl.fanout.payload import bundle, json_output, run_python, with_config
from fleetctl.mesh import trace_agent
from fleetctl.mesh.discovery import TRACE_DPORT

MAX_DESTS = 16  # destination NICs per source NIC
MAX_FLOWS = 50_000  # in all: ~60 bytes each in every node's payload
SPORTS = 8  # source ports per (source, destination): 2-4 ECMP next hops per tier with margin
SPORT_BASE = 62000  # above Linux's ephemeral range, apart from the mesh's 61000-61100
MAX_SWITCH_HOPS = 7  # TTLs tried: a 3-tier Clos has 5 switches on its longest path
TIMEOUT_S, RETRIES, LIMIT_S = 0.3, 1, 60
_KEY = re.compile(r"^t\d{1,9}$")


def fabric_nics(facts: dict[str, NodeFacts]) -> dict[str, tuple[str, int, str]]:
    """`node:nic` -> (IPv4 address, prefix length, netdev) of every fabric NIC with an address."""
    out = {}
    for node in sorted(facts):
        f = facts[node]
        for nic in f.nics:
            if nic.name not in f.fabric_nics:
                continue
            v4 = [a for a in nic.addresses if ":" not in a]
            if v4:
                iface = ipaddress.IPv4Interface(v4[0])
                out[f"{node}:{nic.name}"] = (str(iface.ip), iface.network.prefixlen, nic.netdev or nic.name)
    return out


def plan(nics: dict[str, tuple[str, int, str]], max_dests: int = MAX_DESTS, sports: int = SPORTS):
    """(tracer configuration, flow key -> (source NIC, destination NIC)). Every node's payload
    carries the whole configuration (as the mesh's does): at most MAX_FLOWS flows in all, fewer
    destinations per NIC on a large fleet (each cable is still crossed by many flows)."""
    order = list(nics)
    n = len(order)
    sports = max(1, min(sports, MAX_FLOWS // max(1, n)))
    dests = max(1, min(max_dests, MAX_FLOWS // max(1, n * sports)))
    nodes: dict[str, list] = {}
    flows: dict[str, tuple[str, str]] = {}
    for i, src in enumerate(order):
        node = src.split(":", 1)[0]
        step = max(1, (n - 1) // dests)
        picked: list[str] = []
        for k in range(dests):  # every `step`-th NIC after this one, or the next one of another node
            for extra in range(n - 1):
                dst = order[(i + 1 + k * step + extra) % n]
                if dst.split(":", 1)[0] != node and dst not in picked:
                    picked.append(dst)
                    break
        for dst in picked:
            for j in range(sports):
                key = f"t{len(flows)}"
                flows[key] = (src, dst)
                addr, _p, dev = nics[src]
                nodes.setdefault(node, []).append(
                    [key, addr, SPORT_BASE + j, nics[dst][0], TRACE_DPORT, MAX_SWITCH_HOPS, dev])
    config = {"nodes": nodes, "timeout": TIMEOUT_S, "retries": RETRIES, "limit": LIMIT_S}
    return config, flows


def run_traces(transport, facts: dict[str, NodeFacts]) -> tuple[dict, list[Trace], dict[str, str], list[str]]:
    """Trace from every node with fabric NICs: (NIC table, traces, node -> why it gave none, errors)."""
    nics = fabric_nics(facts)
    config, flows = plan(nics)
    if not flows:
        return nics, [], {}, ["no two nodes with addressed fabric NICs: nothing to trace"]
    package, _, name = trace_agent.__name__.rpartition(".")
    script = with_config(bundle(package, (name,), "path tracer payload"), config)
    traces, failed, errors = [], {}, []
    for r in run_python(transport, sorted(config["nodes"]), script, timeout=LIMIT_S + 30):
        doc = json_output(r)
        if not isinstance(doc, dict) or not isinstance(doc.get("paths"), dict):
            failed[r.node] = (r.error or (r.stderr.strip().splitlines() or [r.status])[-1])[:200] \
                if doc is None else "the path tracer printed no paths"
            continue
        for key, hops in list(doc["paths"].items())[:len(flows)]:
            src, dst = flows.get(key, ("", ""))
            if not _KEY.match(str(key)) or src.split(":", 1)[0] != r.node:
                continue  # a key this node was not given: ignored
            clean = _hops(hops)
            if clean is not None:
                traces.append(Trace(src, dst, clean))
        node_errors = doc.get("errors")
        errors += [f"{r.node}: {str(e)[:200]}" for e in (node_errors if isinstance(node_errors, list) else [])[:5]]
    return {n: (a, p) for n, (a, p, _d) in nics.items()}, traces, failed, errors


def _hops(hops) -> list | None:
    if not isinstance(hops, list) or len(hops) > MAX_SWITCH_HOPS:
        return None
    out = []
    for h in hops:
        if h is None:
            out.append(None)
            continue
        try:
            out.append(str(ipaddress.IPv4Address(h)) if isinstance(h, str) else None)
        except ValueError:
            return None
    return out
