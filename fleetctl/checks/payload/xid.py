"""Xid and SXid errors from the kernel log: parse every common line format cheaply, judge by NVIDIA's
catalog (or the recovery action the driver prints), de-duplicate floods within fixed bounds, and escalate
reboot-recoverable Xids that keep coming back across reboots.

Hostile-input bounds (docs/checks.md): a file is read from its last 64 MiB in 1 MiB chunks; only the first
4 KiB of a line is parsed and 512 characters kept as evidence; at most 4096 distinct (device, code) groups
are tracked and 64 findings reported (the rest summed in `xid.more`); the scan stops before the check's
time budget and reports what it found so far.
"""

from __future__ import annotations

import calendar
import os
import re
import time

from fleetctl.checks.payload.common import (RANK, read_or_none, result, run_cmd,  # payload-local
                                            strongest_action, worst_status)  # payload-local

MAX_LOG_BYTES = 64 << 20  # read at most the last 64 MiB of a kernel-log file
READ_CHUNK = 1 << 20
MAX_LINE_BYTES = 4096  # parsed part of one line; the Xid header is at its start
EVIDENCE_CHARS = 512  # kept of a line as evidence
MAX_GROUPS = 4096  # distinct (device, code) pairs tracked while scanning
MAX_RESULTS = 64  # findings reported; the others are summed in one `xid.more` result
MAX_CAUSES = 8
MAX_STATE_KEYS = 256  # escalation memory entries kept in the state file
CHECK_DEADLINE_EVERY = 1024  # lines between two deadline checks

# NVIDIA Xid catalog, "Resolution Bucket (Immediate Action)" per Xid (docs.nvidia.com/deploy/xid-errors,
# "Analyzing Xid Errors with the Xid Catalog", R550-R580; codes the catalog lists as unused are left out).
_RESTART_APP = (8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80, 82, 83, 84, 85, 86,
                88, 89, 94, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 126, 127, 128, 129, 130, 131, 132,
                133, 134, 135, 139)
_IGNORE = (37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 121, 137, 141, 152, 153, 157, 160, 161, 171, 172)
_RESET_GPU = (46, 48, 62, 64, 74, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 169)
NVLINK5 = (144, 145, 146, 147, 148, 149, 150)  # Blackwell NVLink: the line says Fatal or Nonfatal
XID_WHAT = {
    8: "GPU stopped processing", 13: "graphics engine exception", 31: "GPU memory page fault",
    43: "GPU stopped processing (catalog: ignore)", 44: "graphics engine fault during context switch",
    45: "preemptive cleanup after another error", 46: "GPU stopped processing", 48: "double-bit ECC error",
    54: "auxiliary power not connected", 62: "internal micro-controller halt", 63: "row remapping recorded",
    64: "row remapping failure", 74: "NVLink error", 78: "vGPU start error", 79: "GPU has fallen off the bus",
    92: "high single-bit ECC rate", 94: "contained ECC error", 95: "uncontained ECC error",
    109: "context switch timeout", 110: "security fault", 119: "GSP RPC timeout", 120: "GSP error",
    121: "C2C link error", 136: "link training failed", 137: "NVLink privilege error",
    140: "unrecovered ECC error", 143: "GPU initialization failure", 144: "NVLink SAW error",
    145: "NVLink RLW error", 146: "NVLink TLW error", 147: "NVLink TREX error", 148: "NVLink NVLPW_CTRL error",
    149: "NVLink NETIR error", 150: "NVLink MSE error", 151: "key rotation error",
    154: "GPU recovery action changed", 155: "NVLink software-defined error", 156: "resource retirement event",
    158: "GPU fatal timeout", 159: "CHI non-data error", 169: "internal micro-controller halt",
}


def _catalog():
    table = {}
    for codes, rule in ((_RESTART_APP, ("warn", "restart-app", False)), (_IGNORE, ("ok", "none", False)),
                        (_RESET_GPU, ("fail", "reset-gpu", True)), (NVLINK5, ("fail", "reset-gpu", True))):
        for code in codes:
            table[code] = rule + (XID_WHAT.get(code, "catalog Xid %d" % code),)
    table[45] = ("ok", "none", False, XID_WHAT[45])
    table[54] = ("fail", "inspect-hardware", False, XID_WHAT[54])
    table[79] = ("fail", "reboot", True, XID_WHAT[79])
    table[151] = ("fail", "reboot", True, XID_WHAT[151])
    table[154] = ("warn", "inspect-hardware", False, XID_WHAT[154] + " (action not readable)")
    return table


