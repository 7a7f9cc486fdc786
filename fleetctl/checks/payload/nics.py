"""NIC checks from sysfs: InfiniBand/RoCE ports and Ethernet netdevs.

The sysfs root is a parameter (tests build trees in a temporary directory). An unreadable file makes
that one item an `error`, never a crash. Error counters are judged as rates: between two samples of
this run, and against the snapshot the previous run left in the node's state file (long window).
"""

from __future__ import annotations

import os
import re
import time

from fleetctl.checks.payload.common import (marked_simulated, number_or_none, read_or_none, result,  # payload-local
                                            run_cmd)  # payload-local
from fleetctl.checks.payload.netdev import (ETH_RATE_LIMITS, NetdevView, NicItemError, counter_dir,  # payload-local
                                            listdir_or_empty, read_item)  # payload-local
from fleetctl.checks.payload.nic_counters import (bit_error_rate, mlx5_phy_counters,  # payload-local
                                                  parse_ethtool_stats, saturated, simulated_stats_text)  # payload-local

# DOMAIN.md section 3. Any increase of these is fatal.
IB_FATAL_COUNTERS = ("link_downed", "local_link_integrity_errors", "excessive_buffer_overrun_errors")
IB_RATE_LIMITS = {"symbol_error": 10.0, "port_rcv_errors": 10.0, "port_xmit_discards": 100.0,
                  "rx_symbol_err_packets": 10.0}  # per s
IB_SYMBOL_ERRORS_PER_HOUR_FAIL = 120.0  # also NVSentinel's rule
EFFECTIVE_BER_WARN = 1e-12  # the IBTA link target; effective = after FEC (symbol errors)
FLAPS_PER_DAY_WARN = 2
LONG_WINDOW_MAX_S = 86400.0


def ib_rate_gbps(text):
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def pcie_speed_gts(text):
    m = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def nic_targets(args, view):
    """The NICs to check: the node class's list, else every IB device and every netdev but lo."""
    want = args.get("nics") or []
    if want:
        return want
    found = []
    for dev in sorted(listdir_or_empty(os.path.join(view.sysfs, "class/infiniband"))):
        found.append({"name": dev, "kind": "infiniband", "discovered": True})
    for dev in view.names():
        if dev != "lo":
            found.append({"name": dev, "kind": "ethernet", "discovered": True})
    return found


def sample_counters(targets, view, phy_stats=None):
    """{key: {counter: value}} for every counter of every target (IB ports and netdevs); a netdev's
    include its physical-port counters where `phy_stats(netdev)` gives them (mlx5 `ethtool -S`)."""
    sysfs = view.sysfs
    out = {}
    for nic in targets:
        if nic.get("kind") in ("infiniband", "roce"):
            base = os.path.join(sysfs, "class/infiniband", nic["name"], "ports")
            for port in sorted(listdir_or_empty(base)):
                cdir = os.path.join(base, port, "counters")
                out["%s/%s" % (nic["name"], port)] = counter_dir(cdir, None)
        netdev = nic["name"] if nic.get("kind", "ethernet") == "ethernet" else nic.get("netdev")
        if netdev and view.exists(netdev):
            out[netdev] = view.counters(netdev)
            out[netdev].update(phy_stats(netdev) if phy_stats else {})
    return out


class PhyStats:
    """The physical-port counters of a netdev: `ethtool -S` of an mlx5 NIC (other drivers' names
    differ and are not read), or the lab's emulated counters (checks.simulated_nic_stats)."""

    def __init__(self, args, view, deadline):
        self.view, self.deadline, self.doc = view, deadline, None
        path = args.get("simulated_nic_stats") or ""
        if path:
            import json

            try:
                with open(path) as f:
                    self.doc = json.loads(f.read(1 << 20))
            except (OSError, ValueError):
                self.doc = {}

    @property
    def simulated(self):
        return bool(self.doc)

    def __call__(self, netdev):
        if self.doc is not None:
            return mlx5_phy_counters(parse_ethtool_stats(simulated_stats_text(self.doc, netdev)))
        if self.view.links is not None or _driver(self.view.sysfs, netdev) != "mlx5_core":
            return {}
        rc, out, _ = run_cmd(["ethtool", "-S", netdev], self.deadline, timeout=2)
        return mlx5_phy_counters(parse_ethtool_stats(out)) if rc == 0 else {}


def _driver(sysfs, netdev):
    try:
        return os.path.basename(os.readlink(os.path.join(sysfs, "class/net", netdev, "device/driver")))
    except OSError:
        return ""


