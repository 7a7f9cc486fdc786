"""`fleetctl failover drill NODE_A NODE_B`: a checked transfer with links taken down mid-way."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import seconds
from fleetctl.errors import EXIT_FAILURES, EXIT_OK


@click.command("drill")
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
def drill_cmd(app: Application, **options) -> int:
    """A checked transfer NODE_A -> NODE_B over all their NICs with links taken down mid-transfer.

    \b
    Examples:
      fleetctl failover drill node1 node4 --fault both --trials 5     # on the lab
      fleetctl failover drill gpu001 gpu002 --workdir /shared/drill --i-know
    """
    from fleetctl.failover.command import DrillRequest, run_drill

    request = DrillRequest(**options)
    cluster = app.cluster
    nics = request.nic_list(cluster)
    adapters = _adapters(cluster, request)
    app.info(f"drill {request.node_a} -> {request.node_b} over {','.join(nics)} ({adapters.where}), "
             f"files in {adapters.runner.workdir}")
    report = run_drill(request, nics, adapters)

    def render(console):
        from rich.table import Table

        table = Table(title=f"drill {request.node_a} -> {request.node_b} over {', '.join(nics)}",
                      title_justify="left")
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

    app.emit(report.to_dict(), render)
    return EXIT_FAILURES if report.problems else EXIT_OK


def _adapters(cluster, request):
    """The lab's namespaces and faults when the site file names a lab, else srun and `ip link` in a
    maintenance reservation."""
    from fleetctl.failover.command import DrillAdapters
    from fleetctl.failover.drill import new_workdir

    lab_dir = (cluster.data.get("lab") or {}).get("state_dir")
    if lab_dir:
        from fleetctl.lab.drill import lab_adapters

        runner, faults = lab_adapters(lab_dir, lambda: new_workdir(request.workdir))
        return DrillAdapters(runner, faults, "lab", remove_workdir=not request.workdir)
    from fleetctl.failover.realcluster import real_cluster_adapters

    return real_cluster_adapters(cluster, request)
