"""Parse lldpd's `lldpcli -f json show neighbors` (and `-f json0`) into neighbour records.

lldpd's JSON has several shapes for the same facts: `interface` is an object when there is one
interface and a list of one-key objects when there are several; `chassis` is keyed by the system
name, or holds `id` directly when the neighbour sent no name; `-f json0` wraps every value in a list
of objects with `value`. Everything here is untrusted input (it comes from nodes and switches):
sizes are bounded and anything unexpected is a DataError naming the source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fleetctl.errors import DataError

MAX_LLDP_BYTES = 8 * 2**20  # one device's neighbour table; a 64-port switch's is about 100 KiB
MAX_NEIGHBOURS = 4096  # per device
MAX_NAME = 255


@dataclass(frozen=True)
class Neighbour:
    """One LLDP neighbour seen on a local interface."""

    local_port: str  # the interface of the device that ran lldpcli
    system_name: str  # the neighbour's chassis name ("" when it sent none)
    chassis_id: str  # usually a MAC address
    port_id: str  # the neighbour's port id (an ifname, a MAC or a local name: see port_id_type)
    port_id_type: str = ""
    port_descr: str = ""
    mgmt_ips: tuple[str, ...] = field(default_factory=tuple)

    @property
    def port(self) -> str:
        """The neighbour's port name: the port id when it is an interface name, else its description
        (lldpd sends the interface name there when the id is a MAC), else the id."""
        if self.port_id_type in ("ifname", "local") or not self.port_descr:
            return self.port_id
        return self.port_descr


def parse_neighbours(text: str, source: str = "lldpcli output") -> list[Neighbour]:
    if len(text) > MAX_LLDP_BYTES:
        raise DataError(f"{source}: LLDP output larger than {MAX_LLDP_BYTES // 2**20} MiB")
    try:
        doc = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{source}: not lldpcli JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise DataError(f"{source}: not lldpcli JSON (top level is not an object)")
    lldp = _unwrap(doc.get("lldp"))
    if lldp in (None, {}):
        return []
    if not isinstance(lldp, dict):
        raise DataError(f"{source}: `lldp` is not an object")
    out = []
    for name, body in _interfaces(lldp.get("interface"), source):
        out.append(_neighbour(name, body, source))
        if len(out) > MAX_NEIGHBOURS:
            raise DataError(f"{source}: more than {MAX_NEIGHBOURS} LLDP neighbours")
    return out


def _unwrap(value):
    """json0 wraps single values in [{"value": ...}] or [{...}]; take the first element."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return value[0]
    return value


def _interfaces(value, source):
    """(interface name, body) pairs from the object form, the list-of-one-key-objects form (json)
    or the list-of-objects-with-name form (json0)."""
    if value is None:
        return
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise DataError(f"{source}: `lldp.interface` is neither an object nor a list")
    for item in items:
        if not isinstance(item, dict):
            raise DataError(f"{source}: an LLDP interface entry is not an object")
        if "name" in item and isinstance(item.get("chassis"), list):  # json0
            yield _text(item["name"], source), item
            continue
        for name, body in item.items():
            if not isinstance(body, dict):
                raise DataError(f"{source}: LLDP interface {str(name)[:40]!r} is not an object")
            yield _text(name, source), body


def _text(value, source) -> str:
    value = _unwrap(value)
    if isinstance(value, dict):
        value = value.get("value", "")
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DataError(f"{source}: an LLDP field is not text")
    text = str(value)
    if len(text) > MAX_NAME:
        raise DataError(f"{source}: an LLDP field longer than {MAX_NAME} characters")
    try:  # a lone surrogate ("\ud800" in the JSON) cannot go into the site file
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{source}: an LLDP field is not valid Unicode") from None
    return text


def _neighbour(local: str, body: dict, source: str) -> Neighbour:
    chassis = _unwrap(body.get("chassis")) or {}
    if not isinstance(chassis, dict):
        raise DataError(f"{source}: LLDP chassis of {local!r} is not an object")
    name = ""
    if "name" in chassis:  # json0
        name = _text(chassis["name"], source)
        details = chassis
    elif "id" in chassis:  # json, no system name sent
        details = chassis
    elif len(chassis) == 1:  # json: keyed by the system name
        name, details = next(iter(chassis.items()))
        name = _text(name, source)
        if not isinstance(details, dict):
            raise DataError(f"{source}: LLDP chassis {name!r} is not an object")
    else:
        details = {}
    port = _unwrap(body.get("port")) or {}
    if not isinstance(port, dict):
        raise DataError(f"{source}: LLDP port of {local!r} is not an object")
    pid = _unwrap(port.get("id")) or {}
    if not isinstance(pid, dict):
        pid = {"value": pid}
    cid = _unwrap(details.get("id")) or {}
    if not isinstance(cid, dict):
        cid = {"value": cid}
    mgmt = details.get("mgmt-ip") or []
    mgmt = mgmt if isinstance(mgmt, list) else [mgmt]
    return Neighbour(
        local_port=local, system_name=name, chassis_id=_text(cid.get("value"), source),
        port_id=_text(pid.get("value"), source), port_id_type=_text(pid.get("type"), source),
        port_descr=_text(port.get("descr"), source),
        mgmt_ips=tuple(_text(m, source) for m in mgmt[:16]))
