"""`fleetctl audit`: run the node checks across nodes, judge the fleet, act on Slurm.

    outcomes = collect(site, nodes, "standard")           # node -> NodeOutcome (doc or error)
    report = build_report(site, outcomes, level="standard")
    plan = plan_actions(report, backend, drain=True, resume=True)
    apply_actions(plan, backend)

No click or rich here: fleetctl/cli/audit/ parses and renders.

The names below are imported when first used (PEP 562), so that the Slurm hooks, which import
fleetctl.audit.hooks, do not pay for the report and the Slurm actions on every Prolog.
"""

from fleetctl.lazy import lazy_exports

_EXPORTS = {"ActionPlan": "actions", "apply_actions": "actions", "plan_actions": "actions",
            "AuditReport": "report", "build_report": "report",
            "NodeOutcome": "runner", "collect": "runner", "collect_local": "runner"}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
