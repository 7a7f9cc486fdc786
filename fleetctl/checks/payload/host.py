"""Host checks: CPUs, memory, required mounts (present, read-write, space), clock sync, versions."""

from __future__ import annotations

import os
import platform
import re

from fleetctl.checks.payload.common import read_or_none, result, run_cmd  # payload-local

MEMORY_SLACK = 0.05  # a node may show up to 5 % less memory than its class (firmware reservations)


def check_cpus_memory(expect, facts):
    out = []
    cpus = os.cpu_count()
    facts["cpus"] = cpus
    want = expect.get("cpus") or 0
    ev = {"cpus": cpus, "expected": want or None}
    if want and cpus != want:
        out.append(result("host.cpus", "fail", "%s logical CPUs, expected %s" % (cpus, want),
                          "inspect-hardware", ev))
    else:
        out.append(result("host.cpus", "ok", "%s logical CPUs" % cpus, evidence=ev))
    mem_gb = meminfo_gib()
    facts["memory_gb"] = None if mem_gb is None else round(mem_gb, 1)
    want = expect.get("memory_gb") or 0
    ev = {"memory_gib": facts["memory_gb"], "expected_gib": want or None}
    if mem_gb is None:
        out.append(result("host.memory", "error", "cannot read /proc/meminfo", evidence=ev))
    elif want and mem_gb < want * (1 - MEMORY_SLACK):
        out.append(result("host.memory", "fail", "%.1f GiB memory, expected %g" % (mem_gb, want),
                          "inspect-hardware", ev))
    else:
        out.append(result("host.memory", "ok", "%.1f GiB memory" % mem_gb, evidence=ev))
    return out


def meminfo_gib(path="/proc/meminfo"):
    text = read_or_none(path) or ""
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) / 1048576.0 if m else None


