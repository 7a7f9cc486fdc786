"""`fleetctl lab up|down|status|env|fault`: the emulated cluster on this machine."""

from __future__ import annotations

import shlex

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.errors import LabError


@click.group("lab")
def lab() -> None:
    """An emulated GPU cluster on this machine (namespaces, routed fabric, Slurm, sshd), with faults."""


def _refuse_if_session_busy() -> None:
    from fleetctl.lab.state import SESSION_LOCK, session_busy

    if session_busy():
        raise LabError(f"a test session holds the lab ({SESSION_LOCK})",
                       hint="wait for that pytest run to finish")


@lab.command("up")
@common_options
@click.option("--hosts", default=4, show_default=True, help="Emulated hosts node1..nodeN.")
@click.option("--nics-per-host", default=2, show_default=True, help="Fabric NICs eth0.. per host.")
@click.option("--leaves", default=2, show_default=True, help="Leaf switches (hosts spread over them).")
@click.option("--spines", default=2, show_default=True, help="Spine switches (every leaf to every spine).")
@click.option("--gpus-per-host", default=0, show_default=True, help="Simulated GPUs per host (0: none).")
@click.option("--clock-skew", is_flag=True, help="Give each host a known clock offset and drift.")
@click.option("--no-slurm", is_flag=True, help="No munge, slurmctld, slurmd.")
@click.option("--no-ssh", is_flag=True, help="No sshd (site file then uses the local transport).")
@click.option("--slurm", "slurm_from", default="system", show_default=True,
              type=click.Choice(["system", "trixie", "24.11", "sid"]),
              help="Whose Slurm: this machine's, Debian 13's (trixie = 24.11) or Debian unstable's (sid, "
                   "the newest); the last two from a cached Debian root (built by debootstrap once).")
@pass_app
def up(app: Application, hosts, nics_per_host, leaves, spines, gpus_per_host, clock_skew, no_slurm,
       no_ssh, slurm_from) -> int:
    """Build the lab (idempotent: a healthy lab of the same size is kept)."""
    from fleetctl.lab import lifecycle
    from fleetctl.lab.topology import LabParams

    _refuse_if_session_busy()
    params = LabParams(hosts, nics_per_host, leaves, spines, gpus_per_host, clock_skew,
                       not no_slurm, not no_ssh, "trixie" if slurm_from == "24.11" else slurm_from)
    st = lifecycle.up(params, progress=lambda m: app.debug(m))
    out = {"status": st["status"], "params": st["params"], "site_file": str(_site()),
           "up_seconds": st.get("up_seconds"), "slurm": st.get("slurm")}

    def render(console):
        took = f" in {st['up_seconds']:.1f} s" if st.get("up_seconds") else " (already up)"
        console.print(f"[green]lab up[/green]{took}: {lifecycle.describe(st['params'])}")
        if st.get("slurm"):
            console.print(f"slurm {st['slurm']['version']} ({_slurm_from(st['slurm'])})")
        console.print(f"site file: {_site()}")
        console.print("use it from a shell: [bold]eval \"$(fleetctl lab env)\"[/bold]")

    app.emit(out, render)
    return 0


def _slurm_from(slurm: dict) -> str:
    if slurm.get("root"):
        return f"Debian {slurm.get('from')} root {slurm['root']}"
    return "this machine's"


def _site():
    from fleetctl.lab.paths import site_file

    return site_file()


@lab.command("down")
@common_options
@pass_app
def down(app: Application) -> int:
    """Remove every namespace, link, rule, file and process the lab created."""
    from fleetctl.lab import lifecycle

    _refuse_if_session_busy()
    removed = lifecycle.down(progress=lambda m: app.debug(m))
    app.emit({"status": "down", "removed": removed},
             lambda c: c.print(f"lab down: removed {removed['processes']} processes, "
                               f"{removed['netns']} namespaces, {removed['root_links']} links"))
    return 0


