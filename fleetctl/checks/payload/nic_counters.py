"""NIC error counters as the tools print them, in one vocabulary (the sysfs names of an InfiniBand
port), with their widths, so that rates, saturation and bit error rates are judged one way whatever
the source: /sys/class/infiniband/*/ports/*/counters, `perfquery [-x]` (infiniband-diags) and the
physical-port counters of an mlx5 NIC in `ethtool -S` (`*_phy`).

Payload module: standard library only.
"""

from __future__ import annotations

import re
import time

# IBTA PortCounters widths (bits): a counter at its maximum has stopped counting (it saturates, it
# does not wrap), so its rate cannot be measured until the port's counters are reset. The 64-bit
# data and packet counters come from PortCountersExtended (sysfs reads those where the HCA has them).
IB_COUNTER_BITS = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16, "port_xmit_wait": 32,
}

# perfquery's field names -> the sysfs names.
PERFQUERY_NAMES = {
    "SymbolErrorCounter": "symbol_error", "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed", "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors", "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors", "VL15Dropped": "VL15_dropped",
    "PortXmitData": "port_xmit_data", "PortRcvData": "port_rcv_data", "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets", "PortXmitWait": "port_xmit_wait",
}

# mlx5 `ethtool -S` physical-port counters -> the same vocabulary (kernel Documentation/networking/
# device_drivers/ethernet/mellanox/mlx5/counters.rst). rx_pcs_symbol_err_phy counts the symbol errors
# FEC did not correct (the effective errors); rx_corrected_bits_phy the bits FEC corrected (raw BER).
MLX5_PHY_NAMES = {
    "rx_pcs_symbol_err_phy": "symbol_error", "link_down_events_phy": "link_downed",
    "rx_crc_errors_phy": "rx_crc_errors", "rx_symbol_err_phy": "rx_symbol_err_packets",
    "rx_corrected_bits_phy": "corrected_bits", "rx_bytes_phy": "rx_bytes_phy",
}

MAX_COUNTER = 2 ** 64 - 1
MAX_STATS_LINES = 20000  # `ethtool -S` of a 64-queue NIC prints a few thousand
_ETHTOOL_LINE = re.compile(r"^\s*([A-Za-z0-9_.\[\]:-]{1,96}):\s+(-?\d{1,20})\s*$")
_PERFQUERY_HEAD = re.compile(r"^#\s*Port (extended )?counters:\s*Lid\s+(\d+)\s+port\s+(\d+)", re.I)
_PERFQUERY_LINE = re.compile(r"^([A-Za-z0-9]+):\.*\s*(0x[0-9a-fA-F]+|\d+)\s*$")


def _number(text):
    value = int(text, 16) if text.lower().startswith("0x") else int(text)
    return value if 0 <= value <= MAX_COUNTER else None


def parse_ethtool_stats(text):
    """{name: value} of `ethtool -S NETDEV` (`     name: value` lines; other lines ignored)."""
    out = {}
    for line in (text or "").splitlines()[:MAX_STATS_LINES]:
        m = _ETHTOOL_LINE.match(line)
        if m:
            value = _number(m.group(2)) if not m.group(2).startswith("-") else None
            if value is not None:
                out[m.group(1)] = value
    return out


def mlx5_phy_counters(stats):
    """The physical-port counters of an mlx5 `ethtool -S`, renamed; {} for another driver's stats."""
    return {MLX5_PHY_NAMES[k]: v for k, v in stats.items() if k in MLX5_PHY_NAMES}


def parse_perfquery(text):
    """[{"lid", "port", "extended", "counters": {sysfs name: value}}] of `perfquery [-x]` output
    (one block per `# Port [extended] counters:` header)."""
    blocks = []
    for line in (text or "").splitlines()[:MAX_STATS_LINES]:
        line = line.strip()
        head = _PERFQUERY_HEAD.match(line)
        if head:
            blocks.append({"lid": int(head.group(2)), "port": int(head.group(3)),
                           "extended": bool(head.group(1)), "counters": {}})
            continue
        m = _PERFQUERY_LINE.match(line)
        if m and blocks and m.group(1) in PERFQUERY_NAMES:
            value = _number(m.group(2))
            if value is not None:
                blocks[-1]["counters"][PERFQUERY_NAMES[m.group(1)]] = value
    return blocks


def saturated(counters):
    """Names of the counters at the maximum of their width: stopped, their rate unknowable."""
    return sorted(name for name, bits in IB_COUNTER_BITS.items()
                  if counters.get(name) is not None and counters[name] >= 2 ** bits - 1)


def bit_error_rate(errors, rate_gbps, seconds, min_errors=3):
    """(errors / bits on the wire over `seconds` at `rate_gbps`, None) or (None, why not). Fewer
    than `min_errors` errors is no estimate: one error in a short window says little about a rate."""
    if not rate_gbps or seconds <= 0:
        return None, "link rate unknown"
    if errors < min_errors:
        return None, "%d errors in %.0f s: too few to estimate" % (errors, seconds)
    return errors / (rate_gbps * 1e9 * seconds), None


def simulated_stats_text(doc, netdev, now=None):
    """The lab's emulated `ethtool -S` text of `netdev` from its JSON document
    ({netdev: {"since": t, "values": {name: n}, "per_s": {name: r}}}): each counter grows at its rate
    from `since`, as a real NIC's would between two reads. Parsed by parse_ethtool_stats like ethtool's."""
    entry = doc.get(netdev) if isinstance(doc, dict) else None
    if not isinstance(entry, dict):
        return ""
    now = time.time() if now is None else now
    elapsed = max(0.0, now - float(entry.get("since") or now))
    lines = ["NIC statistics:"]
    per_s = entry.get("per_s") if isinstance(entry.get("per_s"), dict) else {}
    values = entry.get("values") if isinstance(entry.get("values"), dict) else {}
    for name in sorted(set(values) | set(per_s)):
        try:
            value = int(values.get(name, 0)) + int(float(per_s.get(name, 0)) * elapsed)
        except (TypeError, ValueError):
            continue
        lines.append("     %s: %d" % (name, value))
    return "\n".join(lines) + "\n"
