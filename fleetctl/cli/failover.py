"""`fleetctl failover plan|watch|drill`: NIC failover for NCCL jobs (docs/failover.md).

Exit codes: plan 0, or 1 with warnings (an NCCL too old for IB resiliency, an unknown version, a class
with one NIC); watch 0, or with --once 1 when a link is down or flapping; drill 0, or 2 when the drill
found a problem (corrupt, duplicated or lost data, no resume, no fail-back); 3 fleetctl could not
do the job (no site file, no harness, a real cluster without --i-know and a maintenance reservation).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click

from fleetctl.cli.app import Application, common_options, pass_app, stop_on_signals
from fleetctl.cli.params import seconds
from fleetctl.errors import EXIT_FAILURES, EXIT_INTERRUPTED, EXIT_OK, EXIT_WARNINGS, UsageError


@click.group("failover")
def failover() -> None:
    """NIC failover for NCCL jobs: plan, watch, drill (docs/failover.md)."""


# ---------------------------------------------------------------- plan
@failover.command("plan")
@common_options
@click.argument("nodeset", required=False)
@click.option("--nccl-version", metavar="X.Y.Z", help="NCCL version of the jobs (beats failover.nccl_version "
              "and the libnccl found on this node).")
@click.option("--plugin-dir", metavar="DIR", help="Where libnccl-net-fleet.so lives on the nodes "
              "(default failover.plugin_dir).")
@click.option("--group-size", type=click.IntRange(1, 8), default=None, help="NICs per virtual NIC "
              "(default failover.group_size, 2).")
@click.option("--no-sysfs", is_flag=True, help="Do not read this node's sysfs for NUMA/PCIe affinity.")
@click.option("--write-env", metavar="PATH", help="Write the environment of the (one) planned class as "
              "KEY=VALUE lines for the SPANK plugin's env_file= argument.")
@pass_app
def plan(app: Application, nodeset: str | None, nccl_version: str | None, plugin_dir: str | None,
         group_size: int | None, no_sysfs: bool, write_env: str | None) -> int:
    """Per node class: NIC groups (rail, NUMA, PCIe switch) and the environment a job gets."""
    from fleetctl.atomic import write_atomic
    from fleetctl.failover.plan import build_plan, env_file_text
    from fleetctl.failover.sysfs import affinity
    from fleetctl.nodeset import parse_nodeset

    wanted = parse_nodeset(nodeset) if nodeset else None
    result = build_plan(app.site, wanted, nccl_version=nccl_version, plugin_dir=plugin_dir,
                        group_size=group_size, affinity=None if no_sysfs else affinity)
    data = result.to_dict()
    if write_env:
        if len(result.classes) != 1:
            raise UsageError(f"--write-env: the plan covers {len(result.classes)} node classes; name the nodes "
                             "of one class (NODESET)")
        cls = result.classes[0]
        write_atomic(Path(write_env), env_file_text(
            cls.env, header=f"fleetctl failover plan: class {cls.name} ({cls.nodes}), mode {cls.mode}, "
                            f"NCCL {cls.nccl_version}"))
        data["env_file"] = write_env

    def render(console):
        from rich.table import Table

        for cls in result.classes:
            table = Table(title=f"{cls.name} ({cls.nodes}): {cls.mode}, NCCL {cls.nccl_version} "
                                f"[dim]({cls.nccl_version_source})[/dim]", title_justify="left")
            for col in ("group", "NIC", "kind", "device", "rail", "NUMA", "PCIe switch"):
                table.add_column(col)
            by_name = {n.name: n for n in cls.nics}
            for i, group in enumerate(cls.groups):
                for name in group:
                    n = by_name[name]
                    table.add_row(str(i), n.name, n.kind, n.device, n.rail or "-",
                                  "-" if n.numa_node is None else str(n.numa_node), n.pcie_switch or "-")
            console.print(table)
            for key, value in cls.env.items():
                console.print(f"  {key}={value}")
            for req in cls.requires:
                mark = "" if req.enabled else " [red](not with this NCCL)[/red]"
                console.print(f"  [dim]{req.variable} needs NCCL >= {req.min_nccl}[/dim]{mark}")
        for warning in result.warnings:
            app.err_console.print(f"[yellow]warning:[/yellow] {warning}")
        if write_env:
            app.err_console.print(f"wrote {write_env}")

    app.emit(data, render)
    return EXIT_WARNINGS if result.warnings else EXIT_OK


# ---------------------------------------------------------------- watch
@failover.command("watch")
@common_options
@click.option("--once", is_flag=True, help="Print the current state and exit (1 when a link is down or flapping).")
@click.option("--interval", type=seconds(0.05, 3600), default=1.0, show_default=True, metavar="SECONDS",
              help="How often IB ports and counters files are read (netlink events come at once).")
@click.option("--duration", type=seconds(0, 31_536_000), default=0, metavar="SECONDS",
              help="Stop after this long (0: until interrupted).")
@click.option("--nic", "nics", multiple=True, metavar="NAME", help="Watch only this netdev or IB device "
              "(repeatable; default: every interface but loopback, every IB port).")
@click.option("--counters-dir", default=None, metavar="DIR", help="The plugin's counters directory "
              "(env FLEET_NET_COUNTERS_DIR, default /run/fleetctl/failover).")
@click.option("--prometheus", "prom", metavar="FILE", help="Also write the state as Prometheus text to FILE "
              "(atomically, every interval; '-' prints it to stdout with --once).")
@click.option("--flap-window", type=seconds(1, 7 * 86_400), default=86_400.0, show_default=True,
              metavar="SECONDS", help="Down transitions within this window count towards flapping.")
@click.option("--flap-count", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Downs within the window that make a link flapping.")
@pass_app
def watch(app: Application, once: bool, interval: float, duration: float, nics: tuple[str, ...],
          counters_dir: str | None, prom: str | None, flap_window: float, flap_count: int) -> int:
    """Link and port events, the fleet plugin's counters and flap history (JSON lines with --format json)."""
    from fleetctl.failover.watch import Watch

    counters_dir = counters_dir or os.environ.get("FLEET_NET_COUNTERS_DIR") or "/run/fleetctl/failover"
    w = Watch(links=set(nics) or None, counters_dir=counters_dir, interval=interval, flap_window=flap_window,
              flap_count=flap_count)
    from fleetctl.failover import FailoverError

    try:
        records = w.start()
        if once:
            return _watch_once(app, w, prom)
        _print_records(app, records)
        stop = stop_on_signals()
        end = time.monotonic() + duration if duration else None
        while not stop.is_set() and (end is None or time.monotonic() < end):
            step = interval if end is None else max(0.0, min(interval, end - time.monotonic()))
            _print_records(app, w.poll(step))
            if prom and prom != "-":
                _write_prom(prom, w)
        return EXIT_INTERRUPTED if stop.interrupted() else EXIT_OK
    except BrokenPipeError:
        raise  # `watch | head`: the one exit point ends quietly
    except OSError as exc:  # rtnetlink refused or silent (TimeoutError): nothing to watch with
        raise FailoverError(f"watch: cannot read link state: {exc.strerror or exc}") from None
    finally:
        w.close()