def counter_rates(before, after, seconds):
    """{counter: (delta, per_second)} for counters read in both samples; a wrap or reset reads as 0."""
    out = {}
    for name, v1 in after.items():
        v0 = before.get(name)
        if v0 is None or v1 is None or seconds <= 0:
            continue
        delta = max(0, v1 - v0)
        out[name] = (delta, delta / seconds)
    return out


def judge_counter_rates(key, rates, window_s, long_window, link_gbps=None, evidence=None):
    """-> [(status, text)] for one port or netdev's counter deltas over window_s; the effective bit
    error rate (symbol errors over the bits the link carried) goes into `evidence` when it can be
    estimated, and is judged then."""
    bad = []
    for name in IB_FATAL_COUNTERS:
        if rates.get(name, (0, 0))[0] > 0:
            bad.append(("fail", "%s rose by %d" % (name, rates[name][0])))
    recoveries = rates.get("link_error_recovery", (0, 0))[0]
    if recoveries > 0:
        bad.append(("warn", "link_error_recovery rose by %d (the link retrained)" % recoveries))
    if "symbol_error" in rates:
        ber, why = bit_error_rate(rates["symbol_error"][0], link_gbps, window_s)
        if evidence is not None:
            evidence["effective_ber" if long_window else "effective_ber_short"] = ber if ber is not None else why
        if ber is not None and ber > EFFECTIVE_BER_WARN:
            bad.append(("warn", "effective BER %.1e over %.0f s (limit %g)" % (ber, window_s, EFFECTIVE_BER_WARN)))
    if "corrected_bits" in rates and evidence is not None and link_gbps:
        evidence["raw_ber" if long_window else "raw_ber_short"] = \
            rates["corrected_bits"][0] / (link_gbps * 1e9 * window_s)
    for name, limit in list(IB_RATE_LIMITS.items()) + list(ETH_RATE_LIMITS.items()):
        if name in rates and rates[name][1] > limit:
            bad.append(("warn", "%s at %.1f/s (limit %g/s)" % (name, rates[name][1], limit)))
    sym = rates.get("symbol_error")
    if long_window and sym and window_s >= 60 and sym[1] * 3600 > IB_SYMBOL_ERRORS_PER_HOUR_FAIL:
        bad.append(("fail", "symbol_error at %.0f/h (limit %g/h)" % (sym[1] * 3600,
                                                                      IB_SYMBOL_ERRORS_PER_HOUR_FAIL)))
    flaps = rates.get("carrier_changes")
    if flaps and flaps[0] > 0:
        if not long_window:
            bad.append(("warn", "carrier changed %d times during the check" % flaps[0]))
        elif flaps[0] * 86400.0 / max(window_s, 86400.0) > FLAPS_PER_DAY_WARN:
            bad.append(("warn", "flapping: carrier changed %d times in %.1f h" % (flaps[0], window_s / 3600)))
    return bad


def check_nics(args, deadline, state):
    """Link state, rate, MTU, firmware, PCIe per NIC; then counters sampled twice (standard level)."""
    sysfs = args.get("sysfs_root") or "/sys"
    try:
        view = NetdevView(sysfs, deadline)
    except NicItemError as exc:
        return [result("nic.netdev", "error", str(exc))], {}
    targets = nic_targets(args, view)
    out = []
    facts = {}
    for nic in targets:
        facts[nic["name"]] = {}
        if nic.get("kind") in ("infiniband", "roce"):
            out.extend(_check_ib(nic, sysfs, facts[nic["name"]], deadline))
        if nic.get("kind", "ethernet") == "ethernet" or nic.get("netdev"):
            out.extend(_check_netdev(nic, view, facts[nic["name"]], deadline))
    out.extend(_check_counters(args, targets, view, deadline, state, facts))
    return out, facts


def _item(code, nic, fn):
    """Run one item; an unreadable sysfs file makes it an error result for that NIC only."""
    try:
        return fn()
    except NicItemError as exc:
        return [result(code, "error", str(exc), subject=nic["name"])]


