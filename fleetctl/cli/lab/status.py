"""`fleetctl lab status`: what runs, addresses, faults; exit 2 when a lab that should be up is broken."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lab.common import slurm_from
from fleetctl.errors import EXIT_FAILURES, EXIT_OK


@click.command("status")
@common_options
@pass_app
def status(app: Application) -> int:
    """What runs, addresses, faults in force. Exit 2 when a lab that should be up is broken.

    \b
    Examples:
      fleetctl lab status --format json
    """
    from fleetctl.lab import lifecycle

    st = lifecycle.status()
    app.emit(st, lambda c: _render_status(c, st))
    return EXIT_FAILURES if st.get("problems") else EXIT_OK


def _render_status(console, st: dict) -> None:
    from rich.table import Table

    from fleetctl.lab.lifecycle import describe

    if st["status"] == "down":
        console.print("lab: [dim]down[/dim]")
        return
    colour = "green" if st["status"] == "up" and not st["problems"] else "red"
    console.print(f"lab: [{colour}]{st['status']}[/{colour}] ({describe(st['params'])}), dir {st['lab_dir']}")
    console.print(f"site file: {st['site_file']}")
    if st.get("slurm"):
        console.print(f"slurm {st['slurm']['version']} ({slurm_from(st['slurm'])}): {st['slurm']['conf']}, "
                      f"partition {st['slurm']['partition']}")
    table = Table("host", "netns", "mgmt", "NICs", box=None)
    addrs = st["addresses"]
    for host, mgmt in addrs.get("mgmt", {}).items():
        nics = " ".join(f"{k.split(':')[1]}={v}" for k, v in addrs["nics"].items()
                        if k.startswith(host + ":"))
        table.add_row(host, addrs["netns"][host], mgmt, nics)
    console.print(table)
    running = sum(p["running"] for p in st["processes"])
    console.print(f"processes: {running}/{len(st['processes'])} running")
    for problem in st["problems"]:
        console.print(f"[red]problem:[/red] {problem}")
    if st["faults"]:
        for f in st["faults"]:
            console.print(f"fault: {f['id']} {f['kind']} {f.get('value', '')}")
    else:
        console.print("faults: none")
