"""The steps of `lab up`, one method each, in the order of STEPS. lifecycle.py runs them, saves the
state after each and tears everything down when one fails; a step only creates, and records what it
created in `st` (before creating it wherever a crash in between must still be cleaned up)."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import LabError
from fleetctl.lab import fabric, gpusim, nicstats, paths, services, sitefile, slurmconf, slurmroot, spankbuild, state, system
from fleetctl.lab.topology import BRIDGE, LabParams, build_layout

STEPS = ("preflight", "slurmroot", "namespaces", "links", "addresses", "hostnames", "munge", "slurm",
         "ssh", "lldp", "gpus", "site")


class BuildSteps:
    """One lab being built: its layout, its state record `st` (what `down` removes) and what later steps
    take from earlier ones (a Debian root's Slurm, munge's socket, the ssh keys)."""

    def __init__(self, params: LabParams, progress: Callable[[str], None]):
        self.params = params
        self.progress = progress
        self.lab = paths.lab_dir()
        self.layout = build_layout(params)
        self.st = {"status": "building", "params": params.to_dict(), "lab_dir": str(self.lab),
                   "started": time.time(), "netns": [], "root_links": [], "uts": {}, "processes": [],
                   "faults": []}
        self.suite = slurmroot.suite_of(params.slurm_from) if params.slurm else None
        self.bindir: Path | None = None  # a Debian root's Slurm: wrappers of its programs
        self.root: Path | None = None
        self.munge_socket = ""
        self.ssh: dict = {}

    def run(self, name: str) -> None:
        steps = {"preflight": self.preflight, "slurmroot": self.slurmroot, "namespaces": self.namespaces,
                 "links": self.links, "addresses": self.addresses, "hostnames": self.hostnames,
                 "munge": self.munge, "slurm": self.slurm, "ssh": self.ssh_servers, "lldp": self.lldp,
                 "gpus": self.gpus, "site": self.site}
        steps[name]()

    def track(self, records: list[dict]) -> None:
        self.st["processes"].extend(records)
        state.save(self.st)

    def preflight(self) -> None:
        needed = ["ip", "nft", "tc", "nsenter", "unshare", "sysctl"]
        if self.params.slurm:
            # A Debian root's Slurm: its daemons' wrappers are compiled (slurmroot.py says why).
            needed += ["munged"] + (["gcc"] if self.suite else ["slurmctld", "slurmd", "sinfo"])
        if self.params.ssh:
            needed += ["ssh-keygen", "/usr/sbin/sshd"]
        system.require_commands(needed)
        if os.geteuid() != 0:
            raise LabError("preflight: the lab needs root (network namespaces, veths, daemons)")
        fabric.check_mgmt_range_free()
        self.lab.mkdir(parents=True, exist_ok=True)

    def slurmroot(self) -> None:
        # A Debian root's Slurm: the root (built once, cached), wrappers of its programs, and the lab's
        # mount namespace in which they cover this machine's (slurmroot.py says why).
        if not self.suite:
            return
        root, took = slurmroot.ensure_root(self.suite, self.progress)
        if took is not None:
            self.st["root_build_seconds"] = took
        self.bindir = self.lab / "slurm-bin"
        standard = slurmroot.write_wrappers(root, self.suite, self.bindir)
        self.st["mount_ns"] = str(self.lab / "ns" / "mnt")
        state.save(self.st)  # recorded before creation, like the namespaces
        slurmroot.create_mount_ns(Path(self.st["mount_ns"]), self.bindir, standard)
        self.root = root

    def namespaces(self) -> None:
        self.st["netns"] = self.layout.netns_names()
        state.save(self.st)  # recorded before creation: a crash in between still gets cleaned up
        fabric.create_namespaces(self.layout)

    def links(self) -> None:
        self.st["root_links"] = [BRIDGE] + [h.mgmt_root_dev for h in self.layout.hosts]
        state.save(self.st)
        fabric.create_links(self.layout)

    def addresses(self) -> None:
        fabric.configure(self.layout)

    def hostnames(self) -> None:
        self.st["uts"] = {h.name: str(self.lab / "uts" / h.name) for h in self.layout.hosts}
        state.save(self.st)
        services.create_uts(self.lab, self.layout)

    def munge(self) -> None:
        if not self.params.slurm:
            return
        (self.lab / "logs").mkdir(exist_ok=True)
        record, self.munge_socket = services.start_munge(self.lab)
        self.track([record])

    def slurm(self) -> None:
        if not self.params.slurm:
            return
        lab, layout, bindir, root, mount_ns = self.lab, self.layout, self.bindir, self.root, self.st.get("mount_ns")
        version = slurmconf.slurm_version(bindir)
        # spank_fleetctl.so built for the lab's Slurm (scripts/install builds both), loaded when present.
        spank = spankbuild.plugin_for(root) if root else slurmconf.SPANK_PLUGIN
        conf = slurmconf.write_conf(lab, layout, socket.gethostname().split(".")[0], self.munge_socket, version,
                                    bindir=bindir, plugin_dir=slurmroot.plugin_dir(root) if root else None,
                                    spank_plugin=spank)
        self.st["slurm"] = {"conf": str(conf), "version": f"{version[0]}.{version[1]:02d}",
                            "partition": slurmconf.PARTITION, "from": self.params.slurm_from,
                            "root": str(root) if root else None, "bindir": str(bindir) if bindir else None,
                            "spank_plugin": str(spank) if spank.is_file() else None}
        self.track([services.start_slurmctld(lab, conf, bindir, mount_ns)])
        records = services.start_slurmds(lab, conf, layout, self.st["uts"], bindir, mount_ns)
        self.track(records)
        services.wait_nodes_idle(conf, layout, records, lab, bindir=bindir)

    def ssh_servers(self) -> None:
        if not self.params.ssh:
            return
        env = {"FLEETCTL_SITE": str(paths.site_file())}
        if "slurm" in self.st:
            env["SLURM_CONF"] = self.st["slurm"]["conf"]
        self.ssh = services.write_ssh_keys(self.lab, self.layout, env)
        self.st["ssh"] = self.ssh
        records = services.start_sshds(self.lab, self.layout, self.st["uts"], self.st.get("mount_ns"))
        self.track(records)
        services.wait_sshds(self.layout, records, self.lab)

    def lldp(self) -> None:
        # lldpd where it is installed (scripts/install adds it) and the lab runs services at all (a
        # network-only lab runs no process): `fleetctl site discover` reads the cabling from it.
        if not shutil.which("lldpd") or not (self.params.slurm or self.params.ssh):
            return
        (self.lab / "logs").mkdir(exist_ok=True)
        self.track(services.start_lldpds(self.lab, self.layout, self.st["uts"]))
        self.st["lldp"] = {"socket": str(services.lldp_socket(self.lab, "{node}"))}

    def gpus(self) -> None:
        for i, host in enumerate(self.layout.hosts, start=1):
            (gpusim.host_dir(self.lab, host.name)).mkdir(parents=True, exist_ok=True)
            if self.params.gpus_per_host:
                gpusim.write_host(self.lab, host.name, i, self.params.gpus_per_host)
            else:
                (gpusim.host_dir(self.lab, host.name) / "kern.log").touch()
            nicstats.write_host(self.lab, host.name, [f"eth{k}" for k in range(self.params.nics_per_host)])
        if self.params.clock_skew:
            self.st["clock"] = clock_truth(self.layout, seed=int(os.environ.get("FLEETCTL_LAB_SEED", "1")))
            # plain data beside the site file, which names it (lab.clock_file): the probe engine reads
            # it as data (mesh.collect.injected_clocks), never the lab's state or code
            write_atomic(self.lab / CLOCK_FILE, json.dumps(self.st["clock"], indent=1) + "\n")

    def site(self) -> None:
        doc = sitefile.site_document(self.layout, self.lab, slurm_conf=self.st.get("slurm", {}).get("conf", ""),
                                     ssh=self.ssh, cpus=os.cpu_count() or 1)
        paths.site_file().write_text(sitefile.to_toml(doc))
        from fleetctl.config import load_site

        load_site(paths.site_file())  # the lab's own site file must pass the schema


CLOCK_FILE = "clock.json"


def clock_truth(layout, seed: int) -> dict:
    """Known clock offset (+-0.5..5 ms) and drift (+-1..50 ppm) per host, for the probe agent to apply
    and for clock-sync estimates to be checked against. offset(t) = offset_ms + drift_ppm * (t - t0)."""
    rng = random.Random(seed)
    hosts = {}
    for h in layout.hosts:
        hosts[h.name] = {"offset_ms": round(rng.choice((-1, 1)) * rng.uniform(0.5, 5.0), 4),
                         "drift_ppm": round(rng.choice((-1, 1)) * rng.uniform(1.0, 50.0), 3)}
    return {"t0": time.time(), "seed": seed, "hosts": hosts}
