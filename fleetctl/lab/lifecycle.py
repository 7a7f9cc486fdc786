"""`lab up`, `lab down` and `lab status`: build the emulated cluster step by step, record what was
created, and remove exactly that again.

`up` is idempotent: a lab of the same size that is healthy is kept; one that is not is rebuilt; a lab of
another size is an error (run `lab down` first). A failing step tears down everything created so far and
raises LabError naming the step. Leftovers of a killed session (recorded in the state file, or carrying
the lab's `fl-` prefix) are removed first. Set FLEETCTL_LAB_FAIL_AT=<step> to make a step fail (tests).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from fleetctl.errors import LabError
from fleetctl.lab import fabric, paths, services, state, system
from fleetctl.lab.steps import STEPS, BuildSteps
from fleetctl.lab.topology import BRIDGE, LabParams
# What `up` writes into the lab dir; `down` removes these names only (the dir may be shared).
_OWN_ENTRIES = ("site.toml", "slurm.conf", "cgroup.conf", "plugstack.conf", "hooks", "munge", "slurm",
                "slurm-bin", "logs", "ssh", "uts", "ns", "hosts", "lldp", "lens")


def up(params: LabParams, progress: Callable[[str], None] = lambda _m: None) -> dict:
    params.validate()
    with state.locked():
        current = state.load()
        if current and current.get("status") == "up":
            if current["params"] == params.to_dict():
                if not unhealthy(current):
                    return current
                progress("lab is up but unhealthy: rebuilding")
            else:
                raise LabError(f"a lab of another size is up ({describe(current['params'])})",
                               hint="run `fleetctl lab down` first")
        _teardown(current, progress)
        return _build(params, progress)


def down(progress: Callable[[str], None] = lambda _m: None) -> dict:
    with state.locked():
        current = state.load()
        summary = _teardown(current, progress)
        return summary


def describe(p: dict) -> str:
    text = f"{p['hosts']} hosts x {p['nics_per_host']} NICs, {p['leaves']} leaves, {p['spines']} spines"
    text += f", {p['gpus_per_host']} GPUs per host" if p.get("gpus_per_host") else ""
    slurm_from = p.get("slurm_from", "system")
    return text + (f", Slurm of Debian {slurm_from}" if slurm_from != "system" else "")


def unhealthy(st: dict) -> list[str]:
    """What is wrong with a lab that says it is up: dead processes, missing namespaces."""
    problems = [f"{p['name']} (pid {p['pid']}) is not running"
                for p in st.get("processes", []) if not system.alive(p["pid"], p.get("start"))]
    present = set(system.netns_list())
    problems += [f"namespace {ns} is missing" for ns in st.get("netns", []) if ns not in present]
    return problems


# ---------------------------------------------------------------- build
def _build(params: LabParams, progress: Callable[[str], None]) -> dict:
    """Run the steps in order, saving the state after each; a failing step (or Ctrl-C) tears down
    everything created so far."""
    steps = BuildSteps(params, progress)
    st = steps.st
    fail_at = os.environ.get("FLEETCTL_LAB_FAIL_AT", "")
    t0 = time.monotonic()
    for name in STEPS:
        progress(f"{name}")
        try:
            if fail_at == name:
                raise LabError("failure injected by FLEETCTL_LAB_FAIL_AT")
            steps.run(name)
        except (LabError, OSError, ValueError) as exc:
            message = exc.message if isinstance(exc, LabError) else str(exc)
            _teardown(st, progress)
            raise LabError(f"lab up failed at step {name!r}: {message}") from None
        except BaseException:  # Ctrl-C or a bug: leave nothing half-built behind either
            _teardown(st, progress)
            raise
        if name != "preflight":
            state.save(st)
    st["status"] = "up"
    st["addresses"] = _addresses(steps.layout)
    st["up_seconds"] = round(time.monotonic() - t0, 3)
    state.save(st)
    return st


def _addresses(layout) -> dict:
    return {
        "mgmt": {h.name: h.mgmt_address for h in layout.hosts},
        "nics": {f"{h.name}:{n.name}": n.address for h in layout.hosts for n in h.nics},
        "switches": {r.id: r.loopback for r in layout.routers},
        "netns": {**{h.name: h.netns for h in layout.hosts}, **{r.id: r.netns for r in layout.routers}},
    }


# ---------------------------------------------------------------- teardown
def _lens_coordinator(lab: Path) -> list[int]:
    """A `fleetctl lens run` on the lab's site file (its pid file is in the lab's lens state
    dir): it outlives the lab otherwise, and the next lab would inherit its state."""
    try:
        pid = int((lab / "lens" / "lens.pid").read_text()[:100].split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return []
    return [pid] if pid > 1 and b"lens" in cmdline and system.alive(pid) else []


def _teardown(st: dict | None, progress: Callable[[str], None]) -> dict:
    """Remove what `st` records, then anything else carrying the lab's names. Never raises for
    things already gone."""
    lab = paths.lab_dir()
    removed = {"processes": 0, "netns": 0, "root_links": 0}
    records = list((st or {}).get("processes", []))
    for fault in (st or {}).get("faults", []):
        records += fault.get("processes", [])
    stale_ns, stale_links = fabric.stale_names()
    netns = sorted(set((st or {}).get("netns", [])) | set(stale_ns))
    # Processes first (flappers and load senders before daemons), then everything still running
    # inside our namespaces: job steps, ssh sessions, probe agents.
    live = [r for r in records if system.alive(r["pid"], r.get("start"))]
    # A short grace: after a job, slurmd takes seconds to honour SIGTERM, and the lab's state is
    # thrown away anyway.
    system.stop(list(reversed(live)), timeout=1.0)
    inodes = {i for i in (system.netns_inode(ns) for ns in netns) if i}
    stray_pids = set(system.pids_in_netns(inodes)) | set(system.pids_mentioning(f"{lab}/"))
    stray_pids |= set(_lens_coordinator(lab))
    strays = [system.proc_record(pid, "stray") for pid in sorted(stray_pids)]
    system.stop(strays, timeout=2.0)
    removed["processes"] = len(live) + len(strays)
    # UTS namespaces and the mount namespace are bind mounts on files under the lab dir.
    mounts = list((st or {}).get("uts", {}).values()) + services.stale_uts(lab)
    mounts += [st["mount_ns"]] if (st or {}).get("mount_ns") else []
    services.remove_uts(sorted(set(mounts + services.stale_mounts(lab / "ns"))))
    root_links = sorted(set((st or {}).get("root_links", [])) | set(stale_links))
    present = set(system.netns_list())
    removed["netns"] = len([ns for ns in netns if ns in present])
    removed["root_links"] = len([d for d in root_links if d in set(system.root_links())])
    fabric.remove(netns, [d for d in root_links if d != BRIDGE])
    for name in _OWN_ENTRIES:
        p = lab / name
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    state.remove()
    try:
        lab.rmdir()
    except OSError:
        pass
    if st or stale_ns or stale_links:
        progress(f"removed {removed['processes']} processes, {removed['netns']} namespaces, "
                 f"{removed['root_links']} links")
    return removed


# ---------------------------------------------------------------- status and env
def status() -> dict:
    st = state.load()
    if not st:
        return {"status": "down", "lab_dir": str(paths.lab_dir())}
    out = {
        "status": st["status"],
        "lab_dir": st["lab_dir"],
        "params": st["params"],
        "site_file": str(paths.site_file()),
        "slurm": st.get("slurm"),
        "processes": [{**p, "running": system.alive(p["pid"], p.get("start"))} for p in st["processes"]],
        "addresses": st.get("addresses", {}),
        "faults": st.get("faults", []),
        "problems": unhealthy(st) if st["status"] == "up" else [],
        "up_seconds": st.get("up_seconds"),
    }
    if "clock" in st:
        out["clock"] = st["clock"]
    return out


def env() -> dict[str, str]:
    st = state.load()
    if not st or st.get("status") != "up":
        raise LabError("no lab is up", hint="run `fleetctl lab up`")
    out = {"FLEETCTL_SITE": str(paths.site_file())}
    out.update(_check_env())
    if st.get("lldp"):
        out["FLEETCTL_LLDP_SOCKET"] = st["lldp"]["socket"]  # each element's lldpd control socket
    if st.get("slurm"):
        out["SLURM_CONF"] = st["slurm"]["conf"]
        if st["slurm"].get("bindir"):
            # A Debian root's Slurm: its client commands (wrappers) before this machine's.
            out["PATH"] = st["slurm"]["bindir"] + ":" + os.environ.get("PATH", os.defpath)
    return out


def _check_env() -> dict[str, str]:
    """The lab site file's check data paths (kernel log, simulated GPUs, state file) as the
    FLEETCTL_CHECKS_* variables that a run without a site file (Slurm only) reads instead: with
    FLEETCTL_SITE unset, `fleetctl audit` then checks the lab's data as the site file would. With a
    site file they are not read."""
    import tomllib

    from fleetctl.inventory.from_slurm import CHECK_ENV

    try:
        checks = tomllib.loads(paths.site_file().read_text()).get("checks") or {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LabError(f"lab site file {paths.site_file()}: {exc}") from None
    return {var: str(checks[key]) for key, var in CHECK_ENV.items() if checks.get(key)}
