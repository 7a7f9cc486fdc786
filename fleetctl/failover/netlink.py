"""Link state from the kernel over rtnetlink (NETLINK_ROUTE, RTMGRP_LINK), with the standard library.

A dump (RTM_GETLINK) gives every interface's state; the multicast group then delivers each change
as RTM_NEWLINK/RTM_DELLINK. Link up means IFF_UP and IFF_RUNNING (administratively up and carrier),
as the fleet plugin judges it. Messages come from the kernel, but are parsed with every length
checked all the same: a short or inconsistent message is skipped, never trusted.
"""

from __future__ import annotations

import select
import socket
import struct
from dataclasses import dataclass

NETLINK_ROUTE = 0
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFF_UP, IFF_RUNNING, IFF_LOOPBACK = 0x1, 0x40, 0x8
IFLA_IFNAME, IFLA_OPERSTATE, IFLA_CARRIER_CHANGES = 3, 16, 35
OPERSTATES = {0: "unknown", 1: "notpresent", 2: "down", 3: "lowerlayerdown", 4: "testing", 5: "dormant", 6: "up"}

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_RTATTR = struct.Struct("=HH")
RECV_BYTES = 1 << 16


@dataclass(frozen=True)
class LinkState:
    index: int
    name: str
    up: bool  # IFF_UP and IFF_RUNNING
    admin_up: bool
    operstate: str
    carrier_changes: int | None
    loopback: bool = False
    deleted: bool = False


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attrs(data: bytes, offset: int, end: int) -> dict[int, bytes]:
    out = {}
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > end:
            break
        out[kind & 0x3FFF] = data[offset + _RTATTR.size: offset + length]
        offset += _align(length)
    return out


def parse_link_messages(data: bytes) -> tuple[list[LinkState], bool]:
    """(link states in `data`, whether a dump's NLMSG_DONE was seen)."""
    links, done, offset = [], False, 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            break
        body = offset + _NLMSGHDR.size
        if kind == NLMSG_DONE:
            done = True
        elif kind in (RTM_NEWLINK, RTM_DELLINK) and length >= _NLMSGHDR.size + _IFINFOMSG.size:
            _family, _type, index, flags, _change = _IFINFOMSG.unpack_from(data, body)
            attrs = _attrs(data, body + _IFINFOMSG.size, offset + length)
            name = attrs.get(IFLA_IFNAME, b"").split(b"\0", 1)[0][:16].decode("ascii", "replace")
            oper = attrs.get(IFLA_OPERSTATE, b"")
            changes = attrs.get(IFLA_CARRIER_CHANGES, b"")
            if name:
                links.append(LinkState(
                    index, name, bool(flags & IFF_UP and flags & IFF_RUNNING), bool(flags & IFF_UP),
                    OPERSTATES.get(oper[0], "unknown") if len(oper) >= 1 else "unknown",
                    struct.unpack("=I", changes[:4])[0] if len(changes) >= 4 else None,
                    bool(flags & IFF_LOOPBACK), kind == RTM_DELLINK))
        offset += _align(length)
    return links, done


def _socket(groups: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    sock.bind((0, groups))
    return sock


def dump(timeout: float = 5.0) -> list[LinkState]:
    """Every interface of this network namespace, now."""
    with _socket() as sock:
        request = _NLMSGHDR.pack(_NLMSGHDR.size + _IFINFOMSG.size, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP,
                                 1, 0) + _IFINFOMSG.pack(0, 0, 0, 0, 0)
        sock.sendto(request, (0, 0))
        out: list[LinkState] = []
        while True:
            ready, _, _ = select.select([sock], [], [], timeout)
            if not ready:
                raise TimeoutError("rtnetlink: no answer to the link dump")
            links, done = parse_link_messages(sock.recv(RECV_BYTES))
            out += links
            if done:
                return out


class LinkMonitor:
    """Link changes as they happen (the RTMGRP_LINK multicast group)."""

    def __init__(self) -> None:
        self.sock = _socket(RTMGRP_LINK)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self, timeout: float) -> list[LinkState]:
        """Changes that arrive within `timeout` seconds (whatever is queued, at least one read)."""
        out: list[LinkState] = []
        wait = timeout
        while True:
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                return out
            try:
                data = self.sock.recv(RECV_BYTES)
            except OSError:  # ENOBUFS: events were lost; the caller re-dumps on its next tick
                return out
            out += parse_link_messages(data)[0]
            wait = 0

    def close(self) -> None:
        self.sock.close()