def _write_prom(path: str, w) -> None:
    from fleetctl.atomic import write_atomic

    write_atomic(Path(path), w.prometheus())


def _watch_once(app: Application, w, prom: str | None) -> int:
    problems = w.problems()
    if prom == "-":
        click.echo(w.prometheus(), nl=False)
        return EXIT_WARNINGS if problems else EXIT_OK
    if prom:
        _write_prom(prom, w)
    data = {**w.snapshot(), "problems": problems}

    def render(console):
        for link in data["links"]:
            state = "[green]up[/green]" if link["up"] else "[red]down[/red]"
            flap = f" [yellow]flapping ({link['downs']} downs)[/yellow]" if link["flapping"] else ""
            changes = f" carrier changes {link['carrier_changes']}" if link["carrier_changes"] is not None else ""
            console.print(f"{link['link']:<16} {link['kind']:<8} {state}{changes}{flap}")
        for c in data["counters"]:
            live = "" if c["alive"] else " [dim](process gone)[/dim]"
            console.print(f"plugin pid {c['pid']}{live}: paths up {c['paths_up']}, path downs {c['path_down']}, "
                          f"failbacks {c['failbacks']}, replayed {c['replayed_bytes']} B, errors {c['errors']}")
        for path, why in {**data["damaged"], **data["refused"]}.items():
            console.print(f"counters ignored: {path}: {why}", markup=False)
        for p in problems:
            app.err_console.print(f"[yellow]warning:[/yellow] {p}")

    app.emit(data, render)
    return EXIT_WARNINGS if problems else EXIT_OK