def parse_mounts(text):
    """{mount point: options} from /proc/mounts (octal escapes such as \\040 decoded)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
            out[point] = parts[3].split(",")
    return out


def check_mounts(mounts, thresholds, mounts_file="/proc/mounts"):
    """Each required mount: mounted, read-write, enough space; plus free space on /tmp."""
    table = parse_mounts(read_or_none(mounts_file) or "")
    min_free = float(thresholds.get("disk_free_min_pct", 5.0))
    out = []
    for point in mounts:
        ev = {"options": table.get(point)}
        if point not in table:
            out.append(result("host.mount", "fail", "%s is not mounted" % point, "drain", ev, point))
            continue
        if "ro" in table[point]:
            out.append(result("host.mount", "fail", "%s is mounted read-only" % point, "drain", ev, point))
            continue
        try:
            st = os.statvfs(point)  # a stale NFS handle or a dead FUSE daemon fails here
        except OSError as exc:
            out.append(result("host.mount", "fail", "%s: statvfs failed: %s" % (point, exc.strerror), "drain",
                              ev, point))
            continue
        if st.f_flag & os.ST_RDONLY or not os.access(point, os.W_OK):
            out.append(result("host.mount", "fail", "%s is read-only" % point, "drain", ev, point))
            continue
        out.append(result("host.mount", "ok", "%s mounted read-write" % point, evidence=ev, subject=point))
        out.append(_disk_free(point, st, min_free))
    if "/tmp" not in mounts:
        try:
            out.append(_disk_free("/tmp", os.statvfs("/tmp"), min_free))
        except OSError as exc:
            out.append(result("host.disk", "error", "/tmp: %s" % exc.strerror, subject="/tmp"))
    return out


def _disk_free(point, st, min_free):
    total = st.f_blocks * st.f_frsize
    free_pct = 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 100.0
    ev = {"free_pct": round(free_pct, 2), "size_gb": round(total / 1e9, 1), "min_free_pct": min_free}
    if free_pct < min_free:
        return result("host.disk", "fail", "%s has %.1f %% free (minimum %g %%)" % (point, free_pct, min_free),
                      "drain", ev, point)
    return result("host.disk", "ok", "%s has %.1f %% free" % (point, free_pct), evidence=ev, subject=point)


# ---------------------------------------------------------------- clock synchronization
LOCAL_REFIDS = ("7F7F0101", "LOCL", "LOCAL")  # chrony's and ntpd's undisciplined local clock


def parse_chronyc_tracking(text):
    """-> {offset_ms, synced, source} from `chronyc tracking`. A local-clock reference (`7F7F0101 ()`,
    `LOCAL`) or `Not synchronised` is not synchronised, whatever the offset says."""
    m = re.search(r"^System time\s*:\s*([\d.]+) seconds (slow|fast)", text, re.M)
    leap = re.search(r"^Leap status\s*:\s*(.+)$", text, re.M)
    ref = re.search(r"^Reference ID\s*:\s*(\S+)(?: \((.*)\))?", text, re.M)
    stratum = re.search(r"^Stratum\s*:\s*(\d+)", text, re.M)
    if not m:
        return None
    offset = float(m.group(1)) * 1000.0 * (-1 if m.group(2) == "slow" else 1)
    refid = ref.group(1).upper() if ref else None
    local = refid in LOCAL_REFIDS or bool(ref and (ref.group(2) or "").upper() in LOCAL_REFIDS)
    synced = bool(leap) and leap.group(1).strip() != "Not synchronised" and refid not in (None, "00000000") \
        and not local
    out = {"tool": "chronyc", "offset_ms": offset, "synced": synced,
           "source": (ref.group(2) or ref.group(1)) if ref else None,
           "stratum": int(stratum.group(1)) if stratum else None}
    if local:
        out["source"] = "local clock (%s)" % ref.group(1)
    return out


def parse_ntpq_peers(text):
    """-> {offset_ms, synced, source} from `ntpq -pn`: the peer marked '*' is the system peer; a system
    peer that is the local clock (refid `.LOCL.`, `LOCAL(0)`, 127.127.1.x) is not a synchronisation."""
    for line in text.splitlines():
        if line.startswith("*"):
            cols = line[1:].split()
            if len(cols) >= 9:
                local = cols[1].strip(".").upper() in LOCAL_REFIDS or cols[0].upper().startswith("LOCAL(") \
                    or cols[0].startswith("127.127.1.")
                return {"tool": "ntpq", "offset_ms": float(cols[8]), "synced": not local,
                        "source": "local clock (%s)" % cols[0] if local else cols[0]}
    return {"tool": "ntpq", "offset_ms": None, "synced": False, "source": None}


def parse_pmc_time_status(text):
    """-> offset from `pmc -u -b 0 'GET TIME_STATUS_NP'` (linuxptp): master_offset is in ns."""
    m = re.search(r"master_offset\s+(-?\d+)", text)
    gm = re.search(r"gmPresent\s+(\w+)", text)
    if not m:
        return None
    return {"tool": "pmc", "offset_ms": int(m.group(1)) / 1e6, "synced": bool(gm) and gm.group(1) == "true",
            "source": "ptp"}


def parse_timedatectl(text):
    """`timedatectl show`: synchronized or not, no offset."""
    m = re.search(r"^NTPSynchronized=(\w+)", text, re.M)
    if not m:
        return None
    return {"tool": "timedatectl", "offset_ms": None, "synced": m.group(1) == "yes", "source": None}


CLOCK_TOOLS = (
    (["chronyc", "-n", "tracking"], parse_chronyc_tracking),
    (["ntpq", "-pn"], parse_ntpq_peers),
    (["pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"], parse_pmc_time_status),
    (["timedatectl", "show"], parse_timedatectl),
)


def check_clock(thresholds, deadline):
    tried = []
    for argv, parse in CLOCK_TOOLS:
        rc, out, err = run_cmd(argv, deadline, timeout=3)
        if rc is None:
            tried.append("%s absent" % argv[0])
            continue
        info = parse(out) if rc == 0 else None
        if info is None:
            tried.append("%s: %s" % (argv[0], (err.strip() or "no usable output").splitlines()[0][:80]))
            continue
        return [judge_clock(info, thresholds)]
    return [result("host.clock", "skipped", "no clock-sync tool answered (%s)" % "; ".join(tried))]


def judge_clock(info, th):
    warn_ms, fail_ms = th.get("clock_offset_warn_ms", 1.0), th.get("clock_offset_fail_ms", 100.0)
    off = info.get("offset_ms")
    if not info["synced"]:
        return result("host.clock", "warn", "clock not synchronized (%s%s)" % (
            info["tool"], ", reference: %s" % info["source"] if info.get("source") else ""), "none", info)
    if off is not None and abs(off) >= fail_ms:
        return result("host.clock", "fail", "clock offset %.3f ms (limit %g ms)" % (off, fail_ms), "drain", info)
    if off is not None and abs(off) >= warn_ms:
        return result("host.clock", "warn", "clock offset %.3f ms (warning at %g ms)" % (off, warn_ms),
                      "none", info)
    text = "synchronized" + (", offset %.3f ms" % off if off is not None else "")
    return result("host.clock", "ok", "clock %s (%s)" % (text, info["tool"]), evidence=info)


def check_versions(expect, facts):
    kernel = platform.release()
    facts["kernel"] = kernel
    drv = read_or_none("/proc/driver/nvidia/version")
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d[\d.]*)", drv or "")
    facts["nvidia_kernel_module"] = m.group(1) if m else None
    want = expect.get("kernel_version") or ""
    ev = {"kernel": kernel, "expected": want or None, "nvidia_kernel_module": facts["nvidia_kernel_module"]}
    if want and kernel != want:
        return [result("host.kernel", "fail", "kernel %s, expected %s" % (kernel, want), "drain", ev)]
    return [result("host.kernel", "ok", "kernel %s" % kernel, evidence=ev)]
