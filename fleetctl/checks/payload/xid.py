"""Xid errors from the kernel log: parse lines of every common prefix, judge by a policy table,
de-duplicate floods, escalate reboot-recoverable Xids that keep coming back across reboots."""

from __future__ import annotations

import calendar
import os
import re
import time

from fleetctl.checks.payload.common import read_or_none, result, run_cmd, worst_status  # payload-local

# NVIDIA's Xid catalog actions (DOMAIN.md section 3): xid -> (status, action, reboot-recoverable, what).
XID_POLICY = {
    13: ("warn", "restart-app", False, "graphics engine exception"),
    31: ("warn", "restart-app", False, "GPU memory page fault"),
    43: ("warn", "restart-app", False, "GPU stopped processing"),
    45: ("ok", "none", False, "preemptive cleanup after another error"),
    48: ("fail", "reset-gpu", True, "double-bit ECC error"),
    62: ("fail", "reset-gpu", True, "internal micro-controller halt"),
    63: ("ok", "none", False, "row remapping recorded (catalog: informational)"),
    64: ("fail", "reset-gpu", True, "row remapping failure"),
    74: ("fail", "reset-gpu", True, "NVLink error"),
    79: ("fail", "reboot", True, "GPU has fallen off the bus"),
    92: ("ok", "none", False, "high single-bit ECC rate (catalog: informational)"),
    94: ("warn", "restart-app", False, "contained ECC error"),
    95: ("fail", "reset-gpu", True, "uncontained ECC error"),
    119: ("fail", "reset-gpu", True, "GSP RPC timeout"),
    120: ("fail", "reset-gpu", True, "GSP error"),
    140: ("fail", "reset-gpu", True, "unrecovered ECC error"),
    143: ("fail", "reset-gpu", True, "GPU initialization failure"),
}
UNKNOWN_XID = ("warn", "inspect-hardware", False, "Xid not in the policy table")

XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
                    r"(?:\.[0-9A-Fa-f])?)\): (?P<xid>\d+)(?:, (?P<rest>.*))?$")
PID_RE = re.compile(r"^pid=(?P<pid>'[^']*'|\S+?), name=(?P<name>.*?), (?P<text>.*)$")
# Prefixes before "NVRM:": kmsg record, dmesg [uptime], ISO (dmesg --time-format iso, journal, rsyslog),
# classic syslog "Nov 29 15:50:01 host kernel:".
KMSG_RE = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
UPTIME_RE = re.compile(r"\[\s*(?P<sec>\d+\.\d+)\]")
ISO_RE = re.compile(r"^(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
                    r"(?P<tz>Z|[+-]\d\d:?\d\d)?")
SYSLOG_RE = re.compile(r"^(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d+) (?P<time>\d\d:\d\d:\d\d) ")
MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep",
                                      "Oct", "Nov", "Dec"), 1)}
MAX_LOG_BYTES = 64 << 20  # read at most the last 64 MiB of a kernel-log file


def boot_epoch():
    uptime = read_or_none("/proc/uptime")
    return time.time() - float(uptime.split()[0]) if uptime else None


def line_time(prefix, boot):
    """Epoch seconds of a log line from the text before 'NVRM:', or None when it has no time."""
    m = KMSG_RE.match(prefix)
    if m:
        return None if boot is None else boot + int(m.group("usec")) / 1e6
    m = ISO_RE.match(prefix)
    if m:
        secs = calendar.timegm(time.strptime(m.group("date") + " " + m.group("time"), "%Y-%m-%d %H:%M:%S"))
        tz = m.group("tz")
        if tz and tz != "Z":
            sign = -1 if tz[0] == "+" else 1
            secs += sign * (int(tz[1:3]) * 3600 + int(tz[-2:]) * 60)
        return secs + float("0." + m.group("frac")) if m.group("frac") else secs
    m = UPTIME_RE.search(prefix)  # also after a syslog prefix: the uptime stamp is the precise one
    if m:
        return None if boot is None else boot + float(m.group("sec"))
    m = SYSLOG_RE.match(prefix)
    if m:  # no year and local time: assume this year, or last year if that lands in the future
        now = time.localtime()
        h, mi, s = (int(x) for x in m.group("time").split(":"))
        t = time.mktime((now.tm_year, MONTHS[m.group("mon")], int(m.group("day")), h, mi, s, 0, 0, -1))
        return t if t <= time.time() + 86400 else time.mktime(
            (now.tm_year - 1, MONTHS[m.group("mon")], int(m.group("day")), h, mi, s, 0, 0, -1))
    return None


def parse_xid_lines(lines, since=None, boot=None):
    """-> (events, stats). An event: {xid, pci, time, pid, name, text}. Lines that mention an Xid but
    cannot be parsed (truncated, corrupt) are counted, not raised."""
    events, stats = [], {"lines": 0, "xid_lines": 0, "unparsed": 0, "untimed": 0, "before_since": 0}
    for raw in lines:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        stats["lines"] += 1
        at = line.find("NVRM: Xid")
        if at < 0:
            continue
        stats["xid_lines"] += 1
        m = XID_RE.search(line, at)
        if not m:
            stats["unparsed"] += 1
            continue
        when = line_time(line[:at], boot)
        if when is None:
            stats["untimed"] += 1
            if since is not None:
                continue
        elif since is not None and when < since:
            stats["before_since"] += 1
            continue
        rest = m.group("rest") or ""
        p = PID_RE.match(rest)
        events.append({"xid": int(m.group("xid")), "pci": m.group("pci").lower(), "time": when,
                       "pid": p.group("pid").strip("'") if p else None,
                       "name": p.group("name") if p else None, "text": (p.group("text") if p else rest)})
    return events, stats


