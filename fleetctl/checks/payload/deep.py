"""Deep level: nccl-tests all_reduce_perf, `dcgmi diag -r N`, ib_write_bw loopback per RDMA NIC.

Each tool runs only when present on the node; an absent tool is `skipped` with the reason, never `ok`.
"""

from __future__ import annotations

import re
import subprocess
import time

from fleetctl.checks.payload.common import result, run_cmd, which  # payload-local

NCCL_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                         r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")


def parse_nccl_tests(text):
    """-> {avg_busbw_gbs, max_busbw_gbs, wrong, out_of_bounds, rows} from an nccl-tests *_perf run."""
    avg = re.search(r"^# Avg bus bandwidth\s*:\s*([\d.]+)", text, re.M)
    oob = re.search(r"^# Out of bounds values\s*:\s*(\d+)", text, re.M)
    rows, wrong = [], 0
    for line in text.splitlines():
        m = NCCL_ROW_RE.match(line)
        if m:
            size, busbw_oop, busbw_ip = int(m.group(1)), float(m.group(5)), float(m.group(9))
            rows.append((size, busbw_oop, busbw_ip))
            wrong += sum(int(x) for x in (m.group(6), m.group(10)) if x.isdigit())
    if avg is None and not rows:
        return None
    return {"avg_busbw_gbs": float(avg.group(1)) if avg else None,
            "max_busbw_gbs": max((max(r[1], r[2]) for r in rows), default=None),
            "wrong": wrong, "out_of_bounds": int(oob.group(1)) if oob else None, "sizes": len(rows)}


def parse_dcgmi_diag(text):
    """-> [(test, verdict, detail)] from the `dcgmi diag` table; verdict Pass/Fail/Warn/Skip."""
    tests = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0] or cells[0].startswith(("-", "+", "=")):
            continue
        name, value = cells
        verdict = value.split(" ", 1)[0]
        if verdict in ("Pass", "Fail", "Warn", "Skip"):
            tests.append([name, verdict, value])
        elif name in ("Warning", "Info", "Error") and tests:
            tests[-1][2] += " | " + value
    return [tuple(t) for t in tests]


def parse_ib_write_bw(text):
    """-> average bandwidth in Gb/s from perftest output (--report_gbits, or MB/sec converted)."""
    unit = None
    for line in text.splitlines():
        if "BW average[" in line:
            unit = "gbit" if "Gb/sec" in line else "mbyte"
            continue
        cols = line.split()
        if unit and len(cols) >= 4 and cols[0].isdigit():
            try:
                avg = float(cols[3])
            except ValueError:
                continue
            return avg if unit == "gbit" else avg * 8 / 1000.0
    return None


def check_nccl(args, deadline, gpu_count):
    exe = which("all_reduce_perf")
    if exe is None:
        return [result("deep.nccl", "skipped", "all_reduce_perf (nccl-tests) not installed")]
    if not gpu_count:
        return [result("deep.nccl", "skipped", "no GPUs to run all_reduce_perf on")]
    argv = [exe, "-b", "8", "-e", "1G", "-f", "2", "-g", str(gpu_count)]
    rc, out, err = run_cmd(argv, deadline, timeout=300)
    parsed = parse_nccl_tests(out)
    if rc != 0 or parsed is None:
        return [result("deep.nccl", "fail", "all_reduce_perf failed: %s" % (
            "timed out" if rc == "timeout" else (err.strip() or out.strip())[-200:] or "exit %s" % rc),
            "reset-gpu", {"rc": rc})]
    minimum = float((args.get("thresholds") or {}).get("nccl_busbw_min_gbs") or 0)
    ev = dict(parsed, min_gbs=minimum or None)
    if parsed["wrong"] or parsed["out_of_bounds"]:
        return [result("deep.nccl", "fail", "all_reduce_perf produced wrong results", "inspect-hardware", ev)]
    if minimum and (parsed["avg_busbw_gbs"] or 0) < minimum:
        return [result("deep.nccl", "fail", "bus bandwidth %.1f GB/s < %g GB/s" % (
            parsed["avg_busbw_gbs"], minimum), "inspect-hardware", ev)]
    return [result("deep.nccl", "ok", "bus bandwidth %.1f GB/s%s" % (
        parsed["avg_busbw_gbs"] or 0, "" if minimum else " (judged against the fleet baseline)"),
        evidence=ev)]


