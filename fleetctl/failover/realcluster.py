"""A drill on a real cluster: the guard (an explicit --i-know and an active Slurm maintenance
reservation holding both nodes), and srun as the way to start the harness and take a NIC down.

Everything goes through srun inside that reservation, argv only (no shell): the harness ends, and
`ip link set dev NIC down|up` on the node for the fault. The working directory must be on a
filesystem both nodes and this host share (handle, trace, progress and event files).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

from fleetctl.errors import UsageError
from fleetctl.failover import FailoverError
from fleetctl.failover.drill import new_workdir
from fleetctl.failover.command import DrillAdapters, DrillRequest

_NIC = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_ROUTE_WORD = re.compile(r"^[A-Za-z0-9_.:/-]{1,64}$")
MAX_ROUTES = 256


def check_guard(backend, node_a: str, node_b: str, i_know: bool):
    """The reservation that allows the drill; FailoverError saying what is missing otherwise."""
    if not i_know:
        raise FailoverError(f"{node_a} and {node_b} are real nodes: a drill takes their links down; refusing "
                            "without --i-know",
                            hint="put both nodes in a maintenance reservation (scontrol create reservation "
                                 "... Flags=MAINT,IGNORE_JOBS) and add --i-know")
    for res in backend.reservations():
        flags = {f.upper() for f in res.flags}
        if "MAINT" in flags and res.state.upper() == "ACTIVE" and {node_a, node_b} <= set(res.nodes):
            return res
    raise FailoverError(f"no active maintenance reservation (Flags=MAINT) holds both {node_a} and {node_b}",
                        hint=f"scontrol create reservation ReservationName=fleetctl-drill Nodes={node_a},{node_b} "
                             "Users=root StartTime=now Duration=60 Flags=MAINT,IGNORE_JOBS")


def real_cluster_adapters(cluster, request: DrillRequest) -> DrillAdapters:
    """srun inside the maintenance reservation holding both nodes, `ip link` faults; refusals
    (FailoverError, UsageError) before anything runs."""
    from fleetctl.slurm import backend_for_site

    backend = backend_for_site(cluster, timeout=15.0)
    reservation = check_guard(backend, request.node_a, request.node_b, request.i_know)
    if not request.workdir:
        raise UsageError("--workdir: a real cluster needs a directory both nodes and this host share")
    runner = SrunRunner(reservation.name, new_workdir(request.workdir), getattr(backend, "slurm_conf", ""))
    return DrillAdapters(runner, IpLinkFaults(runner), f"reservation {reservation.name}", remove_workdir=False)


class SrunRunner:
    shared_clock = False

    def __init__(self, reservation: str, workdir: Path, slurm_conf: str = ""):
        self.reservation, self.workdir, self.slurm_conf = reservation, Path(workdir), slurm_conf

    def _srun(self, node: str) -> list[str]:
        return ["srun", f"--reservation={self.reservation}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
                "--overlap", "--kill-on-bad-exit=1", f"--chdir={self.workdir}"]

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, **(extra or {})}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def popen(self, node: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen([*self._srun(node), *argv], env=self._env(env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, node: str, argv: list[str], timeout: float = 60) -> str:
        try:
            done = subprocess.run([*self._srun(node), *argv], env=self._env(), capture_output=True, text=True,
                                  timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FailoverError(f"srun on {node}: {exc}") from None
        if done.returncode != 0:
            raise FailoverError(f"srun on {node}: {' '.join(argv)}: {done.stderr.strip()[-300:]}")
        return done.stdout


class IpLinkFaults:
    """`ip link set dev NIC down|up` on the node through the runner's `run(node, argv)` (srun in the
    reservation); flapping is a thread doing the same every half period until `up`.

    Setting a link down makes the kernel delete the routes through it, and nothing puts static ones
    back on a node without a network manager: the routes of the NIC (every table) are read before the
    first `down` and whatever is missing after `up` is put back, so the drill leaves the node as it
    found it."""

    def __init__(self, runner):
        self.runner = runner
        self._routes: dict[tuple[str, str], list[dict]] = {}
        self._flap: dict[tuple[str, str], tuple[threading.Event, threading.Thread]] = {}

    def _set(self, node: str, nic: str, state: str) -> None:
        if not _NIC.match(nic):
            raise FailoverError(f"NIC name {nic!r}: not an interface name")
        self.runner.run(node, ["ip", "link", "set", "dev", nic, state])

    def _save_routes(self, node: str, nic: str) -> None:
        if (node, nic) in self._routes:
            return
        try:
            routes = json.loads(self.runner.run(node, ["ip", "-j", "route", "show", "table", "all", "dev", nic]) or "[]")
        except (ValueError, RecursionError):
            routes = []
        if not isinstance(routes, list):  # the node's `ip -j` printed something else
            routes = []
        self._routes[(node, nic)] = [r for r in routes[:MAX_ROUTES] if isinstance(r, dict)
                                     and r.get("protocol") != "kernel" and r.get("type", "unicast") == "unicast"
                                     and r.get("table") != "local"]

    def _restore_routes(self, node: str, nic: str) -> None:
        for r in self._routes.pop((node, nic), []):
            argv = ["ip", "route", "replace", str(r.get("dst", "default")), "dev", nic]
            for key, word in (("gateway", "via"), ("table", "table"), ("metric", "metric"), ("prefsrc", "src")):
                if r.get(key) not in (None, ""):
                    argv += [word, str(r[key])]
            if isinstance(r.get("flags"), list) and "onlink" in r["flags"]:
                argv.append("onlink")
            if all(_ROUTE_WORD.match(a) for a in argv):
                try:
                    self.runner.run(node, argv)
                except FailoverError:
                    pass  # reported by the drill as a path that did not fail back

    def down(self, node: str, nic: str) -> None:
        self._save_routes(node, nic)
        self._set(node, nic, "down")

    def up(self, node: str, nic: str) -> None:
        flapping = self._flap.pop((node, nic), None)
        if flapping:
            flapping[0].set()
            flapping[1].join(timeout=120)  # its last toggle must not land after this `up`
        self._set(node, nic, "up")
        self._restore_routes(node, nic)

    def flap(self, node: str, nic: str, period_s: float) -> None:
        self._save_routes(node, nic)
        stop = threading.Event()

        def loop():
            state = "down"
            while not stop.is_set():
                try:
                    self._set(node, nic, state)
                except FailoverError:
                    pass  # the next toggle (or `up`) tries again
                state = "up" if state == "down" else "down"
                stop.wait(period_s / 2)

        thread = threading.Thread(target=loop, daemon=True)
        self._flap[(node, nic)] = (stop, thread)
        thread.start()
