"""Writes the lab's site file: the complete description of the emulated cluster, valid by the schema."""

from __future__ import annotations

import sys
from pathlib import Path

from fleetctl.config.tomlwrite import toml_key, toml_value
from fleetctl.lab import gpusim
from fleetctl.lab.slurmconf import PARTITION
from fleetctl.lab.topology import NIC_MTU, NIC_RATE_GBPS, LabLayout
from fleetctl.nodeset import fold


def site_document(layout: LabLayout, lab: Path, *, slurm_conf: str, ssh: dict, cpus: int) -> dict:
    p = layout.params
    nodes = f"node[1-{p.hosts}]" if p.hosts > 1 else "node1"
    node_class = {
        "name": "lab",
        "nodes": nodes,
        "cpus": cpus,
        "nics": [{"name": f"eth{k}", "kind": "ethernet", "mtu": NIC_MTU, "rate_gbps": NIC_RATE_GBPS}
                 for k in range(p.nics_per_host)],
    }
    if p.gpus_per_host:
        node_class["gpus"] = {"count": p.gpus_per_host, "model": gpusim.MODEL,
                              "driver_version": gpusim.DRIVER, "vbios_version": gpusim.VBIOS,
                              "pcie_gen": 5, "pcie_width": 16, "nvlinks": gpusim.NVLINKS}
    checks = {"kernel_log": str(lab / "hosts" / "{node}" / "kern.log"),
              # Every emulated node shares this file system: one state file per node.
              "state_file": str(lab / "hosts" / "{node}" / "checks-state.json"),
              # the NICs' emulated mlx5 physical-port counters (lab/nicstats.py), read for `ethtool -S`
              "simulated_nic_stats": str(lab / "hosts" / "{node}" / "nicstats.json")}
    if p.gpus_per_host:
        checks["simulated_gpus"] = str(lab / "hosts" / "{node}" / "gpus.json")
    access = {"transport": "ssh" if p.ssh else "local",
              "local": {"netns": layout.hosts[0].netns.replace(layout.hosts[0].name, "{node}")}}
    if p.ssh:
        access["ssh"] = {"user": "root", "identity_file": ssh["identity_file"],
                         "known_hosts": ssh["known_hosts"], "host_key_policy": "strict",
                         "addresses": {h.name: h.mgmt_address for h in layout.hosts}}
        # The clush transport's tree: the first host under each leaf is its rack's gateway; every host
        # shares this machine's file system, so fleetctl's own Python (with ClusterShell) is theirs.
        gateways = {h.leaf: h.name for h in reversed(layout.hosts)}
        access["clush"] = {"gateways": fold(gateways.values()), "ssh_config": ssh["ssh_config"],
                          "python": sys.executable}
    doc = {
        "cluster": {"name": "lab", "description": f"fleetctl lab: {p.hosts} hosts x {p.nics_per_host} "
                    f"NICs, {p.leaves} leaves, {p.spines} spines (emulated on one machine)"},
        "access": access,
        "slurm": {"conf": slurm_conf, "partition": PARTITION} if p.slurm else {},
        "node_classes": [node_class],
        "fabric": {
            "switches": [{"id": r.id, "tier": r.tier, "model": "linux-netns", "address": r.loopback}
                         for r in sorted(layout.routers, key=lambda r: (r.tier, r.index))],
            "links": [{"id": link.id, "a": link.a.element, "b": link.b.element,
                       "a_address": link.a.address, "b_address": link.b.address,
                       "rate_gbps": NIC_RATE_GBPS} for link in layout.links.values()],
        },
        "checks": checks,
        "lens": {"state_dir": str(lab / "lens")},
        "lab": {"state_dir": str(lab), "clock_skew": p.clock_skew,
                "clock_file": str(lab / "clock.json") if p.clock_skew else ""},
    }
    return doc


def to_toml(doc: dict) -> str:
    """A small TOML writer for the shapes a site file has (tables, arrays of tables, scalars, lists)."""
    lines: list[str] = ["# Written by `fleetctl lab up`; describes the emulated cluster.", ""]
    _table(doc, [], lines)
    return "\n".join(lines).strip() + "\n"


def _is_table_array(v) -> bool:
    return isinstance(v, list) and v and all(isinstance(x, dict) for x in v)


def _table(d: dict, path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict) and not _is_table_array(v)}
    for k, v in scalars.items():
        lines.append(f"{toml_key(k)} = {toml_value(v)}")
    for k, v in d.items():
        if isinstance(v, dict):
            lines += ["", f"[{'.'.join(toml_key(p) for p in path + [k])}]"]
            _table(v, path + [k], lines)
        elif _is_table_array(v):
            for item in v:
                lines += ["", f"[[{'.'.join(toml_key(p) for p in path + [k])}]]"]
                _table(item, path + [k], lines)
