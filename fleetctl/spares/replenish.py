"""`fleetctl spares replenish`: audit nodes fleetctl drained (and somebody repaired), resume those that
pass and put them back in the pool.

Only nodes whose drain reason carries fleetctl's prefix are candidates (an operator's drain is never
undone); the audit is the caller's (`audit(nodes) -> fleetctl.audit/1 report dict`), so that this
module stays free of transports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetctl.slurm.reasons import is_ours
from fleetctl.spares.pool import Outcome


@dataclass
class Replenish(Outcome):
    candidates: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)  # suspects: never resumed, with why


def drained_by_us(backend, nodes: list[str] | None = None) -> list[str]:
    return sorted(n.name for n in backend.nodes(nodes)
                  if n.drained and is_ours(n.reason, backend.drain_prefix))


def replenish(pool, backend, audit, *, nodes: list[str] | None = None, dry_run: bool = False,
              hold: dict[str, str] | None = None) -> Replenish:
    """`hold`: nodes never to resume, with why (act's suspects: too many incidents lately; they wait
    for their service request, whatever an audit says today)."""
    out = Replenish(dry_run=dry_run)
    drained = drained_by_us(backend, nodes)
    out.held = {n: why for n, why in (hold or {}).items() if n in drained}
    out.candidates = [n for n in drained if n not in out.held]
    if not out.candidates:
        return out
    report = audit(out.candidates)
    verdicts = pool.verdicts.record_report(report) if not dry_run else {
        n["node"]: {"status": n.get("status")} for n in report.get("nodes", [])}
    for node in out.candidates:
        verdict = verdicts.get(node, {}).get("status", "error")
        if verdict in ("ok", "warn"):
            out.passed.append(node)
        else:
            out.failed[node] = f"audit {verdict}"
    if dry_run or not out.passed:
        return out
    result = backend.resume(out.passed)
    out.resumed = result.resumed
    out.refused.update(result.refused)
    if out.resumed:
        change = pool.add(out.resumed)
        out.added = change.changed
        out.refused.update(change.refused)
        out.warnings += change.warnings
    return out