XID_POLICY = _catalog()  # xid -> (status, action, reboot-recoverable, what)
UNKNOWN_XID = ("warn", "inspect-hardware", False, "Xid not in the catalog table")

# Xid 154 "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)": the driver's own
# verdict, nvmlDeviceGpuRecoveryAction_t. It wins over the table for the Xids before it on that GPU.
RECOVERY_ACTIONS = {
    0: ("ok", "none", "None"), 1: ("fail", "reset-gpu", "GPU Reset Required"),
    2: ("fail", "reboot", "Node Reboot Required"), 3: ("fail", "reset-gpu", "Drain P2P"),
    4: ("fail", "reset-gpu", "Drain and Reset"), 5: ("warn", "none", "Recover IMEX Domain"),
    6: ("fail", "reset-gpu", "Bus Reset"), 7: ("fail", "reboot", "System Reboot"),
}
# SXids the Fabric Manager User Guide (DU-09883-001 v1.3) lists as fatal: the NVSwitch needs a reset, the
# GPUs on it fail their NVLink traffic. A line may also say "Fatal" / "Non-fatal" itself, which wins.
SXID_FATAL = frozenset((
    11001, 11004, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12020, 12022, 12024, 12025, 12026, 12027,
    12028, 12031, 12032, 14017, 15001, 15006, 15009, 15010, 15012, 15013, 19047, 19048, 19054, 19056, 19058,
    19060, 19061, 19063, 19064, 19066, 19067, 19069, 19070, 19084, 20034, 22003, 22011, 22012, 23001, 23002,
    23003, 23004, 23005, 23006, 23007, 23008, 23009, 23010, 23011, 23012, 23013, 23014, 23015, 23016, 23017,
    24004, 24005, 24006, 24007))
RECOVERY_RE = re.compile(r"to 0x([0-9A-Fa-f]+)(?: \(([^)]*)\))?")

_PCI = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?"
XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>" + _PCI + r")\): (?P<xid>\d+)(?:, (?P<rest>.*))?$")
PID_RE = re.compile(r"^pid=(?P<pid>'[^']*'|\S+?), name=(?P<name>.*?), (?P<text>.*)$")
CAUSE_RE = re.compile(r"caused by previous Xid (\d+)")
SXID_RE = re.compile(r"(?P<dev>nvidia-nvswitch\d*): SXid \((?:PCI:)?(?P<pci>" + _PCI + r")\): (?P<sxid>\d+)"
                     r"(?:, (?P<rest>.*))?$")
FALLEN_GPU_RE = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?(?P<pci>" + _PCI + r")")

# Line prefixes before the message. Each is matched only on lines that passed the substring prefilter.
KMSG_RE = re.compile(r"(\d+),\d+,(\d+),[^;]*;")
DECODE_RE = re.compile(r"[a-z]+ *:[a-z]* *: ")  # dmesg --decode: "kern  :warn  : "
RFC5424_PRI_RE = re.compile(r"<\d{1,3}>(?:1 )?")
ISO_RE = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?")
DMESG_T_RE = re.compile(r"\[\w{3} (\S{3}) +(\d{1,2}) (\d\d:\d\d:\d\d) (\d{4})\]")  # dmesg -T, C locale
UPTIME_RE = re.compile(r"\[\s*(\d+\.\d+)\]")
SYSLOG_RE = re.compile(r"(\S{2,5}?)\.? +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))? ")
# Month abbreviations of journalctl/syslog in the locales seen on clusters (lower case, without the dot).
MONTHS = {}
for _names in ("jan feb mar apr may jun jul aug sep oct nov dec",
               "jan feb mär apr mai jun jul aug sep okt nov dez",  # de
               "janv févr mars avr mai juin juil août sept oct nov déc",  # fr
               "ene feb mar abr may jun jul ago sep oct nov dic",  # es
               "gen feb mar apr mag giu lug ago set ott nov dic",  # it
               "jan fev mar abr mai jun jul ago set out nov dez",  # pt
               "янв фев мар апр мая июн июл авг сен окт ноя дек"):  # ru
    for _i, _m in enumerate(_names.split(), 1):
        MONTHS.setdefault(_m, _i)
