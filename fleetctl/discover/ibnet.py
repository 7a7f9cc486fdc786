"""Parse `ibnetdiscover` output into InfiniBand switches, channel adapters and cables.

    switchguid=0x8f10500200b50(8f10500200b50)
    Switch  36 "S-0008f10500200b50"   # "Voltaire 4036 - 36 QDR ports switch" enhanced port 0 lid 9 lmc 0
    [1]     "S-0008f10500108c5c"[15]  # "Voltaire 4036 # 4036-8C5C" lid 16 4xQDR
    [4]     "H-003048c749cd0000"[1](3048c749cd0001)  # "MT25408 ConnectX Mellanox Technologies" lid 72 4xDDR
    Ca      2 "H-003048c749cd0000"    # "gpu001 mlx5_0"
    [1](3048c749cd0001)  "S-0008f10500200b50"[4]  # lid 72 lmc 0 "Voltaire 4036 ..." lid 9 4xDDR

Every cable appears twice (once from each end); it is kept once. A node-name map (the
`--node-name-map` file of ibnetdiscover: `GUID name` per line) names devices whose description does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetctl.errors import DataError

MAX_IBNET_BYTES = 64 * 2**20  # a 10,000-node fabric's topology file is about 10 MiB
MAX_DEVICES = 200_000

# Every number and GUID bounded in the pattern (a port is 1..255, a LID 16 bits, a GUID 64 bits): a
# line with 5,000 digits is not ibnetdiscover output, and never reaches int() (a ValueError there).
_HEAD = re.compile(r'^(Switch|Ca|Rt)\s+(\d{1,3})\s+"([SHR]-[0-9a-fA-F]{1,16})"\s*(?:#\s*"((?:[^"\\]|\\.)*)")?(.*)$')
_PORT = re.compile(r'^\[(\d{1,3})\](?:\(([0-9a-fA-F]{1,16})\))?\s+"([SHR]-[0-9a-fA-F]{1,16})"\[(\d{1,3})\]'
                   r'(?:\(([0-9a-fA-F]{1,16})\))?\s*(?:#\s*(.*))?$')
_LID = re.compile(r"\blid (\d{1,5})\b")
_WIDTH_SPEED = re.compile(r"\b(\d{1,2})x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\b")
# Data rate per lane in Gb/s (InfiniBand Architecture Specification, after 8b/10b or 64b/66b coding).
LANE_GBPS = {"SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0, "FDR": 13.64, "EDR": 25.0, "HDR": 50.0,
             "NDR": 100.0, "XDR": 200.0}


@dataclass
class IbDevice:
    kind: str  # switch | ca | router
    guid: str  # node GUID, 16 hex digits, as in "S-<guid>"
    ports: int
    description: str = ""
    lid: int | None = None
    port_guids: dict[int, str] = field(default_factory=dict)  # CA port -> port GUID

    @property
    def token(self) -> str:
        return {"switch": "S", "ca": "H", "router": "R"}[self.kind] + "-" + self.guid


@dataclass(frozen=True)
class IbCable:
    a_guid: str
    a_port: int
    b_guid: str
    b_port: int
    rate_gbps: float = 0.0  # width x lane rate, 0 when not printed


@dataclass
class IbFabric:
    devices: dict[str, IbDevice] = field(default_factory=dict)  # by node GUID
    cables: list[IbCable] = field(default_factory=list)

    @property
    def switches(self) -> list[IbDevice]:
        return [d for d in self.devices.values() if d.kind == "switch"]

    @property
    def cas(self) -> list[IbDevice]:
        return [d for d in self.devices.values() if d.kind == "ca"]


def _guid(text: str) -> str:
    return text.lower().zfill(16)[-16:]


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover output") -> IbFabric:
    if len(text) > MAX_IBNET_BYTES:
        raise DataError(f"{source}: larger than {MAX_IBNET_BYTES // 2**20} MiB")
    fabric = IbFabric()
    seen: set[tuple[str, int]] = set()
    current: IbDevice | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head = _HEAD.match(line)
        if head:
            kind = {"Switch": "switch", "Ca": "ca", "Rt": "router"}[head.group(1)]
            guid = _guid(head.group(3)[2:])
            lid = _LID.search(head.group(5) or "")
            current = fabric.devices.get(guid) or IbDevice(kind, guid, int(head.group(2)))
            current.description = head.group(4) or current.description
            if lid and kind == "switch":
                current.lid = int(lid.group(1))
            fabric.devices[guid] = current
            if len(fabric.devices) > MAX_DEVICES:
                raise DataError(f"{source}: more than {MAX_DEVICES:,} devices")
            continue
        port = _PORT.match(line)
        if port:
            if current is None:
                raise DataError(f"{source}:{number}: a port line before any Switch/Ca line")
            local, remote_guid, remote_port = int(port.group(1)), _guid(port.group(3)[2:]), int(port.group(4))
            if port.group(2):
                current.port_guids[local] = _guid(port.group(2))
            comment = port.group(6) or ""
            if current.kind == "ca":
                lid = _LID.search(comment)
                if lid and current.lid is None:
                    current.lid = int(lid.group(1))
            ws = _WIDTH_SPEED.findall(comment)
            rate = int(ws[-1][0]) * LANE_GBPS[ws[-1][1]] if ws else 0.0
            key_a, key_b = (current.guid, local), (remote_guid, remote_port)
            if key_a in seen or key_b in seen:
                continue
            seen.update((key_a, key_b))
            fabric.cables.append(IbCable(current.guid, local, remote_guid, remote_port, round(rate, 2)))
            continue
        if "=" in line and re.match(r"^[a-z]+guid=|^vendid=|^devid=|^caguid=|^sysimgguid=|^rtguid=", line):
            continue
        if line.startswith(("Non-Chassis Nodes", "Chassis")):
            continue
        raise DataError(f"{source}:{number}: not ibnetdiscover output: {line[:80]!r}")
    for cable in fabric.cables:  # a cable to a device never listed itself: the output is cut
        for guid in (cable.a_guid, cable.b_guid):
            if guid not in fabric.devices:
                raise DataError(f"{source}: cable to device {guid} which the output never lists "
                                "(truncated output?)")
    return fabric


def parse_node_name_map(text: str, source: str = "node-name map") -> dict[str, str]:
    """`0x0002c90300080d28 name` or `H-0002c90300080d28 name` per line -> {guid: name}."""
    out = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        token = parts[0]
        token = token[2:] if token[:2] in ("S-", "H-", "R-") or token[:2].lower() == "0x" else token
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-fA-F]{1,16}", token):
            raise DataError(f"{source}:{number}: expected `GUID name`: {raw[:80]!r}")
        out[_guid(token)] = parts[1].strip().strip('"')
    return out
