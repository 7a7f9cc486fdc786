"""The lab's RebootProgram: what a reboot of an emulated node does, so that `scontrol reboot` (and
act's `reboot` rung) runs on the lab's real Slurm from request to the node back in service.

slurmd runs it in the node's namespaces when slurmctld issues the reboot. It answers at once (a
detached child does the work) and the child, as a machine's reboot would:
- clears the node's simulated faults: every GPU healthy again, its kernel log started anew (the old
  one kept as kern.log.1), its GPU faults gone from the lab's fault list;
- stops the node's slurmd and starts it again in a new time namespace whose boot time is now: the
  lab's nodes share one kernel, and slurmctld takes a reboot as done only when the node registers
  with a boot time after the request (slurmd reads its uptime with sysinfo(2), which a time
  namespace offsets). With `nextstate=RESUME` Slurm then puts the node back in service.
Every step is logged to logs/reboot.<node>.log. The new slurmd replaces the old one's record in the
lab's state, so `lab down` stops it like any other.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from pathlib import Path

from fleetctl.lab import gpusim, paths, services, state, system

# Slurm keeps times in whole seconds and takes the reboot as done only for a boot time after the
# request: the new slurmd starts 2 s after it, with an uptime of under a second.
REBOOT_DELAY_S = 2.0


def _log(node: str, text: str) -> None:
    with open(paths.lab_dir() / "logs" / f"reboot.{node}.log", "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def _clear_node(st: dict, node: str) -> None:
    lab = paths.lab_dir()
    gpus_file = gpusim.host_dir(lab, node) / "gpus.json"
    if gpus_file.exists():
        count = len(gpusim._load(lab, node)["gpus"])  # noqa: SLF001 (the lab's own module)
        for index in range(count):
            gpusim.clear_gpu(lab, node, int(node[4:]), index, repaired_by_reboot=index == 0)
    st["faults"] = [f for f in st.get("faults", []) if f.get("node") != node]


def _boottime_offset_s() -> float:
    """This process's boottime offset: it may be in the time namespace of a node rebooted before,
    where uptimes count from that reboot and /proc/PID/stat start times read smaller too."""
    try:
        for line in Path("/proc/self/timens_offsets").read_text().splitlines():
            name, seconds, nanos = line.split()
            if name == "boottime":
                return int(seconds) + int(nanos) / 1e9
    except (OSError, ValueError):
        pass  # a kernel without time namespaces: no offset
    return 0.0


def _uptime_s() -> int:
    """The machine's uptime (a new namespace's offset is relative to the machine's clock, not to
    this one's)."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) - _boottime_offset_s())


def _shift_start(rec: dict, sign: int) -> dict:
    """The record with its start time moved between this process's time namespace (sign -1: to the
    machine's, as the lab's state keeps it for `lab status` and `lab down`) and the machine's (+1: to
    this namespace's, to check the pid from here)."""
    if rec.get("start") is not None:
        rec = {**rec, "start": rec["start"] + sign * round(_boottime_offset_s() * os.sysconf("SC_CLK_TCK"))}
    return rec


def restart_slurmd(st: dict, node: str) -> dict:
    """Stop the node's slurmd and start it again with a boot time of now; returns its new record."""
    old = next(r for r in st["processes"] if r.get("name") == f"slurmd:{node}")
    system.stop([_shift_start(old, +1)])
    slurm = st["slurm"]
    bindir = Path(slurm["bindir"]) if slurm.get("bindir") else None
    # This process is slurmd's child: it is in the node's network, UTS and mount namespaces already
    # (entered by `lab up`), and the new slurmd inherits them; only the time namespace is new.
    new_boot = ["unshare", "--time", f"--boottime=-{_uptime_s()}", "--"]
    cmd = new_boot + [services._program("slurmd", bindir), "-D", "-f", slurm["conf"], "-N", node]  # noqa: SLF001
    rec = _shift_start(services.spawn(cmd, paths.lab_dir() / "logs" / f"slurmd.{node}.out", f"slurmd:{node}"), -1)
    st["processes"] = [r for r in st["processes"] if r is not old] + [rec]
    return rec


def reboot(node: str) -> None:
    time.sleep(REBOOT_DELAY_S)
    with state.locked(what="a lab reboot"):
        st = state.load()
        if not st or st.get("status") != "up":
            _log(node, "no lab is up: nothing rebooted")
            return
        _clear_node(st, node)
        rec = restart_slurmd(st, node)
        state.save(st)
    _log(node, f"rebooted: simulated faults cleared, slurmd pid {rec['pid']} with a new boot time")


def main() -> int:
    node = socket.gethostname().split(".")[0]  # the node's UTS namespace names it
    if os.fork():
        return 0  # slurmd waits for this one: answer at once
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        _log(node, "reboot requested by slurmd")
        reboot(node)
    except Exception:  # the lab's own failure: logged where an operator looks
        _log(node, "reboot failed: " + traceback.format_exc().replace("\n", " | "))
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
