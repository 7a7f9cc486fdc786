"""Slurm actions of an audit: drain nodes that failed, resume nodes fleetctl drained that now pass.

Rules that keep operators' trust:
- Only a definite finding drains: a `fail` result from the node's checks, or a failing fleet finding.
  A node that did not answer, or whose checks could not run (`error`), is never drained: that is
  fleetctl failing, not the node (Slurm marks unresponsive nodes itself).
- Only nodes whose reason carries fleetctl's prefix are resumed (the backend enforces it too), and
  only when they now pass (ok or warn) at a completed check run.
- A node already drained by somebody else is left alone (the backend skips it).
- A node Slurm does not know is reported as such; the others are still acted on.
- A Slurm command that fails is that node's `failed` entry, and the loop goes on: every action is
  either done, skipped with a reason, or failed with the error (nothing half-done and unreported).
  Once slurmctld is unreachable the remaining actions are marked failed without trying each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetctl.audit.report import AuditReport
from fleetctl.errors import SlurmError, SlurmUnreachable
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
    not_responding: list[str] = field(default_factory=list)  # resumed, slurmd not heard from yet
    unknown: list[str] = field(default_factory=list)  # audited nodes Slurm does not know
    failed: dict[str, str] = field(default_factory=dict)  # node -> the Slurm error of its action

    @property
    def complete(self) -> bool:
        """Every planned action was done or deliberately skipped: none failed."""
        return not self.failed

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "drain": [{"node": n, "code": c, "text": t} for n, (c, t) in sorted(self.drain.items())],
            "resume": sorted(self.resume), "drained": sorted(self.drained),
            "resumed": sorted(self.resumed), "skipped": self.skipped,
            "unknown": sorted(self.unknown), "failed": self.failed,
            "not_responding": sorted(self.not_responding),
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
    """What to do. Raises SlurmError only when Slurm cannot be asked at all (the caller reports it)."""
    plan = ActionPlan(dry_run=dry_run)
    audited = list(report.outcomes)
    known = backend.lookup(audited) if (drain or resume) else None
    slurm_nodes = known.found if known else {}
    plan.unknown = list(known.unknown) if known else []
    for node in audited:
        state = slurm_nodes.get(node)
        cause = drain_cause(report, node)
        if node in plan.unknown:
            if drain and cause is not None:
                plan.skipped[node] = "not drained: Slurm does not know this node (not in slurm.conf?)"
            continue
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
    """Drain then resume, node by node; a Slurm error is recorded in `plan.failed`, never raised.
    Once slurmctld is unreachable, the remaining actions are marked "not attempted" instead of each
    waiting for its timeout."""
    if plan.dry_run:
        return plan
    unreachable: list[str] = []  # the first unreachable-slurmctld message, once seen

    def each(nodes, verb: str, act) -> None:
        for node in nodes:
            if unreachable:
                plan.failed[node] = f"{verb} not attempted: {unreachable[0]}"
                continue
            try:
                act(node)
            except SlurmError as exc:
                plan.failed[node] = f"{verb} failed: {exc.message}"
                if isinstance(exc, SlurmUnreachable):
                    unreachable.append(exc.message)

    def drain(node):
        code, text = plan.drain[node]
        result = backend.drain([node], code.replace("/", "."), text)
        plan.drained += result.drained
        plan.skipped.update(result.skipped)

    def resume(node):
        result = backend.resume([node], wait_s=0)
        plan.resumed += result.resumed
        plan.skipped.update(result.refused)

    each(sorted(plan.drain), "drain", drain)
    each(sorted(plan.resume), "resume", resume)
    if plan.resumed:  # one wait for all: slurmctld pings every resumed node's slurmd at once
        try:
            plan.not_responding = backend.wait_responding(plan.resumed)
        except SlurmError as exc:
            plan.not_responding = list(plan.resumed)
            plan.failed.setdefault(plan.resumed[0], f"resumed; could not read its state back: {exc.message}")
    return plan


def acknowledgements(backend, nodes: list[str], resume: bool, ack_all: bool, dry_run: bool) -> dict | None:
    """Which nodes acknowledge their kernel log in this audit: all of them with --ack-kernel-log; with
    --resume, those fleetctl drained for an Xid (resuming them is the operator saying it was repaired).
    Nothing with --dry-run: a dry run changes no node's state."""
    if dry_run:
        return None
    if ack_all:
        return {"by": "fleetctl audit --ack-kernel-log", "nodes": list(nodes)}
    if not resume or backend is None:
        return None
    from fleetctl.slurm.reasons import parse_reason

    drained_for_xid = []
    for state in backend.lookup(nodes).found.values():
        reason = parse_reason(state.reason, backend.drain_prefix) if state.drained else None
        if reason is not None and reason.code.startswith(("xid.", "sxid.")):
            drained_for_xid.append(state.name)
    return {"by": "fleetctl audit --resume", "nodes": drained_for_xid} if drained_for_xid else None
