"""Jump-host helpers for the ssh transport: parsing `[user@]host[:port]`, and keeping the bastion's
reason when it refuses a direct-tcpip channel."""

from __future__ import annotations

import threading

from fleetctl.errors import TransportError


def parse_jump_host(text: str, default_user: str) -> tuple[str, str, int]:
    """`[user@]host[:port]` -> (user, host, port)."""
    user, _, hostport = text.rpartition("@")
    host, sep, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "22")
    if not sep:
        host = hostport
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TransportError(f"invalid jump host {text!r}: expected [user@]host[:port]")
    return user or default_user, host, int(port)


class OpenFailureReasons:
    """Keeps the jump server's reason for each refused direct-tcpip channel ("Connection refused",
    "No route to host"): paramiko raises only the generic text of the code ("Connect failed").
    Uses paramiko's per-instance handler table (meant for such twiddling) and notes, per thread,
    the channel id our open_channel call allocated; without these hooks it reports nothing."""

    def __init__(self, t):
        from paramiko import Message, common

        self._reasons: dict[int, str] = {}  # channel id -> "Connection refused (Connect failed)"
        self._local = threading.local()
        try:
            table, allocate = t._handler_table, t._next_channel
            original = table[common.MSG_CHANNEL_OPEN_FAILURE]
        except (AttributeError, KeyError):
            return

        def next_channel():
            self._local.chanid = chanid = allocate()
            return chanid

        def open_failure(m):
            try:
                peek = Message(m.get_remainder())
                chanid, code, reason = peek.get_int(), peek.get_int(), peek.get_text()
                generic = common.CONNECTION_FAILED_CODE.get(code, f"code {code}")
                self._reasons[chanid] = f"{reason} ({generic})" if reason != generic else reason
            finally:
                original(m)

        t._next_channel = next_channel
        table[common.MSG_CHANNEL_OPEN_FAILURE] = open_failure

    def last(self) -> str:
        """The reason given for the channel this thread last tried to open."""
        chanid = getattr(self._local, "chanid", None)
        return self._reasons.pop(chanid, "") if chanid is not None else ""
