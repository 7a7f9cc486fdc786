"""One probe run over the fleet: pairs, path discovery, agents on every node, records, analysis.

    result = probe_run(site, nodes, transport, MeshOptions(duration=5, rate=50))
    data = to_dict(result.run, result.analysis, path)

1-3. the probe engine's plan (setup.py, shared with lens): pairs and rate per pair from the
   per-host probe budget, flows (one per pair and source port), paths traced from every node;
4. probing: the agent payload on every node at once, all starting at one wall-clock instant;
5. records -> analysis (analyze.py). Agents that fail are reported and their NICs left out.
The per-run HMAC key and the configuration travel inside the payload text (stdin), never argv.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetctl.errors import DataError, UsageError
from fleetctl.mesh import agent as agent_module
from fleetctl.mesh.collect import health_table, probe_records
from fleetctl.mesh.plan import DEFAULT_BUDGET_PPS
from fleetctl.meshrun.analyze import Analysis, RunData, analyze, run_window, to_dict, write_run
from fleetctl.meshrun.setup import SetupOptions, fan_out, prepare
from fleetctl.model.cluster import Cluster


@dataclass
class MeshOptions:
    duration: float = 5.0  # seconds of probing
    rate: float | None = None  # probes/s per NIC pair (over its source ports); None: the plan's
    budget_pps: float = DEFAULT_BUDGET_PPS  # per host, sent + answered: mesh.probe_budget_pps
    sports: int = 8  # source ports per pair: covers 2-4 ECMP next hops per tier with margin
    port: int = 61100  # responder port; source ports start at sport_base
    sport_base: int = 61000  # above Linux's ephemeral range (32768-60999): no clash with clients
    window_s: float = 5.0
    solver: str = "nnls"
    statistic: str = "p50"
    coverage_k: int = 3
    fdr: float = 0.01  # false-discovery rate of network findings (significance.py)
    linger: float = 1.0  # seconds an agent keeps answering after its last probe
    start_delay: float = 1.5  # seconds between launching the agents and the first probe
    max_records: int = 2_000_000  # per agent; bounds its memory (~50 bytes a record)
    trace: bool = True
    loops: bool = True  # loop probes to neighbouring switches (loops.py); needs traced switches

    def validate(self) -> None:
        if not 0.2 <= self.duration <= 3600:
            raise UsageError(f"--duration {self.duration:g}: between 0.2 and 3600 seconds")
        if self.rate is not None and not 0.1 <= self.rate <= 10_000:
            raise UsageError(f"--rate {self.rate:g}: between 0.1 and 10000 probes/s per pair")
        if not 10 <= self.budget_pps <= 1_000_000:
            raise UsageError(f"probe budget {self.budget_pps:g}: between 10 and 1000000 probes/s")
        if not 1 <= self.sports <= 64:
            raise UsageError(f"--sports {self.sports}: between 1 and 64 source ports")
        if self.window_s <= 0:
            raise UsageError(f"--window {self.window_s:g}: must be positive")
        ports = range(self.sport_base, self.sport_base + self.sports + 2)
        if self.port in ports or self.sport_base + self.sports + 1 > 65535:
            raise UsageError("probe ports overlap or exceed 65535")


@dataclass
class ProbeResult:
    run: RunData
    analysis: Analysis
    elapsed_s: float
    # per node: the agent's health table {"fields", "windows", "window_s"} (also run.health,
    # stored in the run file's /health group)
    health: dict = field(default_factory=dict)


def probe_run(cluster: Cluster, nodes: list[str], transport, opts: MeshOptions,
              progress=lambda _m: None) -> ProbeResult:
    opts.validate()
    get_started = time.monotonic()
    setup = prepare(cluster, nodes, transport, SetupOptions(
        budget_pps=opts.budget_pps, coverage_k=opts.coverage_k, duration=opts.duration, rate=opts.rate,
        sports=opts.sports, port=opts.port, sport_base=opts.sport_base, trace=opts.trace,
        loops=opts.loops), progress)
    plan, warnings, failed = setup.plan, list(setup.warnings), set()
    start_at = time.time() + opts.start_delay
    acfg = setup.agent_config(duration=opts.duration, linger=opts.linger, start_at=start_at,
                              max_records=opts.max_records)
    progress(f"probing {len(plan.pairs)} NIC pairs ({plan.design}) for {opts.duration:g} s at "
             f"{setup.rate:.3g}/s per pair, up to {plan.max_host_pps:.0f} probes/s per host (budget "
             f"{opts.budget_pps:g})")
    timeout = opts.start_delay + opts.duration + opts.linger + 30
    docs = fan_out(transport, setup.hosts, agent_module, acfg, timeout, "probe agent", warnings, failed)
    agents, health = _agent_reports(docs, warnings)
    topo, disc = setup.topo, setup.disc
    probes = probe_records(docs, disc.flows, [topo.nic_host[i] for i in range(len(topo.nics))], failed)
    if probes.size == 0:
        raise DataError("no probe records: " + ("; ".join(warnings[:3]) or "no agent reported"))
    params = {**asdict(opts), "rate": setup.rate, "plan": plan.to_dict(), "pairs_design": plan.design,
              "pairs": len(plan.pairs), "nodes": setup.hosts, "transport": getattr(transport, "name", "")}
    run = RunData(acfg["run_id"], cluster.name, topo, disc.paths, disc.flows, probes, int(start_at * 1e9),
                  params, disc.switch_results, agents, disc.summary(topo), setup.clock_truth, warnings,
                  health)
    progress("analysing")
    result = analyze(run, opts.solver, run_window(opts.window_s, opts.duration, opts.linger),
                     opts.statistic)
    return ProbeResult(run, result, time.monotonic() - get_started, health)


def _agent_reports(docs: dict, warnings: list[str]) -> tuple[dict, dict]:
    """Per node: the agent's counters, timestamps, errors and health, and its health table."""
    agents, health = {}, {}
    for node, doc in docs.items():
        agents[node] = {"counters": doc.get("counters", {}), "rx_timestamps": doc.get("rx_timestamps"),
                        "errors": doc.get("errors", []), "health": (doc.get("health") or {}).get("run", {})}
        try:
            fields, rows = health_table(doc)
        except DataError as exc:  # a node's bad health table costs only that table
            warnings.append(str(exc))
            fields, rows = [], []
        health[node] = {"fields": fields, "windows": rows, "window_s": (doc.get("health") or {}).get("window_s")}
        warnings += [f"{node}: {e}" for e in doc.get("errors", [])]
    return agents, health


def mesh_audit(cluster, nodes: list[str], transport, opts: MeshOptions, out: str | Path | None = None,
               progress=lambda _m: None) -> dict:
    """`audit --mesh`: one probe run, written to `out` when given; the JSON object of to_dict()."""
    from fleetctl.analysis.solvers import get_solver

    get_solver(opts.solver)  # an unknown solver fails before any probing
    opts.validate()
    result = probe_run(cluster, nodes, transport, opts, progress)
    path = write_run(Path(out).expanduser(), result.run, result.analysis) if out else None
    return to_dict(result.run, result.analysis, path, result.elapsed_s)
