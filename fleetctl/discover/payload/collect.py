"""Collect what a site file says about one node (or a Linux switch): GPUs, NICs with their
addresses, rates, MTU, PCIe/NUMA affinity and IB GUIDs/LIDs, CPUs, memory, versions, and the raw
LLDP neighbour table. Prints one JSON document; judges nothing.

Payload module: standard library only, bundled after common, gpu_collect, netdev, nics and host of
fleetctl.checks.payload (their names are used here). Argument: one JSON object
{"budget_s", "simulated_gpus", "lldp_socket", "sysfs"}.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys

from fleetctl.checks.payload.common import (Deadline, json_argument, number_or_none, read_or_none,  # payload-local
                                            run_cmd, to_int)  # payload-local
from fleetctl.checks.payload.gpu_collect import GpuSourceError, collect_gpus  # payload-local
from fleetctl.checks.payload.fabric import domain_of  # payload-local
from fleetctl.checks.payload.host import meminfo_gib  # payload-local
from fleetctl.checks.payload.netdev import NetdevView, NicItemError, listdir_or_empty  # payload-local
from fleetctl.checks.payload.nics import ib_rate_gbps  # payload-local

DISCOVER_SCHEMA = "fleetctl.discover.node/1"
MAX_NETDEVS = 256
MAX_LLDP_TEXT = 4 * 2**20  # sent back raw; the control side parses it (bounded again there)


def _most_common(values):
    values = [v for v in values if v not in (None, "")]
    return max(sorted(set(values)), key=values.count) if values else ""


def gpu_facts(args, deadline):
    try:
        record = collect_gpus(args, deadline)
    except GpuSourceError as exc:
        return {"count": 0, "source": None, "error": str(exc)}
    gpus = record.get("gpus") or []
    pcie = [g.get("pcie") or {} for g in gpus]
    links = [g.get("nvlink") for g in gpus if g.get("nvlink") is not None]
    return {
        "count": len(gpus), "source": record.get("source"),
        "model": _most_common([g.get("name") for g in gpus]),
        "driver_version": record.get("driver_version") or "",
        "vbios_version": _most_common([g.get("vbios_version") for g in gpus]),
        "pcie_gen": max([p.get("max_gen") or 0 for p in pcie] or [0]),
        "pcie_width": max([p.get("max_width") or 0 for p in pcie] or [0]),
        "nvlinks": min([sum(1 for l in ls if l.get("active")) for ls in links] or [0]),
        "nvlink_domain": domain_of(gpus),  # a multi-node NVLink domain (NVL72): Slurm's block
    }


def ip_json(what, deadline):
    rc, out, err = run_cmd(["ip", "-j"] + what, deadline, timeout=3)
    if rc != 0:
        return None, (err.strip() or "exit %s" % rc)
    try:
        return json.loads(out or "[]"), None
    except ValueError as exc:
        return None, "ip -j output is not JSON: %s" % exc


def addresses(deadline):
    """{ifname: [cidr, ...]} without link-local addresses, from netlink (right in any namespace)."""
    data, err = ip_json(["addr", "show"], deadline)
    out = {}
    for link in data or []:
        for a in link.get("addr_info") or []:
            if a.get("scope") == "link" or not a.get("local"):
                continue
            out.setdefault(link.get("ifname"), []).append("%s/%s" % (a["local"], a.get("prefixlen")))
    return out, err


def _ib_port(dev_dir, port):
    p = os.path.join(dev_dir, "ports", port)
    gid = read_or_none(p + "/gids/0") or ""
    return {
        "port": number_or_none(port), "state": read_or_none(p + "/state"),
        "rate_gbps": ib_rate_gbps(read_or_none(p + "/rate")), "link_layer": read_or_none(p + "/link_layer"),
        "lid": to_int(read_or_none(p + "/lid")),  # sysfs prints it in hex (0x1a)
        # The port GUID is the low 64 bits of GID 0 (the link-local GID); ibnetdiscover prints it.
        "port_guid": gid.replace(":", "")[-16:] if gid else "",
    }


def _pci_affinity(devdir):
    real = os.path.realpath(devdir) if os.path.exists(devdir) else ""
    return {"pci": os.path.basename(real) if real else "",
            "numa_node": number_or_none(read_or_none(devdir + "/numa_node"))}


def rdma_devices(sysfs):
    out = []
    base = os.path.join(sysfs, "class/infiniband")
    for dev in sorted(listdir_or_empty(base)):
        d = os.path.join(base, dev)
        ports = [_ib_port(d, p) for p in sorted(listdir_or_empty(os.path.join(d, "ports")))]
        netdevs = sorted(listdir_or_empty(os.path.join(d, "device/net")))
        layer = (ports[0]["link_layer"] if ports else "") or ""
        out.append(dict({
            "name": dev, "kind": "roce" if layer.lower() == "ethernet" else "infiniband",
            "netdev": netdevs[0] if netdevs else "",
            "node_guid": (read_or_none(d + "/node_guid") or "").replace(":", ""),
            "firmware": read_or_none(d + "/fw_ver") or "",
            "rate_gbps": max([p["rate_gbps"] or 0 for p in ports] or [0]),
            "ports": ports}, **_pci_affinity(d + "/device")))
    return out


def netdevs(sysfs, deadline, addrs):
    try:
        view = NetdevView(sysfs, deadline)
        names = view.names()
    except NicItemError as exc:
        return [], str(exc)
    out = []
    for name in names[:MAX_NETDEVS]:
        if name == "lo":
            continue
        entry = {"name": name, "kind": "ethernet", "addresses": addrs.get(name, [])}
        for attr in ("operstate", "mtu", "speed"):
            try:
                entry[attr] = view.attr(name, attr)
            except (NicItemError, KeyError):
                entry[attr] = None
        speed = entry.pop("speed")
        entry["rate_gbps"] = speed / 1000.0 if speed else 0.0
        dev = os.path.join(sysfs, "class/net", name)
        entry["virtual"] = view.source == "sysfs" and not os.path.exists(dev + "/device")
        entry.update(_pci_affinity(dev + "/device") if view.source == "sysfs" else {"pci": "", "numa_node": None})
        out.append(entry)
    return out, None


def lldp_table(args, deadline):
    argv = ["lldpcli"] + (["-u", args["lldp_socket"]] if args.get("lldp_socket") else []) + \
        ["-f", "json", "show", "neighbors"]
    rc, out, err = run_cmd(argv, deadline, timeout=5)
    if rc != 0:
        return {"text": None, "error": (err.strip() or "exit %s" % rc)[:300]}
    return {"text": out[:MAX_LLDP_TEXT], "error": None}


def discover(args):
    deadline = Deadline(float(args.get("budget_s") or 20.0))
    sysfs = args.get("sysfs") or "/sys"
    addrs, addr_error = addresses(deadline)
    nets, net_error = netdevs(sysfs, deadline, addrs)
    routes, _ = ip_json(["route", "show", "default"], deadline)
    return {
        "schema": DISCOVER_SCHEMA,
        "node": os.environ.get("FLEETCTL_NODE") or socket.gethostname().split(".")[0],
        "hostname": socket.gethostname(), "kernel": platform.release(),
        "cpus": os.cpu_count(), "memory_gb": round(meminfo_gib() or 0.0, 1),
        "gpus": gpu_facts(args, deadline) if not args.get("switch") else {"count": 0},
        "rdma": rdma_devices(sysfs), "netdevs": nets,
        # A routed switch's own address (the lab's and many L3 fabrics' loopback /32).
        "loopback": [a for a in addrs.get("lo", []) if not a.startswith(("127.", "::1/"))],
        "default_route_dev": next((r.get("dev") for r in routes or [] if r.get("dev")), ""),
        "lldp": lldp_table(args, deadline),
        "errors": [e for e in (addr_error, net_error) if e],
    }


def discover_main(argv=None):
    try:
        doc = discover(json_argument(argv, "argument is not a JSON object"))
    except ValueError as exc:
        doc = {"schema": DISCOVER_SCHEMA, "error": "bad argument: %s" % exc}
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    discover_main()
