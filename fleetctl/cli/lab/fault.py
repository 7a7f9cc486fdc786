"""`fleetctl lab fault add|list|clear`: faults by site-file id."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import FiniteFloatRange
from fleetctl.errors import EXIT_OK


FLAG_KINDS = ("down", "ecc_dbe", "remap_pending")  # faults without a value


@click.group("fault")
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
@click.option("--symbol-errors", type=FiniteFloatRange(0.001, 1e9), metavar="PER_S",
              help="Host NIC: uncorrected symbol errors per second in its emulated mlx5 counters.")
@pass_app
def fault_add(app: Application, target, load, **kinds) -> int:
    """Add a fault on TARGET: leaf1--spine2, leaf1->spine2 (one direction), node3:eth1, node2:gpu3.

    \b
    Examples:
      fleetctl lab fault add leaf1--spine2 --loss 2
      fleetctl lab fault add node3:eth1 --down
      fleetctl lab fault add node2:gpu3 --xid 79
      fleetctl lab fault add node2:eth0 --symbol-errors 20
    """
    from fleetctl.errors import UsageError
    from fleetctl.lab import faults

    # kinds: one option per fault kind; a flag is given when set, a valued option when not None (0 too)
    chosen = [(k, v) for k, v in kinds.items() if (v if k in FLAG_KINDS else v is not None)]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --loss, --down, --rate, --flap, --xid, --ecc-dbe, "
                         "--remap-pending, --temp, --pcie-width, --symbol-errors")
    kind, value = chosen[0]
    added = faults.add(target, kind, None if kind in FLAG_KINDS else value, load_pct=load)
    app.emit(added, lambda c: c.print(f"fault added: {_fault_text(added)}"))
    return EXIT_OK


def _fault_text(f: dict) -> str:
    value = "" if f.get("value") is None else f" {f['value']}"
    extra = f" (+{f['load_pct']:g} % load)" if f.get("load_pct") else ""
    return f"{f['id']} {f['kind'].replace('_', '-')}{value}{extra}"


@fault.command("list")
@common_options
@pass_app
def fault_list(app: Application) -> int:
    """Faults in force.

    \b
    Examples:
      fleetctl lab fault list --format json
    """
    from fleetctl.lab import faults

    items = faults.listing()

    def render(console):
        if not items:
            console.print("no faults in force")
        for f in items:
            console.print(_fault_text(f))

    app.emit(items, render)
    return EXIT_OK


@fault.command("clear")
@common_options
@click.argument("target", required=False)
@pass_app
def fault_clear(app: Application, target) -> int:
    """Clear the faults on TARGET (all faults without it), restoring links, rules and routes.

    \b
    Examples:
      fleetctl lab fault clear leaf1--spine2
      fleetctl lab fault clear              # every fault
    """
    from fleetctl.lab import faults

    cleared = faults.clear(target)
    app.emit(cleared, lambda c: c.print(f"cleared {len(cleared)} fault(s)"
                                        + "".join(f"\n  {_fault_text(f)}" for f in cleared)))
    return EXIT_OK
