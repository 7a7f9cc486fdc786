"""One probe run over the fleet: pairs, path discovery, agents on every node, records, analysis.

    result = probe_run(site, nodes, transport, MeshOptions(duration=5, rate=50))
    data = to_dict(result.run, result.analysis, path)

1. plan (plan.py): pairs and rate per pair from the per-host probe budget (full mesh while it
   fits, covering design beyond), over the NICs of the chosen nodes with an address in the site
   file;
2. flows: one per pair and source port (the ports spread a pair over its ECMP paths);
3. discovery: the tracer payload on every node at once (discovery.py maps hops to elements);
4. probing: the agent payload on every node at once, all starting at one wall-clock instant;
5. records -> analysis (analyze.py). Agents that fail are reported and their NICs left out.
The per-run HMAC key and the configuration travel inside the payload text (stdin), never argv.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetctl.errors import DataError, UsageError
from fleetctl.fanout import run_python
from fleetctl.fanout.payload import bundle, json_output, with_config
from fleetctl.mesh import agent as agent_module
from fleetctl.mesh import discovery, trace_agent
from fleetctl.mesh.collect import health_table, lab_clock, probe_records
from fleetctl.mesh.loops import plan_loops
from fleetctl.mesh.pairs import select_pairs
from fleetctl.mesh.plan import DEFAULT_BUDGET_PPS, plan_probes
from fleetctl.meshrun.analyze import Analysis, RunData, analyze, run_window, to_dict, write_run
from fleetctl.model.cluster import Cluster
from fleetctl.model.fabric import Topology


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


def _payload(module, config: dict) -> str:
    """The module as a payload (with the modules its PAYLOAD_PARTS names, for the probe agent),
    the configuration embedded."""
    package, _, name = module.__name__.rpartition(".")
    parts = getattr(module, "PAYLOAD_PARTS", None) or (name,)
    return with_config(bundle(package, parts, f"{name} payload"), config)


def _fan_out(transport, nodes, module, config, timeout, what, warnings, failed) -> dict[str, dict]:
    docs = {}
    for r in run_python(transport, nodes, _payload(module, config), timeout=timeout):
        doc = json_output(r)
        if doc is None:
            why = r.error or (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1]
            warnings.append(f"{r.node}: {what} failed ({r.status}): {why[:200]}")
            failed.add(r.node)
        else:
            docs[r.node] = doc
    return docs


def probe_run(site: Cluster, nodes: list[str], transport, opts: MeshOptions,
              progress=lambda _m: None) -> ProbeResult:
    opts.validate()
    get_started = time.monotonic()
    topo = Topology.from_site(site)
    nics = discovery.nic_table(site, topo)
    chosen = set(nodes)
    usable = {n: i for n, i in nics.items() if i.node in chosen and topo.attached(n)}
    warnings: list[str] = []
    missing = sorted({n for n in chosen} - {i.node for i in usable.values()})
    if missing:
        warnings.append(f"no NIC with an address in the site file: {', '.join(missing[:8])}")
    idx = {i.index for i in usable.values()}
    plan = plan_probes(topo, idx, budget_pps=opts.budget_pps, k=opts.coverage_k,
                       duration=opts.duration, rate=opts.rate)
    pairs = plan.pairs
    rate = plan.rate
    if not pairs:
        raise UsageError("no NIC pairs to probe: the mesh needs NICs with addresses in the site "
                         "file (links' a_address/b_address) on at least two nodes")
    sports = [opts.sport_base + j for j in range(opts.sports)]
    fplan = discovery.FlowPlan(pairs, sports, opts.port)
    hosts_used = sorted({topo.nic_host[a] for p in pairs for a in p})
    failed: set[str] = set()

    traces = {}
    if opts.trace:
        progress(f"tracing {len(fplan.flows)} flows from {len(hosts_used)} nodes")
        tcfg = discovery.trace_config(topo, fplan, usable, site)
        tcfg["limit"] = 60
        traces = _fan_out(transport, hosts_used, trace_agent, tcfg, 90, "path tracing",
                          warnings, set())
    disc = discovery.resolve(topo, site, fplan, traces)
    loop_list: list[list] = []
    if opts.loops:
        disc, loop_list = plan_loops(topo, site, disc, usable, len(fplan.flows), opts.port + 2)

    run_id = uuid.uuid4().hex[:16]
    truth, clocks = lab_clock(site)
    node_cfg = {}
    for nic_id, info in usable.items():
        entry = node_cfg.setdefault(info.node, {"nics": []})
        entry["nics"].append([info.index, info.address, info.device])
        if info.node in clocks:
            entry["clock"] = clocks[info.node]
    start_at = time.time() + opts.start_delay
    acfg = {"run_id": run_id, "key": secrets.token_hex(32), "port": opts.port, "sports": sports,
            "rate": rate, "duration": opts.duration, "linger": opts.linger,
            "start_at": start_at, "max_records": opts.max_records, "nodes": node_cfg,
            "pairs": [[p * len(sports), a, b, nics[topo.nics[b]].address]
                      for p, (a, b) in enumerate(pairs)],
            "loops": loop_list, "loop_port": opts.port + 2}
    progress(f"probing {len(pairs)} NIC pairs ({plan.design}) for {opts.duration:g} s at "
             f"{rate:.3g}/s per pair, up to {plan.max_host_pps:.0f} probes/s per host (budget "
             f"{opts.budget_pps:g})")
    timeout = opts.start_delay + opts.duration + opts.linger + 30
    docs = _fan_out(transport, hosts_used, agent_module, acfg, timeout, "probe agent", warnings,
                    failed)
    agents, health = {}, {}
    for node, doc in docs.items():
        agents[node] = {"counters": doc.get("counters", {}),
                        "rx_timestamps": doc.get("rx_timestamps"),
                        "errors": doc.get("errors", []),
                        "health": (doc.get("health") or {}).get("run", {})}
        try:
            fields, rows = health_table(doc)
        except DataError as exc:  # a node's bad health table costs only that table
            warnings.append(str(exc))
            fields, rows = [], []
        health[node] = {"fields": fields, "windows": rows,
                        "window_s": (doc.get("health") or {}).get("window_s")}
        warnings += [f"{node}: {e}" for e in doc.get("errors", [])]
    probes = probe_records(docs, disc.flows, [topo.nic_host[i] for i in range(len(topo.nics))],
                           failed)
    if probes.size == 0:
        raise DataError("no probe records: " + ("; ".join(warnings[:3]) or "no agent reported"))
    params = {**asdict(opts), "rate": rate, "plan": plan.to_dict(),
              "pairs_design": plan.design, "pairs": len(pairs),
              "nodes": hosts_used, "transport": getattr(transport, "name", "")}
    run = RunData(run_id, site.name, topo, disc.paths, disc.flows, probes,
                  int(start_at * 1e9), params, disc.switch_results, agents, disc.summary(topo),
                  truth, warnings, health)
    progress("analysing")
    result = analyze(run, opts.solver, run_window(opts.window_s, opts.duration, opts.linger),
                     opts.statistic)
    return ProbeResult(run, result, time.monotonic() - get_started, health)


# lens (a long-running coordinator) plans, traces and ships agents the same way
payload = _payload
fan_out = _fan_out


def mesh_audit(site, nodes: list[str], transport, opts: MeshOptions, out: str | Path | None = None,
               progress=lambda _m: None) -> dict:
    """`audit --mesh`: one probe run, written to `out` when given; the JSON object of to_dict()."""
    from fleetctl.analysis.solvers import get_solver

    get_solver(opts.solver)  # an unknown solver fails before any probing
    opts.validate()
    result = probe_run(site, nodes, transport, opts, progress)
    path = write_run(Path(out).expanduser(), result.run, result.analysis) if out else None
    return to_dict(result.run, result.analysis, path, result.elapsed_s)