@lab.command("status")
@common_options
@pass_app
def status(app: Application) -> int:
    """What runs, addresses, faults in force. Exit 2 when a lab that should be up is broken."""
    from fleetctl.lab import lifecycle

    st = lifecycle.status()
    app.emit(st, lambda c: _render_status(c, st))
    return 2 if st.get("problems") else 0


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
        console.print(f"slurm {st['slurm']['version']} ({_slurm_from(st['slurm'])}): {st['slurm']['conf']}, "
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


@lab.command("env")
@common_options
@pass_app
def env(app: Application) -> int:
    """Shell exports for the running lab: eval "$(fleetctl lab env)"."""
    from fleetctl.lab import lifecycle

    values = lifecycle.env()
    if app.json:
        app.emit(values)
    else:
        for key, value in values.items():
            click.echo(f"export {key}={shlex.quote(value)}")
    return 0


@lab.group("fault")
def fault() -> None:
    """Inject, list and clear faults (links, NICs, simulated GPUs) by site-file id."""


@fault.command("add")
@common_options
@click.argument("target")
@click.option("--loss", type=FiniteFloatRange(0, 100), metavar="PCT", help="Drop PCT % of packets (nftables).")
@click.option("--down", is_flag=True, help="Take the cable down (routes reconverge at once).")
@click.option("--rate", metavar="RATE", help="Cap the rate with tbf, e.g. 10mbit.")
@click.option("--load", type=FiniteFloatRange(0, 200), default=90.0, show_default=True, metavar="PCT",
              help="With --rate: background UDP load at PCT % of the cap (0: none), so queues build.")
@click.option("--flap", metavar="PERIOD", help="Toggle the cable down/up every PERIOD/2, e.g. 2s.")
@click.option("--xid", type=click.IntRange(1, 9999), help="GPU: write an Xid of this number to the host's kernel log.")
@click.option("--ecc-dbe", is_flag=True, help="GPU: one more double-bit ECC error.")
@click.option("--remap-pending", is_flag=True, help="GPU: a row remap pending (needs a reset).")
@click.option("--temp", type=click.IntRange(-40, 200), metavar="C", help="GPU: temperature in C.")
@click.option("--pcie-width", type=click.IntRange(1, 32), metavar="W", help="GPU: degraded PCIe link width.")
@pass_app
def fault_add(app: Application, target, loss, down, rate, load, flap, xid, ecc_dbe, remap_pending, temp,
              pcie_width) -> int:
    """Add a fault on TARGET: leaf1--spine2, leaf1->spine2 (one direction), node3:eth1, node2:gpu3."""
    from fleetctl.errors import UsageError
    from fleetctl.lab import faults

    chosen = [(k, v) for k, v in (("loss", loss), ("down", down or None), ("rate", rate),
                                  ("flap", flap), ("xid", xid), ("ecc_dbe", ecc_dbe or None),
                                  ("remap_pending", remap_pending or None), ("temp", temp),
                                  ("pcie_width", pcie_width)) if v is not None]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --loss, --down, --rate, --flap, --xid, --ecc-dbe, "
                         "--remap-pending, --temp, --pcie-width")
    kind, value = chosen[0]
    added = faults.add(target, kind, None if value is True else value, load_pct=load)
    app.emit(added, lambda c: c.print(f"fault added: {_fault_text(added)}"))
    return 0


def _fault_text(f: dict) -> str:
    value = "" if f.get("value") is None else f" {f['value']}"
    extra = f" (+{f['load_pct']:g} % load)" if f.get("load_pct") else ""
    return f"{f['id']} {f['kind'].replace('_', '-')}{value}{extra}"


@fault.command("list")
@common_options
@pass_app
def fault_list(app: Application) -> int:
    """Faults in force."""
    from fleetctl.lab import faults

    items = faults.listing()

    def render(console):
        if not items:
            console.print("no faults in force")
        for f in items:
            console.print(_fault_text(f))

    app.emit(items, render)
    return 0


@fault.command("clear")
@common_options
@click.argument("target", required=False)
@pass_app
def fault_clear(app: Application, target) -> int:
    """Clear the faults on TARGET (all faults without it), restoring links, rules and routes."""
    from fleetctl.lab import faults

    cleared = faults.clear(target)
    app.emit(cleared, lambda c: c.print(f"cleared {len(cleared)} fault(s)"
                                        + "".join(f"\n  {_fault_text(f)}" for f in cleared)))
    return 0
