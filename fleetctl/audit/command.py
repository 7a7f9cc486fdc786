"""`fleetctl audit [NODESET]` as one domain call: the options, the node checks (local or fanned
out), Slurm actions, history and Prometheus outputs, and with --mesh the probe run. The CLI parses
into AuditOptions, calls run_audit(), renders the result.

Order that makes failures harmless: every output is proven writable before any slow work or Slurm
action; from the first Slurm action on, a failure is reported with the actions taken (`errors`,
exit 3), never raised past them: the operator must learn what was drained even when the rest went
wrong.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.errors import EXIT_ERROR, EXIT_OK, FleetctlError, SlurmError, UsageError

ANALYZE_USAGE = "fleetctl audit analyze FILE.h5 [--solver NAME] [--out FILE.h5]"


@dataclass
class AuditOptions:
    nodeset: tuple[str, ...] = ()  # as given on the command line: one node set
    level: str = "standard"
    escalate: bool = False
    local: bool = False
    node: str | None = None  # with local: the node's name
    transport: str | None = None
    since: str | None = None
    budget: float | None = None
    drain: bool = False
    resume: bool = False
    ack_kernel_log: bool = False
    dry_run: bool = False
    idle_only: bool = False
    prom: str | None = None
    history: str | None = None
    mesh: bool = False
    mesh_only: bool = False
    duration: float = 5.0
    rate: float | None = None
    out: str | None = None
    solver: str | None = None

    def checked_nodeset(self) -> str | None:
        """The one node set given, or None; UsageError for what is not one."""
        words = self.nodeset
        if len(words) == 2 and words[0] == "analyze":
            raise UsageError(f"`analyze` is a subcommand: {ANALYZE_USAGE} (its options after it); "
                             "to audit a node named analyze: fleetctl audit run analyze")
        if len(words) > 1:
            raise UsageError(f"one node set expected, got {len(words)} words: {' '.join(words)} "
                             "(join them with commas)")
        if self.mesh_only and self.local:
            raise UsageError("--mesh-only probes between nodes: it cannot run with --local")
        if self.local and words:
            raise UsageError("--local checks this machine: give --node NAME instead of a node set")
        return words[0] if words else None


@dataclass
class AuditResult:
    data: dict  # the documented JSON (fleetctl.audit/1, or fleetctl.mesh/1 for --mesh-only)
    report: object = None  # audit.report.AuditReport (None for --mesh-only, or no idle node)
    errors: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exit_code: int = EXIT_OK


def check_outputs(opts: AuditOptions) -> None:
    """Every output proven writable before any work (a drain followed by "cannot write --out"
    would leave actions taken and no report of them)."""
    from fleetctl.atomic import check_writable

    if opts.out:
        check_writable(opts.out, "--out")
    if opts.prom:
        check_writable(opts.prom, "--prom")
    if opts.history:
        check_writable(opts.history, "--history", directory=True)


def run_audit(cluster, opts: AuditOptions, *, bar=None, progress=lambda _m: None) -> AuditResult:
    """The whole audit. `bar(total)`: a context manager whose value's `advance(result)` is called
    per node answered (the CLI's progress bar); `progress(message)` for the mesh."""

    check_outputs(opts)
    nodeset = opts.checked_nodeset()
    mesh_nodes = cluster.select(nodeset) if opts.mesh or opts.mesh_only else []
    if opts.mesh_only:
        data = run_mesh(cluster, mesh_nodes, opts, progress)
        return AuditResult(data, exit_code=_mesh_exit_code(data))
    result = _node_audit(cluster, opts, nodeset, bar)
    if result.report is None:
        return result
    if opts.mesh:
        try:
            result.data["mesh"] = run_mesh(cluster, mesh_nodes, opts, progress)
        except FleetctlError as exc:
            result.errors.append({"step": "mesh", "message": exc.message})
    if result.errors:
        result.data["errors"] = result.errors
        result.exit_code = EXIT_ERROR  # the job was not (entirely) done; what was done is reported
    elif "mesh" in result.data:
        result.exit_code = max(result.report.exit_code, _mesh_exit_code(result.data["mesh"]))
    else:
        result.exit_code = result.report.exit_code
    return result


def _mesh_exit_code(data: dict) -> int:
    from fleetctl.meshrun.analyze import exit_code  # numpy: only where the mesh ran (nodes lack it)

    return exit_code(data)


def _node_audit(cluster, opts: AuditOptions, nodeset: str | None, bar) -> AuditResult:
    from fleetctl.audit import build_report
    from fleetctl.audit.export import changes_since, previous_report, write_outputs

    started = time.time()
    backend = None
    if opts.drain or opts.resume or opts.idle_only:
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(cluster)
    outcomes = _collect(cluster, opts, nodeset, backend, bar)
    if outcomes is None:
        return AuditResult({"schema": "fleetctl.audit/1", "summary": {"nodes": 0}, "nodes": []},
                           notes=["no idle nodes to audit"])
    report = build_report(cluster, outcomes, level=opts.level, started=started)
    errors = _slurm_actions(report, backend, opts)
    if opts.history:
        report.changes = changes_since(previous_report(Path(opts.history)), report)
    data = report.to_dict()
    errors += write_outputs(data, report, opts.history, opts.prom)
    notes = site_notes(cluster, opts.local, outcomes)
    if notes:
        data["notes"] = notes
    return AuditResult(data, report, errors, notes)


def _collect(cluster, opts: AuditOptions, nodeset: str | None, backend, bar) -> dict | None:
    """Outcomes per node (None: --idle-only and no node is idle)."""
    from fleetctl.audit import collect, collect_local
    from fleetctl.audit.actions import acknowledgements
    from fleetctl.checks import since_epoch

    since_ts = since_epoch(opts.since)
    if opts.local:
        from fleetctl.audit.hooks import hook_node
        from fleetctl.nodeset import check_node_name

        name = check_node_name(opts.node, what="--node") if opts.node else hook_node()
        ack = acknowledgements(backend, [name], opts.resume, opts.ack_kernel_log, opts.dry_run)
        return {name: collect_local(cluster, name, opts.level, since=since_ts, budget_s=opts.budget, ack=ack,
                                    alone=True)}
    nodes = cluster.select(nodeset)
    if opts.idle_only:
        idle = {n.name for n in backend.lookup(nodes).found.values() if n.state == "IDLE"}
        nodes = [n for n in nodes if n in idle]
        if not nodes:
            return None
    ack = acknowledgements(backend, nodes, opts.resume, opts.ack_kernel_log, opts.dry_run)
    from fleetctl.fanout import get_transport

    with get_transport(opts.transport, cluster=cluster) as t, (bar(len(nodes)) if bar else nullcontext()) as b:
        return collect(cluster, nodes, opts.level, transport=t, since=since_ts, budget_s=opts.budget,
                       escalate=opts.escalate, on_result=b.advance if b is not None else None, ack=ack)


def _slurm_actions(report, backend, opts: AuditOptions) -> list[dict]:
    from fleetctl.audit import apply_actions, plan_actions

    if backend is None or not (opts.drain or opts.resume):
        return []
    try:
        plan = plan_actions(report, backend, drain=opts.drain, resume=opts.resume, dry_run=opts.dry_run)
    except SlurmError as exc:
        report.actions = {"dry_run": opts.dry_run, "error": exc.message}
        return [{"step": "slurm", "message": exc.message}]
    report.actions = apply_actions(plan, backend).to_dict()
    if not plan.complete:
        return [{"step": "slurm", "message": f"{len(plan.failed)} Slurm action(s) failed"}]
    return []


def run_mesh(cluster, nodes: list[str], opts: AuditOptions, progress) -> dict:
    """`audit --mesh`: one probe run over the chosen transport (meshrun.probe_run.mesh_audit)."""
    from fleetctl.extras import require
    from fleetctl.fanout import get_transport

    require("mesh", "audit --mesh")
    from fleetctl.meshrun.probe_run import MeshOptions, mesh_audit

    mesh = cluster.mesh
    mopts = MeshOptions(duration=opts.duration, rate=opts.rate, solver=opts.solver or "nnls",
                        budget_pps=float(mesh.get("probe_budget_pps", 2000)),
                        coverage_k=int(mesh.get("coverage_k", 3)), fdr=float(mesh.get("fdr", 0.01)))
    with get_transport(opts.transport, cluster=cluster) as t:
        return mesh_audit(cluster, nodes, t, mopts, opts.out, progress=progress)


def site_notes(cluster, local: bool, outcomes: dict) -> list[str]:
    """What the report should say about the site view itself: facts inferred from Slurm (no site
    file), a node checked alone because no class names it."""
    from fleetctl.inventory.from_slurm import inferred

    notes = [f"inferred: {n}" for n in inferred(cluster)]
    if local:
        notes += [f"node {n} is in no node class of {cluster.source}: checked by itself (no class "
                  "expectations, no fleet comparison)" for n in outcomes if cluster.node_class(n) is None]
    return notes
