"""`lab up`, `lab down` and `lab status`: build the emulated cluster step by step, record what was
created, and remove exactly that again.

`up` is idempotent: a lab of the same size that is healthy is kept; one that is not is rebuilt; a lab of
another size is an error (run `lab down` first). A failing step tears down everything created so far and
raises LabError naming the step. Leftovers of a killed session (recorded in the state file, or carrying
the lab's `fl-` prefix) are removed first. Set FLEETCTL_LAB_FAIL_AT=<step> to make a step fail (tests).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from fleetctl.errors import LabError
from fleetctl.lab import (fabric, gpusim, paths, services, sitefile, slurmconf, slurmroot, spankbuild, state,
                          system)
from fleetctl.lab.topology import BRIDGE, LabParams, build_layout

STEPS = ("preflight", "slurmroot", "namespaces", "links", "addresses", "hostnames", "munge", "slurm",
         "ssh", "lldp", "gpus", "site")
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
    lab = paths.lab_dir()
    layout = build_layout(params)
    st = {"status": "building", "params": params.to_dict(), "lab_dir": str(lab), "started": time.time(),
          "netns": [], "root_links": [], "uts": {}, "processes": [], "faults": []}
    context: dict = {}
    fail_at = os.environ.get("FLEETCTL_LAB_FAIL_AT", "")
    t0 = time.monotonic()

    suite = slurmroot.suite_of(params.slurm_from) if params.slurm else None

    def step_preflight():
        needed = ["ip", "nft", "tc", "nsenter", "unshare", "sysctl"]
        if params.slurm:
            # A Debian root's Slurm: its daemons' wrappers are compiled (slurmroot.py says why).
            needed += ["munged"] + (["gcc"] if suite else ["slurmctld", "slurmd", "sinfo"])
        if params.ssh:
            needed += ["ssh-keygen", "/usr/sbin/sshd"]
        system.require_commands(needed)
        if os.geteuid() != 0:
            raise LabError("preflight: the lab needs root (network namespaces, veths, daemons)")
        fabric.check_mgmt_range_free()
        lab.mkdir(parents=True, exist_ok=True)

    def step_slurmroot():
        # A Debian root's Slurm: the root (built once, cached), wrappers of its programs, and the lab's
        # mount namespace in which they cover this machine's (slurmroot.py says why).
        if not suite:
            return
        root, took = slurmroot.ensure_root(suite, progress)
        if took is not None:
            st["root_build_seconds"] = took
        context["bindir"] = lab / "slurm-bin"
        standard = slurmroot.write_wrappers(root, suite, context["bindir"])
        st["mount_ns"] = str(lab / "ns" / "mnt")
        state.save(st)  # recorded before creation, like the namespaces
        slurmroot.create_mount_ns(Path(st["mount_ns"]), context["bindir"], standard)
        context["root"] = root

    def step_namespaces():
        st["netns"] = layout.netns_names()
        state.save(st)  # recorded before creation: a crash in between still gets cleaned up
        fabric.create_namespaces(layout)

    def step_links():
        st["root_links"] = [BRIDGE] + [h.mgmt_root_dev for h in layout.hosts]
        state.save(st)
        fabric.create_links(layout)

    def step_hostnames():
        st["uts"] = {h.name: str(lab / "uts" / h.name) for h in layout.hosts}
        state.save(st)
        services.create_uts(lab, layout)

    def step_munge():
        if not params.slurm:
            return
        (lab / "logs").mkdir(exist_ok=True)
        rec, context["munge_socket"] = services.start_munge(lab)
        _track(st, [rec])

    def step_slurm():
        if not params.slurm:
            return
        bindir, root, mount_ns = context.get("bindir"), context.get("root"), st.get("mount_ns")
        version = slurmconf.slurm_version(bindir)
        # spank_fleetctl.so built for the lab's Slurm (scripts/install builds both), loaded when present.
        spank = spankbuild.plugin_for(root) if root else slurmconf.SPANK_PLUGIN
        conf = slurmconf.write_conf(lab, layout, socket.gethostname().split(".")[0],
                                    context["munge_socket"], version, bindir=bindir,
                                    plugin_dir=slurmroot.plugin_dir(root) if root else None,
                                    spank_plugin=spank)
        st["slurm"] = {"conf": str(conf), "version": f"{version[0]}.{version[1]:02d}",
                       "partition": slurmconf.PARTITION, "from": params.slurm_from,
                       "root": str(root) if root else None, "bindir": str(bindir) if bindir else None,
                       "spank_plugin": str(spank) if spank.is_file() else None}
        _track(st, [services.start_slurmctld(lab, conf, bindir, mount_ns)])
        records = services.start_slurmds(lab, conf, layout, st["uts"], bindir, mount_ns)
        _track(st, records)
        services.wait_nodes_idle(conf, layout, records, lab, bindir=bindir)

    def step_ssh():
        if not params.ssh:
            return
        env = {"FLEETCTL_SITE": str(paths.site_file())}
        if "slurm" in st:
            env["SLURM_CONF"] = st["slurm"]["conf"]
        context["ssh"] = services.write_ssh_keys(lab, layout, env)
        st["ssh"] = context["ssh"]
        records = services.start_sshds(lab, layout, st["uts"], st.get("mount_ns"))
        _track(st, records)
        services.wait_sshds(layout, records, lab)

    def step_lldp():
        # lldpd where it is installed (scripts/install adds it) and the lab runs services at all (a
        # network-only lab runs no process): `fleetctl site discover` reads the cabling from it.
        if not shutil.which("lldpd") or not (params.slurm or params.ssh):
            return
        (lab / "logs").mkdir(exist_ok=True)
        _track(st, services.start_lldpds(lab, layout, st["uts"]))
        st["lldp"] = {"socket": str(services.lldp_socket(lab, "{node}"))}

    def step_gpus():
        for i, host in enumerate(layout.hosts, start=1):
            (gpusim.host_dir(lab, host.name)).mkdir(parents=True, exist_ok=True)
            if params.gpus_per_host:
                gpusim.write_host(lab, host.name, i, params.gpus_per_host)
            else:
                (gpusim.host_dir(lab, host.name) / "kern.log").touch()
        if params.clock_skew:
            st["clock"] = clock_truth(layout, seed=int(os.environ.get("FLEETCTL_LAB_SEED", "1")))

    def step_site():
        doc = sitefile.site_document(layout, lab, slurm_conf=st.get("slurm", {}).get("conf", ""),
                                     ssh=context.get("ssh", {}), cpus=os.cpu_count() or 1)
        paths.site_file().write_text(sitefile.to_toml(doc))
        from fleetctl.config import load_site

        load_site(paths.site_file())  # the lab's own site file must pass the schema

    actions = {"preflight": step_preflight, "slurmroot": step_slurmroot, "namespaces": step_namespaces,
               "links": step_links, "addresses": lambda: fabric.configure(layout), "hostnames": step_hostnames,
               "munge": step_munge, "slurm": step_slurm, "ssh": step_ssh, "lldp": step_lldp, "gpus": step_gpus,
               "site": step_site}
    for name in STEPS:
        progress(f"{name}")
        try:
            if fail_at == name:
                raise LabError("failure injected by FLEETCTL_LAB_FAIL_AT")
            actions[name]()
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
    st["addresses"] = _addresses(layout)
    st["up_seconds"] = round(time.monotonic() - t0, 3)
    state.save(st)
    return st


def _track(st: dict, records: list[dict]) -> None:
    st["processes"].extend(records)
    state.save(st)


def _addresses(layout) -> dict:
    return {
        "mgmt": {h.name: h.mgmt_address for h in layout.hosts},
        "nics": {f"{h.name}:{n.name}": n.address for h in layout.hosts for n in h.nics},
        "switches": {r.id: r.loopback for r in layout.routers},
        "netns": {**{h.name: h.netns for h in layout.hosts}, **{r.id: r.netns for r in layout.routers}},
    }


def clock_truth(layout, seed: int) -> dict:
    """Known clock offset (+-0.5..5 ms) and drift (+-1..50 ppm) per host, for the probe agent to apply
    and for clock-sync estimates to be checked against. offset(t) = offset_ms + drift_ppm * (t - t0)."""
    rng = random.Random(seed)
    hosts = {}
    for h in layout.hosts:
        hosts[h.name] = {"offset_ms": round(rng.choice((-1, 1)) * rng.uniform(0.5, 5.0), 4),
                         "drift_ppm": round(rng.choice((-1, 1)) * rng.uniform(1.0, 50.0), 3)}
    return {"t0": time.time(), "seed": seed, "hosts": hosts}


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
