"""Thin wrappers over the commands and /proc files the lab uses, with LabError on failure.

Processes are identified by (pid, start time) so that a recycled pid is never killed by mistake.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from fleetctl.errors import LabError

NETNS_DIR = Path("/run/netns")


def run(cmd: list[str], step: str, *, input: str | None = None, check: bool = True,
        timeout: float = 30.0) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError(f"{step}: command not found: {cmd[0]}") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"{step}: `{' '.join(cmd[:4])}` timed out after {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"{step}: `{' '.join(cmd[:6])}` failed: {detail[-1] if detail else proc.returncode}")
    return proc


def ip_batch(netns: str | None, lines: list[str], step: str, *, force: bool = False) -> None:
    """Many `ip` commands in one process (one fork instead of hundreds)."""
    if not lines:
        return
    cmd = ["ip"] + (["-n", netns] if netns else []) + (["-force"] if force else []) + ["-batch", "-"]
    run(cmd, step, input="\n".join(lines) + "\n", check=not force)


def nsenter(netns: str, uts: str | None = None, mount: str | None = None) -> list[str]:
    """Prefix entering a namespace. Not `ip netns exec`: its private mount namespace hides
    /sys/fs/cgroup and slurmd then dies. `mount`: the lab's own mount namespace (a Debian root's
    Slurm, see slurmroot.py), a copy of this machine's that keeps /sys/fs/cgroup."""
    cmd = ["nsenter", f"--net={NETNS_DIR / netns}"]
    if uts:
        cmd.append(f"--uts={uts}")
    if mount:
        cmd += [f"--mount={mount}", "--wd=/"]
    return cmd


def sysctl(netns: str, values: dict[str, str | int], step: str) -> None:
    args = [f"{k}={v}" for k, v in values.items()]
    run(nsenter(netns) + ["sysctl", "-q", "-w"] + args, step)


def netns_list() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def netns_inode(netns: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / netns).st_ino
    except OSError:
        return None


def root_links() -> list[str]:
    return sorted(p.name for p in Path("/sys/class/net").iterdir())


def require_commands(names: list[str]) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise LabError(f"preflight: commands not found: {', '.join(missing)}",
                       hint="install iproute2 nftables util-linux slurm-wlm munge openssh-server")


# ---------------------------------------------------------------- processes
def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a live process, None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def alive(pid: int, start: int | None = None) -> bool:
    """True when the process runs (a zombie is dead) and, if given, started at `start`."""
    st = proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    return start is None or st[1] == start


def proc_record(pid: int, name: str) -> dict:
    st = proc_stat(pid)
    return {"name": name, "pid": pid, "start": st[1] if st else None}


def stop(records: list[dict], timeout: float = 5.0) -> None:
    """SIGTERM the recorded processes that are still ours, SIGKILL what remains after `timeout`."""
    live = [r for r in records if r.get("pid") and alive(r["pid"], r.get("start"))]
    for r in live:
        _signal(r["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [r for r in live if alive(r["pid"], r.get("start"))]
    for r in live:
        _signal(r["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [r for r in live if alive(r["pid"], r.get("start"))]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def pids_in_netns(inodes: set[int]) -> list[int]:
    """Every live process whose network namespace is one of `inodes` (all of them are the lab's)."""
    out = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            ino = os.stat(entry / "ns" / "net").st_ino
        except OSError:
            continue
        if ino in inodes and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


# ld-linux-x86-64: a Debian root's Slurm daemons run through the root's loader (slurmroot.py).
LAB_PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmstepd", "sshd", "nsenter", "python", "python3",
                "ld-linux-x86-64")


def pids_mentioning(text: str, programs: tuple[str, ...] = LAB_PROGRAMS) -> list[int]:
    """Live processes of the lab's programs whose command line contains `text` (the lab dir: every
    daemon of the lab is started with its config under it, so this finds them even when the state file
    is lost; an editor or a shell that happens to name a lab file is never one of them)."""
    out = []
    me = os.getpid()
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if not comm.startswith(programs):
            continue
        if needle in cmdline and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