def read_kernel_log(args, deadline):
    """-> (lines, source). The path override (lab, tests) first, else /dev/kmsg, journal, dmesg."""
    path = args.get("kernel_log")
    if path:
        with open(path, "rb") as f:  # an OSError here becomes this check's error result
            size = os.fstat(f.fileno()).st_size
            if size > MAX_LOG_BYTES:
                f.seek(size - MAX_LOG_BYTES)
                f.readline()  # drop the partial first line
            return f.read().splitlines(), path
    lines = _read_kmsg()
    if lines is not None:
        return lines, "/dev/kmsg"
    since = args.get("since")
    cmd = ["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso-precise"]
    if since:
        cmd.append("--since=@%d" % int(since))
    rc, out, _ = run_cmd(cmd, deadline, timeout=10)
    if rc == 0 and out.strip() and not out.startswith("-- No entries"):
        return out.splitlines(), "journalctl"
    rc, out, err = run_cmd(["dmesg", "--time-format", "iso"], deadline, timeout=10)
    if rc == 0:
        return out.splitlines(), "dmesg"
    raise OSError("no readable kernel log: /dev/kmsg, journalctl and dmesg failed (%s)" % err.strip())


def _read_kmsg():
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines = []
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break  # no more records
            except BrokenPipeError:
                continue  # records overwritten while reading: the next read resumes
            if not rec:
                break
            lines.append(rec.split(b"\n", 1)[0])  # continuation lines (" KEY=value") dropped
    finally:
        os.close(fd)
    return lines


def xid_policy(overrides):
    policy = dict(XID_POLICY)
    for key, rule in (overrides or {}).items():
        old = policy.get(int(key), UNKNOWN_XID)
        policy[int(key)] = (rule["status"], rule["action"], old[2], old[3] + " (site policy)")
    return policy


def judge_xids(events, stats, args, state, source):
    """Group events by (GPU, Xid) and judge each group; update `state` with boots per recoverable Xid."""
    policy = xid_policy(args.get("xid_policy"))
    escalate_after = int((args.get("thresholds") or {}).get("xid_reboot_escalation", 2))
    this_boot = args.get("boot_id") or "unknown"
    sim = bool(args.get("simulated_gpus"))
    groups = {}
    for ev in events:
        g = groups.setdefault((ev["pci"], ev["xid"]), {"count": 0, "first": ev["time"], "last": ev["time"],
                                                       "sample": ev})
        g["count"] += 1
        g["last"] = ev["time"] if ev["time"] is not None else g["last"]
    xids_per_gpu = {}
    for pci, xid in groups:
        xids_per_gpu.setdefault(pci, set()).add(xid)
    boots = state.setdefault("xid_boots", {})
    out = []
    for (pci, xid), g in sorted(groups.items()):
        status, action, recoverable, what = policy.get(xid, UNKNOWN_XID)
        if xid == 45 and xids_per_gpu[pci] == {45}:  # alone, Xid 45 means the app was killed
            status, action, what = "warn", "restart-app", "preemptive cleanup with no other Xid"
        ev = {"xid": xid, "pci": pci, "count": g["count"], "first": g["first"], "last": g["last"],
              "sample": g["sample"]["text"], "pid": g["sample"]["pid"], "process": g["sample"]["name"],
              "source": source}
        msg = "Xid %d on %s: %s%s" % (xid, pci, what, " (x%d)" % g["count"] if g["count"] > 1 else "")
        if recoverable and status == "fail":
            seen = boots.setdefault("%s/%d" % (pci, xid), [])
            if this_boot not in seen:
                seen.append(this_boot)
                del seen[:-10]
            ev["boots_seen"] = len(seen)
            if len(seen) > escalate_after:
                action = "inspect-hardware"
                msg += "; came back after %d reboots" % (len(seen) - 1)
        out.append(result("xid.%d" % xid, status, msg, action, ev, subject=pci, simulated=sim))
    summary = dict(stats, source=source, findings=len(out))
    if stats["unparsed"]:
        out.append(result("xid.unparsed", "warn", "%d Xid lines could not be parsed (truncated or corrupt)"
                          % stats["unparsed"], "none", summary, simulated=sim))
    status = worst_status(r["status"] for r in out)
    out.append(result("xid.scan", "ok", "%d kernel-log lines read, %d Xid findings (worst: %s)"
                      % (stats["lines"], len(groups), status), evidence=summary, simulated=sim))
    return out


def check_xids(args, deadline, state):
    try:
        lines, source = read_kernel_log(args, deadline)
    except OSError as exc:
        where = args.get("kernel_log") or "the kernel log"
        return [result("xid.source", "error", "cannot read %s: %s" % (where, exc.strerror or exc),
                       evidence={"path": args.get("kernel_log") or None})]
    boot = args.get("boot_epoch") or boot_epoch()
    events, stats = parse_xid_lines(lines, since=args.get("since"), boot=boot)
    return judge_xids(events, stats, args, state, source)
