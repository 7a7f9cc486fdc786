"""`fleetctl failover plan [NODESET]`: NIC groups and the environment of a job, per node class."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


@click.command("plan")
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
def plan_cmd(app: Application, **options) -> int:
    """Per node class: NIC groups (rail, NUMA, PCIe switch) and the environment a job gets.

    \b
    Examples:
      fleetctl failover plan                          # every class of the site file
      fleetctl failover plan 'gpu[001-064]' --nccl-version 2.30.0
      fleetctl failover plan gpu001 --write-env /etc/slurm/fleet-net.env
    """
    from fleetctl.failover.command import PlanRequest, make_plan

    request = PlanRequest(**options)
    result = make_plan(app.cluster, request)
    data = result.to_dict()
    if request.write_env:
        data["env_file"] = request.write_env

    def render(console):
        for cls in result.classes:
            _render_class(console, cls)
        for warning in result.warnings:
            app.err_console.print(f"[yellow]warning:[/yellow] {warning}")
        if request.write_env:
            app.err_console.print(f"wrote {request.write_env}")

    app.emit(data, render)
    return EXIT_WARNINGS if result.warnings else EXIT_OK


def _render_class(console, cls) -> None:
    from rich.table import Table

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