def _check_ib(nic, sysfs, facts, deadline):
    name = nic["name"]
    dev = os.path.join(sysfs, "class/infiniband", name)
    if not os.path.isdir(dev):
        return [result("nic.present", "fail", "InfiniBand device %s not found" % name, "inspect-hardware",
                       subject=name)]
    out = []
    ports = sorted(listdir_or_empty(os.path.join(dev, "ports")))

    def link():
        res = []
        for port in ports:
            p = os.path.join(dev, "ports", port)
            state, phys, rate = read_item(p + "/state"), read_item(p + "/phys_state"), read_item(p + "/rate")
            layer = read_or_none(p + "/link_layer")
            gbps = ib_rate_gbps(rate)
            ev = {"state": state, "phys_state": phys, "rate": rate, "link_layer": layer,
                  "expected_gbps": nic.get("rate_gbps") or None}
            facts.setdefault("ports", {})[port] = {"rate_gbps": gbps, "link_layer": layer}
            subject = "%s/%s" % (name, port)
            if ("ACTIVE" not in state or "LinkUp" not in phys) and nic.get("discovered"):
                res.append(result("nic.link", "skipped", "%s is %s (not listed in the site file)"
                                  % (subject, state), evidence=ev, subject=subject))
            elif "ACTIVE" not in state or "LinkUp" not in phys:
                res.append(result("nic.link", "fail", "%s is %s (%s)" % (subject, state, phys),
                                  "inspect-hardware", ev, subject))
            elif nic.get("rate_gbps") and gbps is not None and gbps < nic["rate_gbps"]:
                res.append(result("nic.link", "fail", "%s at %g Gb/s, expected %g" % (
                    subject, gbps, nic["rate_gbps"]), "inspect-hardware", ev, subject))
            else:
                res.append(result("nic.link", "ok", "%s %s at %s" % (subject, state, rate), evidence=ev,
                                  subject=subject))
        return res or [result("nic.link", "fail", "%s has no ports" % name, "inspect-hardware",
                              subject=name)]

    def firmware():
        fw = read_item(dev + "/fw_ver")
        facts["firmware"] = fw
        return [_firmware_result(nic, fw)]

    out.extend(_item("nic.link", nic, link))
    out.extend(_item("nic.firmware", nic, firmware))
    out.extend(_item("nic.pcie", nic, lambda: [_pcie_result(nic, dev + "/device", facts)]))
    return out


def _firmware_result(nic, fw):
    want = nic.get("firmware") or ""
    ev = {"firmware": fw, "expected": want or None}
    if want and fw != want:
        return result("nic.firmware", "warn", "firmware %s, expected %s" % (fw, want), "drain", ev,
                      nic["name"])
    return result("nic.firmware", "ok", "firmware %s" % fw, evidence=ev, subject=nic["name"])


def _pcie_result(nic, devdir, facts):
    if not os.path.exists(devdir + "/current_link_width"):
        return result("nic.pcie", "skipped", "no PCIe device behind %s (virtual NIC)" % nic["name"],
                      subject=nic["name"])
    width, max_width = number_or_none(read_item(devdir + "/current_link_width")), \
        number_or_none(read_item(devdir + "/max_link_width"))
    speed = pcie_speed_gts(read_item(devdir + "/current_link_speed"))
    max_speed = pcie_speed_gts(read_item(devdir + "/max_link_speed"))
    ev = {"width": width, "max_width": max_width, "speed_gts": speed, "max_speed_gts": max_speed}
    facts["pcie"] = ev
    if width is not None and max_width and width < max_width:
        return result("nic.pcie", "fail", "PCIe x%s of x%s" % (width, max_width), "inspect-hardware", ev,
                      nic["name"])
    if speed is not None and max_speed and speed < max_speed:
        return result("nic.pcie", "warn", "PCIe %g GT/s of %g GT/s" % (speed, max_speed),
                      "inspect-hardware", ev, nic["name"])
    return result("nic.pcie", "ok", "PCIe x%s at %s GT/s" % (width, speed), evidence=ev, subject=nic["name"])


def _check_netdev(nic, view, facts, deadline):
    netdev = nic["name"] if nic.get("kind", "ethernet") == "ethernet" else nic["netdev"]
    if not view.exists(netdev):
        return [result("nic.present", "fail", "network interface %s not found" % netdev,
                       "inspect-hardware", subject=nic["name"])]
    dev = os.path.join(view.sysfs, "class/net", netdev)

    def link():
        oper = view.attr(netdev, "operstate")
        if oper == "unknown" and view.attr(netdev, "carrier"):
            oper = "up"  # loopback and some virtual drivers never set an operstate: carrier says up
        speed = view.attr(netdev, "speed")
        gbps = speed / 1000.0 if speed else None
        ev = {"operstate": oper, "speed_mbps": speed, "expected_gbps": nic.get("rate_gbps") or None,
              "source": view.source}
        facts["rate_gbps"] = gbps
        if oper != "up" and nic.get("discovered"):  # not in the site file: a down port may be unused
            return [result("nic.link", "skipped", "%s is %s (not listed in the site file)" % (netdev, oper),
                           evidence=ev, subject=nic["name"])]
        if oper != "up":
            return [result("nic.link", "fail", "%s is %s" % (netdev, oper), "inspect-hardware", ev,
                           nic["name"])]
        if nic.get("rate_gbps") and gbps is not None and gbps < nic["rate_gbps"]:
            return [result("nic.link", "fail", "%s at %g Gb/s, expected %g" % (netdev, gbps, nic["rate_gbps"]),
                           "inspect-hardware", ev, nic["name"])]
        note = "" if gbps else ", speed unknown (virtual NIC): rate not judged"
        return [result("nic.link", "ok", "%s up%s" % (netdev, " at %g Gb/s" % gbps if gbps else note),
                       evidence=ev, subject=nic["name"])]

    def mtu():
        value = view.attr(netdev, "mtu")
        facts["mtu"] = value
        want = nic.get("mtu") or 0
        ev = {"mtu": value, "expected": want or None}
        if want and value != want:
            return [result("nic.mtu", "fail", "%s MTU %s, expected %s" % (netdev, value, want), "drain", ev,
                           nic["name"])]
        return [result("nic.mtu", "ok", "%s MTU %s" % (netdev, value), evidence=ev, subject=nic["name"])]

    out = _item("nic.link", nic, link) + _item("nic.mtu", nic, mtu)
    if nic.get("kind", "ethernet") == "ethernet" and view.links is None:
        out += _item("nic.pcie", nic, lambda: [_pcie_result(nic, dev + "/device", facts)])
        fw = _ethtool_firmware(netdev, deadline)
        if fw is not None:
            facts["firmware"] = fw
            out.append(_firmware_result(nic, fw))
    return out


