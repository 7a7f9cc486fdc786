"""Run the agentless check payload on nodes (or in this process) and collect one outcome per node.

Nodes of one class share one payload argument: node-specific values (the node name, `{node}` in the
kernel-log, simulated-GPU and state-file paths) are filled in on the node from FLEETCTL_NODE, which
every transport sets. So a whole class is one fan-out call, not one call per node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetctl.checks.builder import LEVELS
from fleetctl.checks import build_payload, next_level, payload_args, run_payload_locally, suspects
from fleetctl.checks.document import check_document, parse_document
from fleetctl.errors import DataError, FleetctlError, UsageError

# Seconds a command may need beyond the payload's own budget (interpreter start, sending the output);
# connecting is bounded separately by access.connect_timeout.
TRANSPORT_MARGIN_S = 5.0

@dataclass
class NodeOutcome:
    """What one node gave back: its check document, or why there is none."""

    node: str
    doc: dict | None = None
    transport_status: str = "ok"  # the fan-out status: ok, unreachable, timeout, auth-failed, ...
    error: str = ""  # why there is no document
    duration_s: float = 0.0
    escalated_from: list[str] = field(default_factory=list)  # lower levels this node was run at first

    @property
    def status(self) -> str:
        """ok / warn / fail / error: the document's worst status, `error` without a document."""
        return self.doc.get("status", "error") if self.doc else "error"

    def to_dict(self) -> dict:
        doc = self.doc or {}
        return {
            "node": self.node, "status": self.status, "action": doc.get("action", "none"),
            "level": doc.get("level"), "complete": doc.get("complete", False),
            "simulated": doc.get("simulated", False), "transport": self.transport_status,
            "error": self.error, "duration_s": round(self.duration_s, 3),
            "escalated_from": self.escalated_from, "results": doc.get("results", []),
            "facts": doc.get("facts", {}),
        }


def class_args(cluster, nodes: list[str], level: str, since: float | None, budget_s: float | None,
               ack: dict | None = None) -> dict:
    """One payload argument for nodes of one class, with `{node}` left for the node to fill in."""
    if ack is not None:
        ack = {"by": ack["by"], "nodes": [n for n in ack["nodes"] if n in set(nodes)]}
    args = payload_args(cluster, nodes[0], level, since, budget_s=budget_s,
                        ack_kernel_log=ack if ack and ack["nodes"] else None)
    args["node"] = "{node}"
    for key in ("kernel_log", "simulated_gpus", "simulated_nic_stats", "state_file"):
        args[key] = cluster.checks.get(key, "") or ""
    return args


def payload_source() -> str:
    """The node-check payload, filling `{node}` in its argument on each node."""
    from fleetctl.fanout.payload import with_node_fill

    return with_node_fill(build_payload())


def _by_class(cluster, nodes: list[str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for node in nodes:
        cls = cluster.node_class(node)
        if cls is None:
            raise UsageError(f"node {node!r} is not in any node class of {cluster.source}")
        groups.setdefault(cls.name, []).append(node)
    return list(groups.values())


@dataclass(frozen=True)
class CollectOptions:
    since: float | None = None  # judge kernel-log lines from then on
    budget_s: float | None = None  # per node (None: by level)
    escalate: bool = False
    ack: dict | None = None  # {"by": who, "nodes": [...]}: those nodes acknowledge their kernel log


def collect(cluster, nodes: list[str], level: str, *, transport=None, on_result: Callable | None = None,
            **options) -> dict[str, NodeOutcome]:
    """Run the checks at `level` on every node through `transport` (default: the site's).
    `options`: CollectOptions as keywords (since, budget_s, escalate, ack).

    With `escalate`, suspects (a warning, or a check that could not finish) are run again at the next
    level (quick -> standard -> deep), so a prolog-speed sweep can still end in deep evidence for
    them; a node that failed already has its verdict.
    """
    if level not in LEVELS:
        raise UsageError(f"unknown level {level!r}; choose {', '.join(LEVELS)}")
    from fleetctl.fanout import get_transport

    o = CollectOptions(**options)
    since, budget_s, escalate, ack = o.since, o.budget_s, o.escalate, o.ack
    owned = transport is None
    transport = transport or get_transport(cluster=cluster)
    try:
        outcomes = _collect_once(cluster, nodes, level, transport, since, budget_s, on_result, ack)
        current, nxt = level, next_level(level)
        while escalate and nxt is not None:
            again_nodes = suspects({n: o.doc for n, o in outcomes.items()})
            if not again_nodes:
                break
            again = _collect_once(cluster, again_nodes, nxt, transport, since, None, on_result)
            for node, outcome in again.items():
                outcome.escalated_from = outcomes[node].escalated_from + [current]
                outcome.duration_s += outcomes[node].duration_s
                outcomes[node] = outcome
            current, nxt = nxt, next_level(nxt)
        return outcomes
    finally:
        if owned:
            transport.close()


def _collect_once(cluster, nodes, level, transport, since, budget_s, on_result,
                  ack=None) -> dict[str, NodeOutcome]:
    from fleetctl.fanout import run_python

    source = payload_source()
    outcomes: dict[str, NodeOutcome] = {}
    for group in _by_class(cluster, nodes):
        args = class_args(cluster, group, level, since, budget_s, ack)
        timeout = args["budget_s"] + TRANSPORT_MARGIN_S
        for r in run_python(transport, group, source, [json.dumps(args)], timeout=timeout,
                            on_result=on_result):
            outcomes[r.node] = _outcome(r)
    return {n: outcomes[n] for n in nodes}


def _outcome(r) -> NodeOutcome:
    out = NodeOutcome(r.node, transport_status=r.status, duration_s=r.duration_s)
    if r.status in ("ok", "failed"):  # the payload ran; its document (checked: untrusted) says the rest
        try:
            out.doc = parse_document(r.stdout or "", r.exit_code, r.stderr or "")
        except DataError as exc:
            out.error = exc.message
    else:
        out.error = r.error or r.status
    return out


def collect_local(cluster, node: str, level: str, *, since: float | None = None,
                  budget_s: float | None = None, ack: dict | None = None, alone: bool = False) -> NodeOutcome:
    """Run the checks in this process for `node` (`fleetctl audit --local`, the Slurm hooks).
    alone: a node in no node class is checked by itself instead of refused."""
    start = time.monotonic()
    ack = ack if ack and node in ack["nodes"] else None
    args = payload_args(cluster, node, level, since, budget_s=budget_s,
                        ack_kernel_log={"by": ack["by"], "nodes": [node]} if ack else None, alone=alone)
    try:
        doc = check_document(run_payload_locally(args))
    except FleetctlError as exc:
        return NodeOutcome(node, transport_status="local", error=exc.message,
                           duration_s=time.monotonic() - start)
    return NodeOutcome(node, doc=doc, transport_status="local", duration_s=time.monotonic() - start)
