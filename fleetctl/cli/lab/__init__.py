"""`fleetctl lab up|down|status|env|fault`: the emulated cluster on this machine."""

from __future__ import annotations

import click

from fleetctl.cli.lab.down import down
from fleetctl.cli.lab.env import env
from fleetctl.cli.lab.fault import fault
from fleetctl.cli.lab.status import status
from fleetctl.cli.lab.up import up


@click.group("lab")
def lab() -> None:
    """An emulated GPU cluster on this machine (namespaces, routed fabric, Slurm, sshd), with faults."""


for _command in (up, down, status, env, fault):
    lab.add_command(_command)
