"""Builds and removes the lab's network: namespaces, veth cables, the management bridge and routes."""

from __future__ import annotations

import ipaddress

from fleetctl.errors import LabError
from fleetctl.lab import system
from fleetctl.lab.topology import (BRIDGE, FABRIC_SUPERNET, MGMT_DEV, MGMT_GATEWAY, MGMT_NET,
                                   NETNS_PREFIX, NIC_MTU, LabLayout, router_routes)

_COMMON = {
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.icmp_ratelimit": 0,
    "net.ipv4.icmp_msgs_per_sec": 1000000,
    "net.ipv4.icmp_msgs_burst": 1000000,
    # Set before any link event: a next hop over a link without carrier is then skipped.
    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
    "net.ipv4.conf.default.ignore_routes_with_linkdown": 1,
}
_HOST = {
    **_COMMON,
    # Answer ARP only on the NIC that owns the address (no "ARP flux" between a host's NICs).
    "net.ipv4.conf.all.arp_ignore": 1,
    "net.ipv4.conf.all.arp_announce": 2,
}
_ROUTER = {
    **_COMMON,
    "net.ipv4.ip_forward": 1,
    # Time-exceeded answers come from the ingress port's address: a hop then names a link.
    "net.ipv4.icmp_errors_use_inbound_ifaddr": 1,
    # Hash on the L4 5-tuple (policy 3 + fields: src/dst IP, proto, src/dst port) so that one UDP
    # flow always takes one path, and TTL-limited probes of that flow reveal it.
    "net.ipv4.fib_multipath_hash_policy": 3,
    "net.ipv4.fib_multipath_hash_fields": "0x0037",
}


def check_mgmt_range_free() -> None:
    """Refuse to build when an address or route of the root namespace overlaps the management net."""
    ours = ipaddress.ip_network(MGMT_NET)
    out = system.run(["ip", "-o", "-4", "route", "show", "table", "all"], "preflight").stdout
    for line in out.splitlines():
        words = line.split()
        if not words or words[0] in ("local", "broadcast", "unreachable", "multicast"):
            words = words[1:]
        if not words or "dev" in words and words[words.index("dev") + 1] == BRIDGE:
            continue
        try:
            net = ipaddress.ip_network(words[0], strict=False)
        except ValueError:
            continue
        if net.overlaps(ours) and net.prefixlen > 0:
            raise LabError(f"preflight: the management range {MGMT_NET} is in use on this machine "
                           f"(route `{line.strip()}`)")


def create_namespaces(layout: LabLayout) -> None:
    system.ip_batch(None, [f"netns add {ns}" for ns in layout.netns_names()], "namespaces")
    for host in layout.hosts:
        system.sysctl(host.netns, _HOST, f"sysctls of {host.netns}")
    for router in layout.routers:
        system.sysctl(router.netns, _ROUTER, f"sysctls of {router.netns}")


def create_links(layout: LabLayout) -> None:
    lines = [f"link add {BRIDGE} type bridge", f"addr add {MGMT_GATEWAY}/24 dev {BRIDGE}",
             f"link set {BRIDGE} up"]
    for link in layout.links.values():
        lines.append(f"link add {link.a.dev} netns {link.a.netns} mtu {NIC_MTU} type veth "
                     f"peer name {link.b.dev} netns {link.b.netns} mtu {NIC_MTU}")
    for host in layout.hosts:
        lines.append(f"link add {host.mgmt_root_dev} type veth peer name {MGMT_DEV} netns {host.netns}")
        lines.append(f"link set {host.mgmt_root_dev} master {BRIDGE} up")
    system.ip_batch(None, lines, "links")


def configure(layout: LabLayout) -> None:
    for host in layout.hosts:
        lines = ["link set lo up", f"addr add {host.mgmt_address}/24 dev {MGMT_DEV}",
                 f"link set {MGMT_DEV} up"]
        for k, nic in enumerate(host.nics):
            lines += [f"addr add {nic.address}/30 dev {nic.name}", f"link set {nic.name} up",
                      f"rule add from {nic.address} table {nic.table} priority {1000 + k}",
                      f"route add {FABRIC_SUPERNET} via {nic.gateway} dev {nic.name} table {nic.table}"]
        first = host.nics[0]
        lines.append(f"route add {FABRIC_SUPERNET} via {first.gateway} dev {first.name}")
        system.ip_batch(host.netns, lines, f"addresses of {host.netns}")
    for router in layout.routers:
        lines = ["link set lo up", f"addr add {router.loopback}/32 dev lo"]
        for link in layout.links.values():
            for end in (link.a, link.b):
                if end.netns == router.netns:
                    lines += [f"addr add {end.address}/{link.prefix} dev {end.dev}",
                              f"link set {end.dev} up"]
        system.ip_batch(router.netns, lines, f"addresses of {router.netns}")
    apply_routes(layout, set())


def apply_routes(layout: LabLayout, down: set[str]) -> None:
    """Install the routes of every router for the given set of down links (replace or delete)."""
    for netns, routes in router_routes(layout, down).items():
        lines = []
        for prefix, hops in routes:
            if not hops:
                lines.append(f"route del {prefix}")
            elif len(hops) == 1:
                lines.append(f"route replace {prefix} via {hops[0][0]} dev {hops[0][1]}")
            else:
                nexthops = " ".join(f"nexthop via {gw} dev {dev}" for gw, dev in hops)
                lines.append(f"route replace {prefix} {nexthops}")
        # -force: a `route del` of a route already gone is not an error.
        system.ip_batch(netns, lines, f"routes of {netns}", force=True)


def set_link(layout: LabLayout, link_id: str, up: bool) -> None:
    link = layout.links[link_id]
    state = "up" if up else "down"
    for end in (link.a, link.b):
        system.run(["ip", "-n", end.netns, "link", "set", end.dev, state], f"link {link_id} {state}")


def remove(netns: list[str], extra_root_links: list[str] = ()) -> None:
    """Delete namespaces (their veths go with them) and root-side links. Missing ones are fine."""
    present = set(system.netns_list())
    lines = [f"netns del {ns}" for ns in netns if ns in present]
    system.ip_batch(None, lines, "delete namespaces", force=True)
    links = set(system.root_links())
    lines = [f"link del {dev}" for dev in [BRIDGE, *extra_root_links] if dev in links]
    system.ip_batch(None, lines, "delete links", force=True)


def stale_names() -> tuple[list[str], list[str]]:
    """Namespaces and root links that carry the lab's prefix: leftovers of a killed session."""
    return ([ns for ns in system.netns_list() if ns.startswith(NETNS_PREFIX)],
            [dev for dev in system.root_links() if dev.startswith(NETNS_PREFIX)])