def _print_records(app: Application, records: list[dict]) -> None:
    for rec in records:
        if app.json:
            click.echo(json.dumps(rec, separators=(", ", ": ")))
            continue
        stamp = time.strftime("%H:%M:%S", time.localtime(rec["ts"]))
        if rec["event"].startswith("link"):
            extra = f" downs {rec['downs']}" + (f" period {rec['period_s']} s" if rec.get("period_s") else "") \
                if "downs" in rec else ""
            flap = " FLAPPING" if rec.get("flapping") else ""
            app.console.print(f"{stamp} {rec['event']:<10} {rec['link']} ({rec['kind']}){extra}{flap}",
                              markup=False)
        elif rec["event"] == "counters":
            changed = ", ".join(f"{k} {v:+d}" for k, v in rec["changed"].items()) or "first seen"
            app.console.print(f"{stamp} counters   pid {rec['pid']}: {changed}", markup=False)
        else:
            why = f": {rec['why']}" if rec.get("why") else ""
            app.console.print(f"{stamp} {rec['event']} {rec.get('pid', rec.get('path', ''))}{why}", markup=False)
    sys.stdout.flush()


# ---------------------------------------------------------------- drill
@failover.command("drill")
@common_options
@click.argument("node_a")
@click.argument("node_b")
@click.option("--size", type=click.IntRange(16, 64 << 20), default=1 << 20, show_default=True,
              help="Largest message in bytes (sizes are random from a quarter of it).")
