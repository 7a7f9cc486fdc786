"""The probe engine's one plan builder, for a one-shot run (`audit --mesh`, probe_run.py) and for
lens alike: which NICs, which pairs at what rate, the flows (one per pair and source port), their
paths (traced from every node at once, loops to the neighbouring switches), and the agents' shared
configuration. What differs between the two is only how long the agents run and how they report.

    setup = prepare(site, nodes, transport, SetupOptions(budget_pps=..., duration=5.0))
    config = setup.agent_config(duration=5.0, linger=1.0, start_at=t0)
    docs = fan_out(transport, setup.hosts, agent_module, config, timeout, "probe agent", warnings, failed)
"""

from __future__ import annotations

from collections.abc import Callable

import secrets
import uuid
from dataclasses import dataclass, field

from fleetctl.errors import UsageError
from fleetctl.fanout import run_python
from fleetctl.fanout.payload import bundle, json_output, with_config
from fleetctl.mesh import discovery, trace_agent
from fleetctl.mesh.collect import injected_clocks
from fleetctl.mesh.loops import plan_loops
from fleetctl.mesh.plan import DEFAULT_BUDGET_PPS, ProbePlan, plan_probes
from fleetctl.model.cluster import Cluster
from fleetctl.model.fabric import Topology


@dataclass
class SetupOptions:
    budget_pps: float = DEFAULT_BUDGET_PPS  # per host, sent + answered: mesh.probe_budget_pps
    coverage_k: int = 3
    duration: float = 5.0  # seconds the plan is sized for (one run, or one lens window)
    rate: float | None = None  # probes/s per NIC pair; None: the plan's
    sports: int = 8
    port: int = 61100
    sport_base: int = 61000
    trace: bool = True
    loops: bool = True
    # (trace config, hosts, warnings) -> node -> trace document: who traces the flows instead of
    # the transport's fan-out (lens's registered agents, lens/tracer.py); None: the transport
    tracer: Callable[[dict, list[str], list[str]], dict[str, dict]] | None = None


@dataclass
class ProbeSetup:
    """One plan, ready to start agents with."""

    topo: Topology
    nics: dict  # NIC id -> discovery.NicAddress, every NIC of the site
    usable: dict  # the chosen nodes' NICs with an address and a link
    plan: ProbePlan
    sports: list[int]
    port: int
    hosts: list[str]  # nodes that run an agent
    disc: discovery.Discovery
    loops: list[list] = field(default_factory=list)
    clock_truth: dict | None = None
    node_clocks: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return float(self.plan.rate)

    def agent_config(self, **extra) -> dict:
        """The configuration every agent of this plan shares (a fresh run id and HMAC key), with the
        run's own settings (`duration`, `linger`, `start_at`, `output`, ...) from `extra`."""
        node_cfg: dict[str, dict] = {}
        for info in self.usable.values():
            entry = node_cfg.setdefault(info.node, {"nics": []})
            entry["nics"].append([info.index, info.address, info.device])
            if info.node in self.node_clocks:
                entry["clock"] = self.node_clocks[info.node]
        topo, n_sports = self.topo, len(self.sports)
        return {"run_id": uuid.uuid4().hex[:16], "key": secrets.token_hex(32), "port": self.port,
                "sports": self.sports, "rate": self.rate, "nodes": node_cfg,
                "pairs": [[p * n_sports, a, b, self.nics[topo.nics[b]].address]
                          for p, (a, b) in enumerate(self.plan.pairs)],
                "loops": self.loops, "loop_port": self.port + 2, **extra}


def prepare(cluster: Cluster, nodes: list[str], transport, opts: SetupOptions, log=lambda _m: None) -> ProbeSetup:
    """Plan, flows and traced paths over the chosen nodes' NICs (UsageError when no pair is left)."""
    topo = Topology.from_site(cluster)
    nics = discovery.nic_table(cluster, topo)
    chosen = set(nodes)
    usable = {n: i for n, i in nics.items() if i.node in chosen and topo.attached(n)}
    warnings: list[str] = []
    missing = sorted(chosen - {i.node for i in usable.values()})
    if missing:
        warnings.append(f"no NIC with an address in the site file: {', '.join(missing[:8])}")
    plan = plan_probes(topo, {i.index for i in usable.values()}, budget_pps=opts.budget_pps,
                       k=opts.coverage_k, duration=opts.duration, rate=opts.rate)
    if not plan.pairs:
        raise UsageError("no NIC pairs to probe: probing needs NICs with addresses in the site file "
                         "(links' a_address/b_address) on at least two of the chosen nodes")
    sports = [opts.sport_base + j for j in range(opts.sports)]
    fplan = discovery.FlowPlan(plan.pairs, sports, opts.port)
    hosts = sorted({topo.nic_host[a] for p in plan.pairs for a in p})
    traces = {}
    if opts.trace:
        log(f"tracing {len(fplan.flows)} flows from {len(hosts)} nodes")
        tcfg = discovery.trace_config(topo, fplan, usable, cluster)
        tcfg["limit"] = 60
        if opts.tracer is not None:  # registered agents trace their own flows (lens/tracer.py)
            traces = opts.tracer(tcfg, hosts, warnings)
        else:
            traces = fan_out(transport, hosts, trace_agent, tcfg, 90, "path tracing", warnings, set())
    disc = discovery.resolve(topo, cluster, fplan, traces)
    loops: list[list] = []
    if opts.loops:
        # loops to the neighbouring switches tell apart link directions that NIC pairs always
        # cross together (with two leaves: leaf1->spine1 and spine1->leaf2)
        disc, loops = plan_loops(topo, cluster, disc, usable, len(fplan.flows), opts.port + 2)
    truth, clocks = injected_clocks(cluster)
    return ProbeSetup(topo, nics, usable, plan, sports, opts.port, hosts, disc, loops, truth, clocks,
                      warnings)


def payload(module, config: dict) -> str:
    """The module as a payload (with the modules its PAYLOAD_PARTS names, for the probe agent),
    the configuration embedded."""
    package, _, name = module.__name__.rpartition(".")
    parts = getattr(module, "PAYLOAD_PARTS", None) or (name,)
    return with_config(bundle(package, parts, f"{name} payload"), config)


def fan_out(transport, nodes, module, config, timeout, what, warnings, failed) -> dict[str, dict]:
    """Run a payload on every node at once; the documents that came back, by node. A node that
    failed is named in `warnings` and added to `failed`."""
    docs = {}
    for r in run_python(transport, nodes, payload(module, config), timeout=timeout):
        doc = json_output(r)
        if doc is None:
            why = r.error or (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1]
            warnings.append(f"{r.node}: {what} failed ({r.status}): {why[:200]}")
            failed.add(r.node)
        else:
            docs[r.node] = doc
    return docs