def check_dcgm(args, deadline):
    level = int(args.get("dcgm_level") or 1)
    rc, out, err = run_cmd(["dcgmi", "diag", "-r", str(level)], deadline, timeout=900)
    if rc is None:
        return [result("deep.dcgm", "skipped", "dcgmi (DCGM) not installed")]
    tests = parse_dcgmi_diag(out)
    if not tests:
        return [result("deep.dcgm", "error", "dcgmi diag -r %d gave no results: %s" % (
            level, (err.strip() or out.strip())[-200:] or "exit %s" % rc), evidence={"rc": rc})]
    ev = {"level": level, "tests": {n: d for n, _, d in tests}}
    failed = [n for n, v, _ in tests if v == "Fail"]
    warned = [n for n, v, _ in tests if v == "Warn"]
    if failed:
        return [result("deep.dcgm", "fail", "dcgmi diag -r %d failed: %s" % (level, ", ".join(failed)),
                       "inspect-hardware", ev)]
    if warned:
        return [result("deep.dcgm", "warn", "dcgmi diag -r %d warned: %s" % (level, ", ".join(warned)),
                       "none", ev)]
    return [result("deep.dcgm", "ok", "dcgmi diag -r %d: %d tests passed or skipped" % (level, len(tests)),
                   evidence=ev)]


def check_ib_write_bw(args, deadline):
    rdma = [n for n in args.get("nics") or [] if n.get("kind") in ("infiniband", "roce")]
    exe = which("ib_write_bw")
    if not rdma:
        return [result("deep.ib_write_bw", "skipped", "no RDMA NICs in the node class")]
    if exe is None:
        return [result("deep.ib_write_bw", "skipped", "ib_write_bw (perftest) not installed")]
    minimum = float((args.get("thresholds") or {}).get("ib_write_bw_min_gbps") or 0)
    out = []
    for i, nic in enumerate(rdma):
        want = minimum or 0.9 * float(nic.get("rate_gbps") or 0)
        gbps, err = _loopback_bw(exe, nic["name"], 18515 + i, deadline)
        ev = {"gbps": gbps, "min_gbps": want or None}
        if gbps is None:
            out.append(result("deep.ib_write_bw", "fail", "%s: ib_write_bw failed: %s" % (nic["name"], err),
                              "inspect-hardware", ev, nic["name"]))
        elif want and gbps < want:
            out.append(result("deep.ib_write_bw", "fail", "%s: %.1f Gb/s < %.1f Gb/s" % (nic["name"], gbps, want),
                              "inspect-hardware", ev, nic["name"]))
        else:
            out.append(result("deep.ib_write_bw", "ok", "%s: %.1f Gb/s" % (nic["name"], gbps), evidence=ev,
                              subject=nic["name"]))
    return out


def _loopback_bw(exe, dev, port, deadline):
    """Server and client on the same HCA through loopback: exercises the NIC, its PCIe link and firmware."""
    common = ["-d", dev, "-p", str(port), "--report_gbits", "-D", "3"]
    server = subprocess.Popen([exe] + common, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # let the server listen before the client connects
        rc, out, err = run_cmd([exe] + common + ["127.0.0.1"], deadline, timeout=30)
        gbps = parse_ib_write_bw(out) if rc == 0 else None
        return gbps, None if gbps is not None else (err.strip()[-160:] or "exit %s" % rc)
    finally:
        server.kill()
        server.wait()
