"""`fleetctl audit`: run the node checks across nodes, judge the fleet, act on Slurm.

    outcomes = collect(site, nodes, "standard")           # node -> NodeOutcome (doc or error)
    report = build_report(site, outcomes, level="standard")
    plan = plan_actions(report, backend, drain=True, resume=True)
    apply_actions(plan, backend)

No click or rich here: fleetctl/cli/audit/ parses and renders.
"""

from fleetctl.audit.actions import ActionPlan, apply_actions, plan_actions
from fleetctl.audit.report import AuditReport, build_report
from fleetctl.audit.runner import NodeOutcome, collect, collect_local

__all__ = ["ActionPlan", "AuditReport", "NodeOutcome", "apply_actions", "build_report", "collect",
           "collect_local", "plan_actions"]