@click.option("--trials", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Faults per kind, each on the next NIC of NODE_A in turn.")
@click.option("--fault", type=click.Choice(["down", "flap", "both"]), default="down", show_default=True)
@click.option("--hold", type=seconds(0.5, 60), default=2.0, show_default=True, metavar="SECONDS",
              help="How long a link stays down (fault down).")
@click.option("--flap-for", type=seconds(1, 120), default=3.0, show_default=True, metavar="SECONDS",
              help="How long a link flaps (fault flap: down 1 s, up 1 s).")
@click.option("--nics", metavar="LIST", help="NICs to run over, comma-separated (default: the site file's "
              "Ethernet NICs of NODE_A's class).")
@click.option("--workdir", metavar="DIR", help="Directory for the run's files; on a real cluster one both "
              "nodes share (default: a new temporary directory, lab only).")
@click.option("--i-know", is_flag=True, help="On a real cluster: yes, take these nodes' links down (both must "
              "be in an active maintenance reservation).")
@pass_app
def drill(app: Application, node_a: str, node_b: str, size: int, trials: int, fault: str, hold: float,
          flap_for: float, nics: str | None, workdir: str | None, i_know: bool) -> int:
    """A checked transfer NODE_A -> NODE_B over all their NICs with links taken down mid-transfer."""
    from fleetctl.failover.drill import Drill, new_workdir

    site = app.site
    nic_list = _drill_nics(site, node_a, node_b, nics)
    lab_dir = (site.data.get("lab") or {}).get("state_dir")
    if lab_dir:
        runner, faults = _lab_backends(lab_dir, workdir)
        where = "lab"
    else:
        from fleetctl.failover.realcluster import IpLinkFaults, SrunRunner, check_guard
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(site, timeout=15.0)
        reservation = check_guard(backend, node_a, node_b, i_know)
        if not workdir:
            raise UsageError("--workdir: a real cluster needs a directory both nodes and this host share")
        runner = SrunRunner(reservation.name, new_workdir(workdir), getattr(backend, "slurm_conf", ""))
        faults = IpLinkFaults(runner)
        where = f"reservation {reservation.name}"
    app.info(f"drill {node_a} -> {node_b} over {','.join(nic_list)} ({where}), files in {runner.workdir}")
    try:
        report = Drill(runner, faults, node_a, node_b, nic_list, size=size, trials=trials, fault=fault,
                       hold_s=hold, flap_s=flap_for).run()
    finally:
        if not workdir:  # a temporary directory of ours (the lab); a given --workdir keeps the run's files
            import shutil

            shutil.rmtree(runner.workdir, ignore_errors=True)
    data = report.to_dict()

    def render(console):
        from rich.table import Table

        table = Table(title=f"drill {node_a} -> {node_b} over {', '.join(nic_list)}", title_justify="left")
        for col in ("trial", "fault", "NIC", "detect ms", "resume ms", "fail-back ms", "Gb/s before",
                    "during", "after"):
            table.add_column(col, justify="right")
        fmt = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
        for t in report.trials:
            table.add_row(str(t.index), t.fault, t.nic, fmt(t.detection_ms), fmt(t.resume_ms), fmt(t.failback_ms),
                          fmt(t.gbps_before), fmt(t.gbps_during), fmt(t.gbps_after))
        console.print(table)
        i = report.integrity
        console.print(f"integrity: {i.get('bytes_checked')} bytes checked in {i.get('messages')} messages, "
                      f"corrupt {i.get('corrupt')}, duplicated {i.get('duplicated')}, lost {i.get('lost')}")
        for p in report.problems:
            app.err_console.print(f"[red]problem:[/red] {p}")

    app.emit(data, render)
    return EXIT_FAILURES if report.problems else EXIT_OK


def _drill_nics(site, node_a: str, node_b: str, nics: str | None) -> list[str]:
    from fleetctl.nodeset import check_node_name

    for node in (node_a, node_b):
        check_node_name(node)
        if site.node_class(node) is None:
            raise UsageError(f"{node}: not a node of the site file")
    if nics:
        out = [n.strip() for n in nics.split(",") if n.strip()]
    else:
        cls_a, cls_b = site.node_class(node_a), site.node_class(node_b)
        names = lambda c: [n.netdev or n.name for n in c.nics if n.kind == "ethernet"]  # noqa: E731
        out = names(cls_a)
        if out != names(cls_b):
            raise UsageError(f"{node_a} and {node_b} have different Ethernet NICs in the site file; give --nics")
    bad = [n for n in out if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", n)]
    if bad or not 2 <= len(out) <= 8:
        raise UsageError(f"--nics {','.join(out)}: 2 to 8 interface names")
    return out


def _lab_backends(lab_dir: str, workdir: str | None):
    """The lab's namespaces as the runner, its fault injection (fleetctl.lab.faults) as the faults."""
    from fleetctl.errors import LabError
    from fleetctl.failover.drill import new_workdir
    from fleetctl.lab import faults, paths, state

    if Path(lab_dir).resolve() != paths.lab_dir().resolve():
        raise LabError(f"the site file's lab ({lab_dir}) is not this machine's lab ({paths.lab_dir()})",
                       hint="set FLEETCTL_LAB_DIR or use the running lab's site file")
    st = state.load()
    if not st or st.get("status") != "up":
        raise LabError("no lab is up", hint="run `fleetctl lab up`")
    netns = st["addresses"]["netns"]

    class LabRunner:
        shared_clock = True

        def __init__(self):
            self.workdir = new_workdir(workdir)

        def popen(self, node, argv, env):
            if node not in netns:
                raise UsageError(f"{node}: not a host of the lab")
            return subprocess.Popen(["nsenter", f"--net=/run/netns/{netns[node]}", *argv],
                                    env={**os.environ, **env}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)

    class LabFaults:
        def down(self, node, nic):
            faults.add(f"{node}:{nic}", "down")

        def flap(self, node, nic, period_s):
            faults.add(f"{node}:{nic}", "flap", f"{period_s:g}s")  # down half the period, up half

        def up(self, node, nic):
            faults.clear(f"{node}:{nic}")

    return LabRunner(), LabFaults()
