"""Adding nodes to the spare pool and taking them out, with the audit a node must pass to join."""

from __future__ import annotations

import time

from fleetctl.spares.verdicts import passed_within


def audit_nodes(cluster, pool, nodes: list[str]) -> dict:
    """A quick audit of `nodes` at the pool's level, as an audit report (`fleetctl.audit/1`)."""
    from fleetctl.audit import build_report, collect

    started = time.time()
    outcomes = collect(cluster, nodes, pool.config.audit_level)
    return build_report(cluster, outcomes, level=pool.config.audit_level, started=started).to_dict()


def change(pool, nodes: list[str], *, add: bool, dry_run: bool = False, report: dict | None = None,
           audit=None, on_audit=None) -> dict:
    """`spares add|remove`: record the verdicts of `report` first; for an add, audit (with
    `audit(nodes) -> report`) the nodes without a recent passing verdict; then change the pool.
    Returns the change (documented JSON) with the verdicts recorded, if any."""
    audited = None
    if report is not None:
        with pool.locked():
            audited = pool.verdicts.record_report(report)
    if add and audit is not None:
        verdicts = pool.verdicts.load()
        stale = [n for n in nodes if not passed_within(verdicts.get(n), pool.config.max_audit_age_s)[0]]
        if stale:
            if on_audit is not None:
                on_audit(stale)
            fresh = audit(stale)
            with pool.locked():
                audited = pool.verdicts.record_report(fresh)
    result = pool.add(nodes, dry_run=dry_run, now=time.time()) if add else pool.remove(nodes, dry_run=dry_run)
    data = result.to_dict()
    if audited is not None:
        data["audited"] = audited
    return data
