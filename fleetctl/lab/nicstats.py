"""The lab's emulated physical-port counters of each host NIC, as an mlx5 NIC's `ethtool -S` names
them (docs/lab.md, "NIC error counters"). The lab's veths have no such counters; the node checks read
this file instead of running `ethtool -S` (checks.simulated_nic_stats) and parse the text it stands
for with the same parser. A fault makes a counter grow at a rate from the time it is added; clearing
it stops the growth and keeps the count, as a repaired link keeps its counters until they are reset."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fleetctl.lab.gpusim import host_dir

COUNTERS = ("rx_pcs_symbol_err_phy", "rx_corrected_bits_phy", "rx_crc_errors_phy", "link_down_events_phy")
FILE = "nicstats.json"


def path(lab: Path, node: str) -> Path:
    return host_dir(lab, node) / FILE


def write_host(lab: Path, node: str, netdevs: list[str]) -> None:
    """Every NIC of a clean host: all counters 0, none growing."""
    now = time.time()
    _save(path(lab, node), {dev: {"since": now, "values": {c: 0 for c in COUNTERS}, "per_s": {}}
                            for dev in netdevs})


def _load(p: Path) -> dict:
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _save(p: Path, doc: dict) -> None:
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, p)


def _settle(entry: dict, now: float) -> None:
    """Fold the growth so far into the values, from `now` on."""
    elapsed = max(0.0, now - float(entry.get("since") or now))
    values = entry.setdefault("values", {})
    for name, rate in (entry.get("per_s") or {}).items():
        values[name] = int(values.get(name, 0)) + int(float(rate) * elapsed)
    entry["since"] = now


def set_rate(lab: Path, node: str, netdev: str, per_s: dict[str, float]) -> None:
    """Counters of `netdev` grow at `per_s` from now (an empty dict stops them)."""
    p = path(lab, node)
    doc = _load(p)
    entry = doc.setdefault(netdev, {"since": time.time(), "values": {c: 0 for c in COUNTERS}, "per_s": {}})
    _settle(entry, time.time())
    entry["per_s"] = dict(per_s)
    _save(p, doc)
