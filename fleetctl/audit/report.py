"""The audit report: per-node outcomes, fleet consistency findings, a summary and the exit code.

JSON schema `fleetctl.audit/1` (docs/audit.md). Exit codes: 0 healthy, 1 warnings only (or nodes
that could not be checked), 2 failures found, 3 the audit itself could not run (no node answered).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


from fleetctl.audit.runner import NodeOutcome
from fleetctl.checks.payload.common import worst_status
from fleetctl.nodeset import contains, fold, natural_order
from fleetctl.errors import EXIT_ERROR, EXIT_FAILURES, EXIT_OK, EXIT_WARNINGS

SCHEMA = "fleetctl.audit/1"
ORDER = {"fail": 0, "error": 1, "warn": 2, "ok": 3, "skipped": 4}  # worst first


@dataclass
class AuditReport:
    cluster: str
    level: str
    started: float
    outcomes: dict[str, NodeOutcome]
    fleet: list[dict] = field(default_factory=list)
    finished: float = field(default_factory=time.time)
    actions: dict | None = None  # filled by the Slurm actions (drain/resume), see actions.py
    changes: dict | None = None  # filled from the history directory (export.changes_since)

    @property
    def simulated(self) -> bool:
        return any(o.doc and o.doc.get("simulated") for o in self.outcomes.values())

    def node_status(self, node: str) -> str:
        """The node's own status, raised to `fail` by a failing fleet finding that names it."""
        status = self.outcomes[node].status
        for finding in self.fleet:
            if finding["status"] == "fail" and contains(finding["nodes"], node):
                return "fail"
        return status

    def by_status(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {s: [] for s in ("fail", "error", "warn", "ok")}
        for node in self.outcomes:
            out.setdefault(self.node_status(node), []).append(node)
        return out

    @property
    def status(self) -> str:
        groups = self.by_status()
        return worst_status(s for s, nodes in groups.items() if nodes)

    @property
    def exit_code(self) -> int:
        groups = self.by_status()
        if self.outcomes and all(o.doc is None for o in self.outcomes.values()):
            return EXIT_ERROR  # nothing answered: the audit itself could not run
        if groups["fail"]:
            return EXIT_FAILURES
        if groups["warn"] or groups["error"] or any(f["status"] == "warn" for f in self.fleet):
            return EXIT_WARNINGS
        return EXIT_OK

    def summary(self) -> dict:
        groups = self.by_status()
        return {
            "nodes": len(self.outcomes), "status": self.status, "exit_code": self.exit_code,
            **{s: len(groups.get(s, [])) for s in ("ok", "warn", "fail", "error")},
            **{f"{s}_nodes": fold(groups[s]) for s in ("warn", "fail", "error")
               if groups.get(s)},
            "fleet_findings": len(self.fleet),
        }

    def nodes_worst_first(self) -> list[str]:
        natural = natural_order(self.outcomes)  # node2 before node10
        return sorted(natural, key=lambda n: ORDER.get(self.node_status(n), 9))  # stable sort

    def to_dict(self) -> dict:
        nodes = []
        for node in self.nodes_worst_first():
            entry = self.outcomes[node].to_dict()
            entry["status"] = self.node_status(node)
            nodes.append(entry)
        return {
            "schema": SCHEMA, "cluster": self.cluster, "level": self.level,
            "started": self.started, "finished": self.finished,
            "elapsed_s": round(self.finished - self.started, 3), "simulated": self.simulated,
            "summary": self.summary(), "nodes": nodes, "fleet": self.fleet,
            "actions": self.actions, "changes": self.changes,
        }


def build_report(cluster, outcomes: dict[str, NodeOutcome], *, level: str, started: float) -> AuditReport:
    from fleetctl.checks import fleet_consistency

    docs = {node: o.doc for node, o in outcomes.items()}
    fleet = fleet_consistency(docs, cluster) if len(outcomes) > 1 else []
    return AuditReport(cluster=cluster.name, level=level, started=started, outcomes=outcomes, fleet=fleet)
