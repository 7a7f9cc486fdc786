"""`fleetctl lab up`: build the emulated cluster."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.lab.common import refuse_if_session_busy, site_path, slurm_from
from fleetctl.errors import EXIT_OK
from fleetctl.lab.topology import SIZE_LIMITS


@click.command("up")
@common_options
@click.option("--hosts", type=click.IntRange(*SIZE_LIMITS["hosts"]), default=4, show_default=True, help="Emulated hosts node1..nodeN.")
@click.option("--nics-per-host", type=click.IntRange(*SIZE_LIMITS["nics_per_host"]), default=2, show_default=True, help="Fabric NICs eth0.. per host.")
@click.option("--leaves", type=click.IntRange(*SIZE_LIMITS["leaves"]), default=2, show_default=True, help="Leaf switches (hosts spread over them).")
@click.option("--spines", type=click.IntRange(*SIZE_LIMITS["spines"]), default=2, show_default=True, help="Spine switches (every leaf to every spine).")
@click.option("--gpus-per-host", type=click.IntRange(*SIZE_LIMITS["gpus_per_host"]), default=0, show_default=True, help="Simulated GPUs per host (0: none).")
@click.option("--clock-skew", is_flag=True, help="Give each host a known clock offset and drift.")
@click.option("--no-slurm", is_flag=True, help="No munge, slurmctld, slurmd.")
@click.option("--no-ssh", is_flag=True, help="No sshd (site file then uses the local transport).")
@click.option("--slurm", "slurm_choice", default="system", show_default=True,
              type=click.Choice(["system", "trixie", "24.11", "sid"]),
              help="Whose Slurm: this machine's, Debian 13's (trixie = 24.11) or Debian unstable's (sid, "
                   "the newest); the last two from a cached Debian root (built by debootstrap once).")
@pass_app
def up(app: Application, no_slurm, no_ssh, slurm_choice, **shape) -> int:
    """Build the lab (idempotent: a healthy lab of the same size is kept).

    \b
    Examples:
      fleetctl lab up --hosts 8 --gpus-per-host 4
      fleetctl lab up --hosts 16 --leaves 4 --spines 2 --slurm trixie
    """
    from fleetctl.lab import lifecycle
    from fleetctl.lab.topology import LabParams

    refuse_if_session_busy()
    # shape: the options named as LabParams' fields (hosts, NICs, switches, GPUs, clock skew)
    params = LabParams(**shape, slurm=not no_slurm, ssh=not no_ssh,
                       slurm_from="trixie" if slurm_choice == "24.11" else slurm_choice)
    st = lifecycle.up(params, progress=lambda m: app.debug(m))
    out = {"status": st["status"], "params": st["params"], "site_file": str(site_path()),
           "up_seconds": st.get("up_seconds"), "slurm": st.get("slurm")}

    def render(console):
        took = f" in {st['up_seconds']:.1f} s" if st.get("up_seconds") else " (already up)"
        console.print(f"[green]lab up[/green]{took}: {lifecycle.describe(st['params'])}")
        if st.get("slurm"):
            console.print(f"slurm {st['slurm']['version']} ({slurm_from(st['slurm'])})")
        console.print(f"site file: {site_path()}")
        console.print("use it from a shell: [bold]eval \"$(fleetctl lab env)\"[/bold]")

    app.emit(out, render)
    return EXIT_OK
