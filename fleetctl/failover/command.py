"""`fleetctl failover plan|watch|drill` as domain calls: each command's options as a dataclass the CLI
fills from its arguments, and the one call it makes; the CLI only parses and renders.

The drill's adapters are the caller's choice: on a lab site the lab's own (the CLI takes them from the
lab package, which production code does not import), srun in a maintenance reservation on a real
cluster (realcluster.real_cluster_adapters).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.errors import FailoverError, UsageError
from fleetctl.failover import counters, harness
from fleetctl.failover.drill import Drill, DrillOptions, DrillReport, Faults, Runner, check
from fleetctl.failover.plan import FailoverPlan, build_plan, env_file_text
from fleetctl.failover.watch import FLAP_COUNT, FLAP_WINDOW_S, Watch
from fleetctl.model.cluster import Cluster
from fleetctl.nodeset import NodeSet, check_node_name, parse_nodeset

_IFACE = re.compile(r"[A-Za-z0-9_.:-]{1,15}")


# ---------------------------------------------------------------- plan
@dataclass
class PlanRequest:
    nodeset: str | None = None
    nccl_version: str | None = None
    plugin_dir: str | None = None
    group_size: int | None = None
    no_sysfs: bool = False
    write_env: str | None = None  # the env file of the (one) planned class
    wanted: NodeSet | None = field(init=False, default=None)

    def __post_init__(self):
        # parsed at once: a bad NODESET is the error also without a site file
        self.wanted = parse_nodeset(self.nodeset) if self.nodeset else None


def make_plan(cluster: Cluster, request: PlanRequest) -> FailoverPlan:
    """The plan for the request's nodes; with write_env, its one class's environment written for
    the SPANK plugin's env_file= (UsageError when the plan covers more than one class)."""
    from fleetctl.atomic import write_atomic
    from fleetctl.failover.sysfs import affinity

    plan = build_plan(cluster, request.wanted, nccl_version=request.nccl_version, plugin_dir=request.plugin_dir,
                      group_size=request.group_size, affinity=None if request.no_sysfs else affinity)
    if request.write_env:
        if len(plan.classes) != 1:
            raise UsageError(f"--write-env: the plan covers {len(plan.classes)} node classes; name the nodes "
                             "of one class (NODESET)")
        cls = plan.classes[0]
        write_atomic(Path(request.write_env), env_file_text(
            cls.env, header=f"fleetctl failover plan: class {cls.name} ({cls.nodes}), mode {cls.mode}, "
                            f"NCCL {cls.nccl_version}"))
    return plan


# ---------------------------------------------------------------- watch
@dataclass
class WatchRequest:
    once: bool = False
    interval: float = 1.0
    duration: float = 0.0  # 0: until interrupted
    nics: tuple[str, ...] = ()  # empty: every link
    counters_dir: str | None = None  # None: FLEET_NET_COUNTERS_DIR, else /run/fleetctl/failover
    prom: str | None = None  # a Prometheus file, or "-" (stdout, with once)
    flap_window: float = FLAP_WINDOW_S
    flap_count: int = FLAP_COUNT

    @property
    def prom_file(self) -> str | None:
        """The file rewritten while following ("-" only prints, with once)."""
        return self.prom if self.prom != "-" else None


@contextmanager
def started_watch(request: WatchRequest) -> Iterator[tuple[Watch, list[dict]]]:
    """A started Watch and its first records, closed after; rtnetlink refused or silent while it is
    open is a FailoverError (nothing to watch with)."""
    counters_dir = request.counters_dir or os.environ.get("FLEET_NET_COUNTERS_DIR") or counters.DEFAULT_DIR
    watch = Watch(links=set(request.nics) or None, counters_dir=counters_dir, interval=request.interval,
                  flap_window=request.flap_window, flap_count=request.flap_count)
    try:
        yield watch, watch.start()
    except BrokenPipeError:
        raise  # `watch | head`: the one exit point ends quietly
    except OSError as exc:  # TimeoutError too
        raise FailoverError(f"watch: cannot read link state: {exc.strerror or exc}") from None
    finally:
        watch.close()


# ---------------------------------------------------------------- drill
@dataclass
class DrillRequest:
    node_a: str
    node_b: str
    size: int = 1 << 20
    trials: int = 1
    fault: str = "down"
    hold: float = 2.0
    flap_for: float = 3.0
    nics: str | None = None  # comma-separated; None: the site file's Ethernet NICs of NODE_A's class
    workdir: str | None = None
    i_know: bool = False

    def options(self) -> DrillOptions:
        return DrillOptions(size=self.size, trials=self.trials, fault=self.fault, hold_s=self.hold,
                            flap_s=self.flap_for)

    def nic_list(self, cluster: Cluster) -> list[str]:
        """The NICs to run over; UsageError for a node the site file lacks or NICs that cannot be."""
        for node in (self.node_a, self.node_b):
            check_node_name(node)
            if cluster.node_class(node) is None:
                raise UsageError(f"{node}: not a node of the site file")
        if self.nics:
            out = [n.strip() for n in self.nics.split(",") if n.strip()]
        else:
            out = _ethernet_nics(cluster, self.node_a)
            if out != _ethernet_nics(cluster, self.node_b):
                raise UsageError(f"{self.node_a} and {self.node_b} have different Ethernet NICs in the site "
                                 "file; give --nics")
        bad = [n for n in out if not _IFACE.fullmatch(n)]
        if bad or not 2 <= len(out) <= 8:
            raise UsageError(f"--nics {','.join(out)}: 2 to 8 interface names")
        return out


def _ethernet_nics(cluster: Cluster, node: str) -> list[str]:
    return [n.netdev or n.name for n in cluster.node_class(node).nics if n.kind == "ethernet"]


@dataclass
class DrillAdapters:
    """Where the drill's ends run and how a NIC goes down."""

    runner: Runner
    faults: Faults
    where: str  # for the operator: "lab", "reservation R"
    remove_workdir: bool  # a temporary directory of ours; a given --workdir keeps the run's files


def run_drill(request: DrillRequest, nics: list[str], adapters: DrillAdapters) -> DrillReport:
    """The drill's report; FailoverError when it cannot run (a refusal, no harness)."""
    try:
        options = request.options()
        check(request.node_a, request.node_b, nics, options)  # the refusals before the harness
        return Drill(adapters.runner, adapters.faults, request.node_a, request.node_b, nics, harness.locate(),
                     options).run()
    finally:
        if adapters.remove_workdir:
            shutil.rmtree(adapters.runner.workdir, ignore_errors=True)