MONTHS.update({"mrz": 3, "май": 5, "fév": 2, "déc": 12, "sept": 9})
MONTHS.update({"%d%s" % (_i, _s): _i for _i in range(1, 13) for _s in ("月", "월")})  # zh, ja; ko
del _names, _i, _m


def boot_epoch():
    uptime = read_or_none("/proc/uptime")
    return time.time() - float(uptime.split()[0]) if uptime else None


def _local(y, mo, d, h, mi, s):
    return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))


def _yearless(mo, d, h, mi, s):
    """Syslog and journal short times carry no year: this year, or last year if that is in the future."""
    year = time.localtime().tm_year
    t = _local(year, mo, d, h, mi, s)
    return t if t <= time.time() + 86400 else _local(year - 1, mo, d, h, mi, s)


def line_time(prefix, boot, cache=None):
    """Epoch seconds of a log line from the text before the message, or None when it has no time.
    `cache` (a dict) memoizes the date arithmetic per second: floods repeat the same second."""
    p = prefix.lstrip()
    if not p:
        return None
    if p[0] == "<":  # RFC 5424 / forwarded syslog: "<PRI>1 " or "<PRI>"
        m = RFC5424_PRI_RE.match(p)
        p = p[m.end():] if m else p
    if p[0].isdigit():
        m = KMSG_RE.match(p)
        if m:
            return None if boot is None else boot + int(m.group(2)) / 1e6
        m = ISO_RE.match(p)
        if m:
            return _iso_time(m, cache)
    elif p[0] == "[":
        m = UPTIME_RE.match(p)
        if m:
            return None if boot is None else boot + float(m.group(1))
        m = DMESG_T_RE.match(p)
        if m:
            mo = MONTHS.get(m.group(1).lower())
            h, mi, s = (int(x) for x in m.group(3).split(":"))
            return None if mo is None else _local(int(m.group(4)), mo, int(m.group(2)), h, mi, s)
        return None
    m = DECODE_RE.match(p)
    if m:
        return line_time(p[m.end():], boot, cache)
    m = SYSLOG_RE.match(p)
    if m:
        mo = MONTHS.get(m.group(1).lower())
        if mo is None:
            return None
        key = m.group(0)
        t = cache.get(key) if cache is not None else None
        if t is None:
            t = _yearless(mo, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
            if cache is not None and len(cache) < 100000:
                cache[key] = t
        return t + (float("0." + m.group(6)) if m.group(6) else 0.0)
    return None


def _iso_time(m, cache):
    key = (m.group(1), m.group(2), m.group(4))
    t = cache.get(key) if cache is not None else None
    if t is None:
        y, mo, d = (int(x) for x in m.group(1).split("-"))
        h, mi, s = (int(x) for x in m.group(2).split(":"))
        tz = m.group(4)
        if tz is None:  # no zone: local time (rsyslog without zone, journal short-iso in old systemd)
            t = _local(y, mo, d, h, mi, s)
        else:
            t = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
            if tz != "Z":
                sign = -1 if tz[0] == "+" else 1
                t += sign * (int(tz[1:3]) * 3600 + int(tz[-2:]) * 60)
        if cache is not None and len(cache) < 100000:
            cache[key] = t
    return t + float("0." + m.group(3)) if m.group(3) else t


class Scan:
    """What one pass over the kernel log found, within fixed bounds."""

    def __init__(self):
        self.groups = {}  # (pci, xid) -> group dict
        self.sxids = {}  # (pci, sxid) -> group dict
        self.fallen = {}  # pci -> group dict: "fallen off the bus" without an Xid line
        self.recovery = {}  # pci -> (seq, status, action, label, text)
        self.overflow = {}  # xid -> count of lines whose (device, code) did not fit in MAX_GROUPS
        self.stopped = False  # True when the scan stopped at the time budget
        self.messages = {}  # message text -> parsed tuple (bounded)
        self.boot = None
        self.timed_format = None  # first two characters of the prefix of the line that passed `since`
        self.stats = {"lines": 0, "xid_lines": 0, "sxid_lines": 0, "fallen_lines": 0, "unparsed": 0,
                      "untimed": 0, "before_since": 0, "long_lines": 0}

    def add(self, table, key, seq, when, text, pid=None, name=None):
        g = table.get(key)
        if g is None:
            if len(self.groups) + len(self.sxids) + len(self.fallen) >= MAX_GROUPS:
                code = key[1] if isinstance(key, tuple) else 79
                if code in self.overflow or len(self.overflow) < 256:
                    self.overflow[code] = self.overflow.get(code, 0) + 1
                return None
            g = table[key] = {"count": 0, "first": when, "last": when, "first_seq": seq, "last_seq": seq,
                              "sample": text[:EVIDENCE_CHARS], "pid": pid, "name": name, "causes": [],
                              "fatal": 0, "nonfatal": 0}
        g["count"] += 1
        g["last_seq"] = seq
        if when is not None:
            g["last"] = when
            if g["first"] is None:
                g["first"] = when
        return g


def scan_lines(lines, since=None, boot=None, deadline=None):
    """One pass over kernel-log lines (bytes or str) -> Scan. Cheap per line: lines without "NVRM" or
    "SXid" cost one substring test; times are parsed only for matching lines, memoized per second."""
    scan, cache = Scan(), {}
    scan.boot = boot
    st = scan.stats
    margin = _margin(deadline)
    pending = None  # (pci, time, lines left): "NVRM: The NVIDIA GPU <pci>" opens a multi-line message
    n = 0
    for raw in lines:
        n += 1
        if not n % CHECK_DEADLINE_EVERY and deadline is not None and deadline.left() < margin:
            scan.stopped = True
            n -= 1
            break
        if isinstance(raw, bytes):
            if b"NVRM" not in raw and b"SXid" not in raw:
                continue
            if len(raw) > MAX_LINE_BYTES:
                st["long_lines"] += 1
                raw = raw[:MAX_LINE_BYTES]
            line = raw.decode("utf-8", "replace")
        else:
            if "NVRM" not in raw and "SXid" not in raw:
                continue
            if len(raw) > MAX_LINE_BYTES:
                st["long_lines"] += 1
                raw = raw[:MAX_LINE_BYTES]
            line = raw
        line = line.rstrip("\r\n")
        at = line.find("NVRM: Xid")
        if at >= 0:
            pending = None
            _xid_line(scan, line, at, n, since, boot, cache)
            continue
        at = line.find("SXid")
        if at >= 0:
            _sxid_line(scan, line, n, since, boot, cache)
            continue
        at = max(line.find("NVRM:"), 0)
        m = FALLEN_GPU_RE.search(line, at)
        if "fallen off the bus" in line:
            if m:
                pci, when = m.group("pci"), line_time(line[:at], boot, cache)
            elif pending:
                pci, when = pending[0], pending[1]
            else:
                continue
            pending = None
            if not _in_window(scan, when, since):
                continue
            st["fallen_lines"] += 1
            scan.add(scan.fallen, _short_pci(pci), n, when, line[at:])
        elif m and line.startswith("The NVIDIA GPU", at + 6):
            pending = (m.group("pci"), line_time(line[:at], boot, cache), 3)
        elif pending:
            pending = None if pending[2] <= 1 else (pending[0], pending[1], pending[2] - 1)
    st["lines"] = n
    return scan


def _margin(deadline):
    """Stop scanning this long before the budget so the findings so far still reach the document."""
    budget = getattr(deadline, "budget_s", 0) or 0
    return min(0.5, 0.15 * budget) if budget else 0.0


def _in_window(scan, when, since):
    if since is None:
        return True
    if when is None:
        scan.stats["untimed"] += 1
        return False
    if when < since:
        scan.stats["before_since"] += 1
        return False
    return True


def _short_pci(pci):
    """'00000000:18:00.0' / '0000:18:00' -> '0000:18:00', the form Xid lines use."""
    domain, _, rest = pci.lower().partition(":")
    return "%s:%s" % (domain[-4:], rest.split(".")[0])


def _xid_line(scan, line, at, seq, since, boot, cache):
    st = scan.stats
    st["xid_lines"] += 1
    msg = line[at:]
    parsed = scan.messages.get(msg)  # a flood repeats the message: parse it once
    if parsed is None:
        parsed = _parse_xid_message(line, at)
        if len(scan.messages) < 1024:
            scan.messages[msg] = parsed
    if not parsed:
        st["unparsed"] += 1
        return
    pci, xid, text, pid, name, severity, cause, recovery = parsed
    prefix = line[:at]
    g = scan.groups.get((pci, xid))
    if g is not None and (since is None or prefix[:2] == scan.timed_format):
        # Hot path of a flood: the log is chronological, so a line of an already-open group in the
        # format that passed the since-time needs no date arithmetic; its time is read at judging.
        g["count"] += 1
        g["last_seq"] = seq
        g["last_prefix"] = prefix
        if g["first"] is None or not prefix or prefix.isspace():
            st["untimed"] += 1  # the group's format carries no time, or this line has no prefix
    elif since is None and len(scan.groups) + len(scan.sxids) + len(scan.fallen) >= MAX_GROUPS:
        scan.add(scan.groups, (pci, xid), seq, None, text)  # no room: counted per Xid, no date needed
        return
    else:
        when = line_time(prefix, boot, cache)
        if when is None:
            st["untimed"] += 1
            if since is not None:
                return
        elif since is not None:
            if when < since:
                st["before_since"] += 1
                return
            scan.timed_format = prefix[:2]
        g = scan.add(scan.groups, (pci, xid), seq, when, text, pid, name)
        if g is None:
            return
        g["last_prefix"] = None
    if severity:
        g[severity] += 1
    if cause is not None and cause not in g["causes"] and len(g["causes"]) < MAX_CAUSES:
        g["causes"].append(cause)
    if recovery is not None:
        scan.recovery[pci] = (seq,) + recovery


def _parse_xid_message(line, at):
    """-> (pci, xid, text, pid, name, severity, cause, recovery) of an Xid message, or () if corrupt."""
    m = XID_RE.search(line, at)
    if not m:
        return ()
    rest = m.group("rest") or ""
    p = PID_RE.match(rest)
    text = p.group("text") if p else rest
    xid, pci = int(m.group("xid")), m.group("pci").lower()
    severity = None
    if xid in NVLINK5:  # "SAW_MVB Nonfatal XC0 ..." / "NETIR_LINK_EVT Fatal XC0 ..."
        severity = "nonfatal" if " Nonfatal " in text else "fatal" if " Fatal " in text else None
    c = CAUSE_RE.search(text)
    recovery = None
    if xid == 154:
        r = RECOVERY_RE.search(text)
        code = int(r.group(1), 16) if r else None
        status, action, label = RECOVERY_ACTIONS.get(code, ("warn", "inspect-hardware", None))
        label = (r.group(2) if r and r.group(2) else label) or "unreadable"
        recovery = (status, action, label[:64], text[:EVIDENCE_CHARS])
    return (pci, xid, text, p.group("pid").strip("'") if p else None, p.group("name")[:64] if p else None,
            severity, int(c.group(1)) if c else None, recovery)


def _sxid_line(scan, line, seq, since, boot, cache):
    st = scan.stats
    m = SXID_RE.search(line)
    if not m:
        if "SXid (" in line:
            st["sxid_lines"] += 1
            st["unparsed"] += 1
        return
    st["sxid_lines"] += 1
    when = line_time(line[:m.start()], boot, cache)
    if not _in_window(scan, when, since):
        return
    rest = m.group("rest") or ""
    g = scan.add(scan.sxids, (m.group("pci").lower(), int(m.group("sxid"))), seq, when, rest,
                 name=m.group("dev"))
    if g is not None:
        if rest.startswith("Non-fatal"):
            g["nonfatal"] += 1
        elif rest.startswith("Fatal"):
            g["fatal"] += 1


# ---------------------------------------------------------------- reading
def iter_file_lines(f, max_bytes=MAX_LOG_BYTES):
    """Lines of the last `max_bytes` of an open binary file, read in chunks. A line longer than
    MAX_LINE_BYTES is cut there and the rest skipped: memory stays O(chunk), whatever the file holds."""
    size = os.fstat(f.fileno()).st_size
    skip_partial = size > max_bytes
    if skip_partial:
        f.seek(size - max_bytes)
    left, buf, skipping = max_bytes, b"", skip_partial
    while left > 0:
        chunk = f.read(min(READ_CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)
        buf += chunk
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            if not skipping:
                yield buf[start:min(nl, start + MAX_LINE_BYTES + 1)]
            skipping = False
            start = nl + 1
        buf = buf[start:]
        if len(buf) > MAX_LINE_BYTES:  # a line without end yet: keep its head, skip the rest
            if not skipping:
                yield buf[:MAX_LINE_BYTES + 1]
            skipping, buf = True, b""
    if buf and not skipping:
        yield buf


def read_kernel_log(args, deadline):
    """-> (opened file or list of lines, source). The path override (lab, tests) first, else /dev/kmsg,
    journal, dmesg."""
    path = args.get("kernel_log")
    if path:
        return open(path, "rb"), path  # an OSError here becomes this check's error result
    lines = _read_kmsg()
    if lines is not None:
        return lines, "/dev/kmsg"
    since = args.get("since")
    # --lines bounds what is captured (a flood is ~100 bytes a line): the newest half million lines
    cmd = ["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso-precise", "--lines=500000"]
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


# ---------------------------------------------------------------- judging
def xid_policy(overrides):
    policy = dict(XID_POLICY)
    for key, rule in (overrides or {}).items():
        old = policy.get(int(key), UNKNOWN_XID)
        policy[int(key)] = (rule["status"], rule["action"], old[2], old[3] + " (site policy)")
    return policy


def _judge_xid(scan, pci, xid, g, policy, overridden, xids_on_gpu):
    """-> (status, action, reboot-recoverable, what) of one (GPU, Xid) group."""
    status, action, recoverable, what = policy.get(xid, UNKNOWN_XID)
    if xid in overridden:
        return status, action, recoverable, what
    if xid in NVLINK5 and g["nonfatal"] and not g["fatal"]:
        return "warn", "none", False, what + " (non-fatal)"
    if xid == 45:
        missing = [c for c in g["causes"] if c not in xids_on_gpu[pci]]
        if missing:  # the cause rotated out of the log or the since-window: judge the cause
            worst = max(missing, key=lambda c: RANK[policy.get(c, UNKNOWN_XID)[0]])
            s, a, r, w = policy.get(worst, UNKNOWN_XID)
            return s, a, r, "cleanup caused by Xid %d (%s), which is not in the scanned log" % (worst, w)
        if not g["causes"] and xids_on_gpu[pci] == {45}:
            return "warn", "restart-app", False, "preemptive cleanup with no other Xid"
    rec = scan.recovery.get(pci)
    if xid == 154 and rec:
        return rec[1], rec[2], rec[1] == "fail", "GPU recovery action: %s" % rec[3]
    if rec and status == "fail" and g["first_seq"] <= rec[0]:
        # the driver's recovery action printed after this Xid wins over the table
        if rec[1] == "fail":
            return "fail", rec[2], recoverable, "%s; driver recovery action: %s" % (what, rec[3])
        return rec[1], rec[2], False, "%s; driver recovery action: %s" % (what, rec[3])
    return status, action, recoverable, what




def judge_scan(scan, args, state, source):
    """Findings of a scan: one per (GPU, Xid), per (NVSwitch, SXid), per GPU fallen off the bus without
    an Xid; at most MAX_RESULTS, the rest summed; `xid.unparsed` and `xid.scan`."""
    policy = xid_policy(args.get("xid_policy"))
    findings = _xid_findings(scan, args, policy, source) + _sxid_findings(scan, source)
    findings.sort(key=lambda f: (-RANK[f[0]], -f[5]["count"], f[3], f[6]))
    shown, hidden = findings[:MAX_RESULTS], findings[MAX_RESULTS:]
    out = [_finding(f, args, state) for f in shown]
    if hidden or scan.overflow:
        out.append(_more(hidden, scan.overflow, policy))
    return out + _scan_results(scan, source, len(findings), out)


def _xid_groups(scan):
    """(GPU, Xid) -> its group, with a GPU "fallen off the bus" without an Xid 79 line an Xid 79 all
    the same; and the Xids of each GPU."""
    groups = dict(scan.groups)
    for pci, g in scan.fallen.items():
        if (pci, 79) not in groups:
            groups[(pci, 79)] = dict(g, fallen_message=True)
    xids_on_gpu = {}
    for pci, xid in groups:
        xids_on_gpu.setdefault(pci, set()).add(xid)
    return groups, xids_on_gpu


def _xid_findings(scan, args, policy, source):
    """[status, action, reboot-recoverable, code, message, evidence, pci] per (GPU, Xid)."""
    overridden = {int(k) for k in (args.get("xid_policy") or {})}
    groups, xids_on_gpu = _xid_groups(scan)
    findings = []
    boot = args.get("boot_epoch")
    for (pci, xid), g in groups.items():
        if g.get("last_prefix"):
            last = line_time(g["last_prefix"], boot if boot is not None else scan.boot)
            g["last"] = last if last is not None else g["last"]
        status, action, recoverable, what = _judge_xid(scan, pci, xid, g, policy, overridden, xids_on_gpu)
        ev = {"xid": xid, "pci": pci, "count": g["count"], "first": g["first"], "last": g["last"],
              "sample": g["sample"], "pid": g["pid"], "process": g["name"], "source": source}
        if g["causes"]:
            ev["caused_by"] = list(g["causes"])
        if g.get("fallen_message"):
            ev["fallen_off_bus_message"] = True
            what += " (driver message without an Xid line)"
        if xid == 154 and pci in scan.recovery:
            ev["recovery_action"] = scan.recovery[pci][3]
        msg = "Xid %d on %s: %s%s" % (xid, pci, what, " (x%d)" % g["count"] if g["count"] > 1 else "")
        findings.append([status, action, recoverable, "xid.%d" % xid, msg, ev, pci])
    return findings


def _sxid_findings(scan, source):
    """One finding per (NVSwitch, SXid), as _xid_findings; the severity the driver printed wins."""
    findings = []
    for (pci, sxid), g in scan.sxids.items():
        if g["fatal"]:
            status, action, kind = "fail", "reboot", "fatal"
        elif g["nonfatal"]:
            status, action, kind = "warn", "none", "non-fatal"
        elif sxid in SXID_FATAL:
            status, action, kind = "fail", "reboot", "fatal per the Fabric Manager catalog"
        else:
            status, action, kind = "warn", "inspect-hardware", "severity not printed"
        ev = {"sxid": sxid, "pci": pci, "device": g["name"], "count": g["count"], "first": g["first"],
              "last": g["last"], "sample": g["sample"], "source": source}
        findings.append([status, action, False, "sxid.%d" % sxid,
                         "SXid %d on NVSwitch %s: %s%s" % (sxid, pci, kind, " (x%d lines)" % g["count"]
                                                           if g["count"] > 1 else ""), ev, pci])
    return findings


def _scan_results(scan, source, n_findings, reported):
    """`xid.unparsed` (when lines could not be parsed) and `xid.scan`: how the scan went, and the worst
    status of the results `reported` before them and of these."""
    stats = scan.stats
    summary = dict(stats, source=source, findings=n_findings, complete=not scan.stopped,
                   overflow_lines=sum(scan.overflow.values()))
    out = []
    if stats["unparsed"]:
        out.append(result("xid.unparsed", "warn", "%d Xid lines could not be parsed (truncated or corrupt)"
                          % stats["unparsed"], "none", summary))
    worst = worst_status(r["status"] for r in reported + out)
    if scan.stopped:
        out.append(result("xid.scan", "error", "kernel-log scan stopped at the time budget after %d lines; "
                          "%d findings so far (worst: %s)" % (stats["lines"], n_findings, worst),
                          evidence=summary))
    else:
        out.append(result("xid.scan", "ok", "%d kernel-log lines read, %d Xid findings (worst: %s)"
                          % (stats["lines"], n_findings, worst), evidence=summary))
    return out


def _finding(f, args, state):
    status, action, recoverable, code, msg, ev, subject = f
    if recoverable and status == "fail" and code.startswith("xid."):
        escalate_after = int((args.get("thresholds") or {}).get("xid_reboot_escalation", 2))
        this_boot = args.get("boot_id") or "unknown"
        boots = state.setdefault("xid_boots", {})
        seen = boots.setdefault("%s/%d" % (ev["pci"], ev["xid"]), [])
        if this_boot not in seen:
            seen.append(this_boot)
            del seen[:-10]
        while len(boots) > MAX_STATE_KEYS:
            del boots[next(iter(boots))]
        ev["boots_seen"] = len(seen)
        if len(seen) > escalate_after:
            action = "inspect-hardware"
            msg += "; came back after %d reboots" % (len(seen) - 1)
    return result(code, status, msg, action, ev, subject=subject)


def _more(hidden, overflow, policy):
    """One result for the findings past MAX_RESULTS and the lines past MAX_GROUPS: worst status kept."""
    statuses = [f[0] for f in hidden] + [policy.get(x, UNKNOWN_XID)[0] for x in overflow]
    actions = [f[1] for f in hidden if f[0] == "fail"] + \
        [policy.get(x, UNKNOWN_XID)[1] for x in overflow if policy.get(x, UNKNOWN_XID)[0] == "fail"]
    status = worst_status(statuses)
    codes = {}
    for f in hidden:
        codes[f[3]] = codes.get(f[3], 0) + 1
    ev = {"findings": len(hidden), "codes": dict(sorted(codes.items())[:MAX_RESULTS]),
          "overflow_lines": {str(k): v for k, v in sorted(overflow.items())[:MAX_RESULTS]}}
    return result("xid.more", status, "%d more findings not listed, %d more Xid lines past %d distinct "
                  "(device, code) pairs (worst: %s)" % (len(hidden), sum(overflow.values()), MAX_GROUPS, status),
                  strongest_action(actions) if status == "fail" else "none", ev)


def check_xids(args, deadline, state):
    try:
        src, source = read_kernel_log(args, deadline)
    except OSError as exc:
        where = args.get("kernel_log") or "the kernel log"
        return [result("xid.source", "error", "cannot read %s: %s" % (where, exc.strerror or exc),
                       evidence={"path": args.get("kernel_log") or None})]
    boot = args.get("boot_epoch") or boot_epoch()
    ack = acknowledge(args, state)
    since = args.get("since")
    if ack is not None:  # lines up to the acknowledged time were repaired (GPU reset) and signed off
        since = ack["time"] if since is None else max(since, ack["time"])
    if hasattr(src, "read"):
        with src:
            scan = scan_lines(iter_file_lines(src), since=since, boot=boot, deadline=deadline)
    else:
        scan = scan_lines(src, since=since, boot=boot, deadline=deadline)
    out = judge_scan(scan, args, state, source)
    if ack is not None:
        out[-1]["evidence"]["acknowledged"] = ack
        out[-1]["message"] += "; lines up to %s acknowledged by %s" % (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ack["time"])), ack["by"])
    return out


def acknowledge(args, state):
    """The node's kernel-log acknowledgement: {time, by}, or None.

    An operator (`fleetctl audit --ack-kernel-log`) or `fleetctl audit --resume` of a node fleetctl
    drained for an Xid says the errors logged so far were repaired, e.g. by a GPU reset that left the
    kernel log as it was. This node's own clock stamps the watermark (the log's lines carry that clock);
    it lives in the node's state file, so the Prolog and HealthCheck honour it too. Lines without a
    time cannot be placed against it and are then not judged (as with --since).
    """
    request = args.get("ack_kernel_log")
    if isinstance(request, dict) and args.get("node") in (request.get("nodes") or ()):
        who = "".join(ch for ch in str(request.get("by") or "operator")[:64] if ch.isprintable())
        state["kernel_log_ack"] = {"time": round(time.time(), 3), "by": who or "operator"}
    ack = state.get("kernel_log_ack")
    if not isinstance(ack, dict):
        return None
    when, who = ack.get("time"), ack.get("by")
    # A state file is the node's own, but keep a damaged one from hiding errors: a time in the future
    # (or not a number) is ignored.
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not 0 < when <= time.time() + 60:
        return None
    return {"time": float(when), "by": who if isinstance(who, str) else "operator"}