def _ethtool_firmware(netdev, deadline):
    rc, out, _ = run_cmd(["ethtool", "-i", netdev], deadline, timeout=2)
    if rc != 0:
        return None
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "firmware-version":
            value = value.strip()
            return value if value and value != "N/A" else None
    return None


def _link_rates(targets, facts):
    """{counter key: link rate in Gb/s} from what the link checks read, else the site file's rate."""
    rates = {}
    for nic in targets:
        f = facts.get(nic["name"]) or {}
        for port, info in (f.get("ports") or {}).items():
            rates["%s/%s" % (nic["name"], port)] = info.get("rate_gbps") or nic.get("rate_gbps")
        netdev = nic["name"] if nic.get("kind", "ethernet") == "ethernet" else nic.get("netdev")
        if netdev:
            rates[netdev] = f.get("rate_gbps") or nic.get("rate_gbps")
    return rates


def _check_counters(args, targets, view, deadline, state, facts):
    interval = float(args.get("counter_interval_s") or 0)
    phy = PhyStats(args, view, deadline)
    first = sample_counters(targets, view, phy)
    now = time.time()
    snap = state.get("counters") or {}
    short = None
    if interval > 0 and deadline.left() > interval + 0.5:
        time.sleep(interval)
        second = sample_counters(targets, view, phy)
        short = (first, second, interval)
        first, now = second, time.time()
    same_boot = snap.get("boot_id") == args.get("boot_id")
    age = now - snap.get("time", 0)
    state["counters"] = {"boot_id": args.get("boot_id"), "time": now, "values": first}
    link_gbps = _link_rates(targets, facts)
    out = []
    for key in sorted(first):
        earlier = snap.get("values", {}).get(key) if same_boot and 0 < age <= LONG_WINDOW_MAX_S else None
        out.append(_judge_key(key, first[key], short, earlier, age, link_gbps.get(key)))
    return marked_simulated(out, phy.simulated)


def _judge_key(key, values, short, earlier, age, link_gbps):
    """One port's or netdev's counters: the short window (two reads of this run), the long one (the
    previous run's snapshot); a counter saturated in any read is left out of the rates and named."""
    stuck = saturated(values)
    ev, bad = {"values": values}, []
    windows = []
    if short:
        windows.append((short[0].get(key, {}), short[1].get(key, {}), short[2], False))
        ev["short_window_s"] = short[2]
    if earlier is not None:
        windows.append((earlier, values, age, True))
        ev["long_window_s"] = round(age, 1)
    for before, after, seconds, long_window in windows:
        stuck = sorted(set(stuck) | set(saturated(before)))
        rates = {n: r for n, r in counter_rates(before, after, seconds).items() if n not in stuck}
        bad += judge_counter_rates(key, rates, seconds, long_window, link_gbps, ev)
    note = ""
    if stuck:
        ev["saturated"] = stuck
        note = "; %s saturated (stopped counting): not measured until the port's counters are reset" \
            % ", ".join(stuck)
    if not windows:
        return result("nic.counters", "skipped", "%s: one sample, no earlier snapshot: rates judged at the "
                      "standard level or the next run%s" % (key, note), evidence=ev, subject=key)
    if bad:
        status = "fail" if any(s == "fail" for s, _ in bad) else "warn"
        return result("nic.counters", status, "%s: %s%s" % (key, "; ".join(t for _, t in bad), note),
                      "inspect-hardware", ev, key)
    return result("nic.counters", "ok", "%s: error counters steady%s" % (key, note), evidence=ev, subject=key)
