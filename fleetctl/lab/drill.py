"""`fleetctl failover drill` on the lab: the drill's Runner and Faults (fleetctl.failover.drill).

The harness ends run inside the hosts' network namespaces (nsenter: the lab's hosts are namespaces
of this machine, so both ends share one clock), and a NIC goes down or flaps through the lab's own
fault injection (fleetctl.lab.faults: both ends of the cable, routes recomputed). The CLI chooses
these when the site file's [lab] section names the running lab.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from fleetctl.errors import LabError, UsageError
from fleetctl.lab import faults, paths, state


class LabRunner:
    shared_clock = True

    def __init__(self, netns: dict[str, str], workdir: Path):
        self.netns, self.workdir = netns, workdir

    def popen(self, node: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        if node not in self.netns:
            raise UsageError(f"{node}: not a host of the lab")
        return subprocess.Popen(["nsenter", f"--net=/run/netns/{self.netns[node]}", *argv],
                                env={**os.environ, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


class LabFaults:
    def down(self, node: str, nic: str) -> None:
        faults.add(f"{node}:{nic}", "down")

    def flap(self, node: str, nic: str, period_s: float) -> None:
        faults.add(f"{node}:{nic}", "flap", f"{period_s:g}s")  # down half the period, up half

    def up(self, node: str, nic: str) -> None:
        faults.clear(f"{node}:{nic}")


def lab_adapters(lab_dir: str, new_workdir: Callable[[], Path]) -> tuple[LabRunner, LabFaults]:
    """The running lab's runner and faults; LabError unless `lab_dir` (the site file's) is this
    machine's lab and it is up. `new_workdir` is called only then (nothing to clean up before)."""
    if Path(lab_dir).resolve() != paths.lab_dir().resolve():
        raise LabError(f"the site file's lab ({lab_dir}) is not this machine's lab ({paths.lab_dir()})",
                       hint="set FLEETCTL_LAB_DIR or use the running lab's site file")
    st = state.load()
    if not st or st.get("status") != "up":
        raise LabError("no lab is up", hint="run `fleetctl lab up`")
    return LabRunner(st["addresses"]["netns"], new_workdir()), LabFaults()
