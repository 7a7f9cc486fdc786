"""Where network-interface attributes come from: sysfs, or netlink when sysfs shows another namespace.

Also the small tolerant readers the NIC checks share. Payload module: standard library only.
"""

from __future__ import annotations

import json
import os
import re
import socket

from fleetctl.checks.payload.common import number_or_none, read_text, read_or_none, run_cmd  # payload-local

ETH_RATE_LIMITS = {"rx_errors": 10.0, "tx_errors": 10.0, "rx_crc_errors": 10.0}  # per s


class NicItemError(Exception):
    """One sysfs item could not be read: the owning check reports `error`."""


def read_item(path):
    try:
        return read_text(path)
    except OSError as exc:
        raise NicItemError("cannot read %s: %s" % (path, exc.strerror or exc))


def listdir_or_empty(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def counter_dir(path, only):
    values = {}
    for name in listdir_or_empty(path):
        if only is None or name in only:
            values[name] = number_or_none(read_or_none(os.path.join(path, name)))
    return values


class NetdevView:
    """Where netdev attributes come from. sysfs shows the network namespace that *mounted* it, not the
    caller's: inside `nsenter --net` (the lab's nodes, containers) /sys/class/net lists the host's
    devices. When the sysfs view does not match this namespace's interfaces, attributes come from
    netlink through `ip -j -s -s -d link` (and `ethtool` for the speed) instead."""

    def __init__(self, sysfs, deadline):
        self.sysfs, self.deadline, self.links = sysfs, deadline, None
        if sysfs == "/sys" and not sysfs_matches_netns(sysfs):
            rc, out, err = run_cmd(["ip", "-j", "-s", "-s", "-d", "link", "show"], deadline, timeout=3)
            if rc != 0:
                raise NicItemError("sysfs shows another network namespace and `ip -j link` failed: %s"
                                   % (err.strip() or rc))
            self.links = parse_ip_link_json(out)

    @property
    def source(self):
        return "sysfs" if self.links is None else "netlink"

    def names(self):
        if self.links is not None:
            return sorted(self.links)
        return sorted(listdir_or_empty(os.path.join(self.sysfs, "class/net")))

    def exists(self, netdev):
        if self.links is not None:
            return netdev in self.links
        return os.path.isdir(os.path.join(self.sysfs, "class/net", netdev))

    def attr(self, netdev, name):
        """operstate, mtu, speed (Mb/s or None), carrier. Raises NicItemError when unreadable."""
        if self.links is not None:
            if name == "speed":
                return _ethtool_speed(netdev, self.deadline)
            return self.links[netdev].get(name)
        dev = os.path.join(self.sysfs, "class/net", netdev)
        if name == "speed":  # EINVAL when down, -1 when unknown (veth without a set speed)
            speed = number_or_none(read_or_none(dev + "/speed"))
            return speed if speed and speed > 0 else None
        if name == "carrier":
            return read_or_none(dev + "/carrier") == "1"
        value = read_item(os.path.join(dev, name))
        return number_or_none(value) if name == "mtu" else value

    def counters(self, netdev):
        if self.links is not None:
            link = self.links.get(netdev) or {}
            return dict(link.get("counters") or {})
        dev = os.path.join(self.sysfs, "class/net", netdev)
        values = counter_dir(os.path.join(dev, "statistics"), ETH_RATE_LIMITS)
        values["carrier_changes"] = number_or_none(read_or_none(dev + "/carrier_changes"))
        return values


def sysfs_matches_netns(sysfs):
    """True when /sys/class/net lists exactly this namespace's interfaces with the same indexes."""
    try:
        mine = {name: index for index, name in socket.if_nameindex()}
    except OSError:
        return True
    seen = {}
    for name in listdir_or_empty(os.path.join(sysfs, "class/net")):
        seen[name] = number_or_none(read_or_none(os.path.join(sysfs, "class/net", name, "ifindex")))
    return seen == mine


def parse_ip_link_json(text):
    """{ifname: {operstate, mtu, carrier, counters}} from `ip -j -s -s -d link show`."""
    out = {}
    for link in json.loads(text or "[]"):
        stats = link.get("stats64") or link.get("stats") or {}
        rx, tx = stats.get("rx") or {}, stats.get("tx") or {}
        out[link["ifname"]] = {
            "operstate": str(link.get("operstate", "UNKNOWN")).lower(), "mtu": link.get("mtu"),
            "carrier": "LOWER_UP" in (link.get("flags") or ()),
            "counters": {"rx_errors": rx.get("errors"), "tx_errors": tx.get("errors"),
                         "rx_crc_errors": rx.get("crc_errors"), "carrier_changes": tx.get("carrier_changes")},
        }
    return out


def _ethtool_speed(netdev, deadline):
    rc, out, _ = run_cmd(["ethtool", netdev], deadline, timeout=2)
    m = re.search(r"Speed:\s*(\d+)\s*Mb/s", out or "") if rc == 0 else None
    return int(m.group(1)) if m else None
