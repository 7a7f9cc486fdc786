"""Slurm actions of an audit: drain nodes that failed, resume nodes fleetctl drained that now pass.

Rules that keep operators' trust:
- Only a definite finding drains: a `fail` result from the node's checks, or a failing fleet finding.
  A node that did not answer, or whose checks could not run (`error`), is never drained: that is
  fleetctl failing, not the node (Slurm marks unresponsive nodes itself).
- Only nodes whose reason carries fleetctl's prefix are resumed (the backend enforces it too), and
  only when they now pass (ok or warn) at a completed check run.
- A node already drained by somebody else is left alone (the backend skips it).
"""

from __future__ import annotations

from dataclasses import dataclass, field


from fleetctl.audit.report import AuditReport
from fleetctl.nodeset import contains
from fleetctl.slurm.reasons import is_ours


@dataclass
class ActionPlan:
    drain: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (code, text)
    resume: list[str] = field(default_factory=list)
    dry_run: bool = False
    drained: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why nothing was done

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "drain": [{"node": n, "code": c, "text": t} for n, (c, t) in sorted(self.drain.items())],
            "resume": sorted(self.resume), "drained": sorted(self.drained),
            "resumed": sorted(self.resumed), "skipped": self.skipped,
        }


def drain_cause(report: AuditReport, node: str) -> tuple[str, str] | None:
    """(code, text) of the node's most serious definite failure, or None."""
    outcome = report.outcomes[node]
    if outcome.doc is not None:
        fails = [r for r in outcome.doc.get("results", []) if r.get("status") == "fail"]
        if fails:
            first = fails[0]
            more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
            return first["code"], first.get("message", "") + more
    for finding in report.fleet:
        if finding["status"] == "fail" and contains(finding["nodes"], node):
            return finding["code"], finding.get("message", "")
    return None


def plan_actions(report: AuditReport, backend, *, drain: bool, resume: bool,
                 dry_run: bool = False) -> ActionPlan:
    plan = ActionPlan(dry_run=dry_run)
    audited = list(report.outcomes)
    slurm_nodes = {n.name: n for n in backend.nodes(audited)} if (drain or resume) else {}
    for node in audited:
        state = slurm_nodes.get(node)
        cause = drain_cause(report, node)
        if drain and cause is not None:
            if state is not None and state.drained and not is_ours(state.reason, backend.drain_prefix):
                plan.skipped[node] = f"already drained by someone else: {state.reason!r}"
            elif state is not None and state.drained:
                plan.skipped[node] = f"already drained by fleetctl: {state.reason!r}"
            else:
                plan.drain[node] = cause
        elif resume and cause is None and state is not None and state.drained \
                and is_ours(state.reason, backend.drain_prefix):
            outcome = report.outcomes[node]
            if outcome.doc is None or not outcome.doc.get("complete", False) or outcome.status == "error":
                plan.skipped[node] = "not resumed: its checks did not complete"
            else:
                plan.resume.append(node)
    return plan


def apply_actions(plan: ActionPlan, backend) -> ActionPlan:
    if plan.dry_run:
        return plan
    for node, (code, text) in sorted(plan.drain.items()):
        result = backend.drain([node], code.replace("/", "."), text)
        plan.drained += result.drained
        plan.skipped.update(result.skipped)
    if plan.resume:
        result = backend.resume(plan.resume)
        plan.resumed += result.resumed
        plan.skipped.update(result.refused)
    return plan
