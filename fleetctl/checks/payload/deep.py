"""Deep level: nccl-tests all_reduce_perf, `dcgmi diag -r N`, ib_write_bw loopback per RDMA NIC.

Each tool runs only when present on the node; an absent tool is `skipped` with the reason, never `ok`.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time

from fleetctl.checks.payload.common import number_or_none, result, run_cmd, which  # payload-local

MAX_TOOL_OUTPUT = 4 << 20  # characters of a tool's output that are parsed
# What launchers put before each line of a rank's output: `0: ` (srun -l, mpirun -l), `[1,0]<stdout>:`
# (Open MPI --tag-output), and a Ray worker's `(head, rank=0, pid=3808) ` before either.
RANK_PREFIX_RE = re.compile(r"^(?:\([^()\n]{1,200}\)\s+)?(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s)")
NCCL_FAILURE_RE = re.compile(r"Test (?:NCCL )?failure|NCCL failure|Test CUDA failure", re.I)
# Old nccl-tests (before 2.11) print the largest numeric error of each size (`2e-07`, `0e+00`) where
# newer ones count wrong elements (`0`): an error is a magnitude, judged by "Out of bounds values".
OLD_ERROR_RE = re.compile(r"^\d(?:\.\d+)?e[+-]\d+$")
OLD_ERROR_LIMIT = 1e-2  # an old-layout error above any reduction's rounding (fp16 ~1e-3): a wrong result


COUNT_RE = re.compile(r"[0-9]{1,15}")  # a size or element count (ASCII digits: int() takes any Unicode digit)


def _finite(text):
    """A finite float from a table cell, or None (`N/A`, a cut cell, `inf`, `nan`, `1e400`)."""
    value = number_or_none(text, float)
    return value if value is not None and math.isfinite(value) else None


def _unprefixed(text):
    """The tool's lines without the launchers' per-rank prefixes."""
    for line in text.splitlines():
        m = RANK_PREFIX_RE.match(line)
        yield line[m.end():] if m else line


def parse_nccl_tests(text):
    """-> {avg_busbw_gbs, max_busbw_gbs, largest_*, wrong, max_error, out_of_bounds, sizes, validated,
    failure} from an nccl-tests *_perf run, old and new layouts, with or without launcher prefixes: the
    last eight columns of a row are always `time algbw busbw #wrong` twice (out-of-place, in-place);
    `#wrong` is a count, or in old versions the largest numeric error (`2e-07`; judged only through
    "Out of bounds values"), or `N/A` when validation is off. None when there is neither a row nor a
    summary."""
    text = "\n".join(_unprefixed(text[:MAX_TOOL_OUTPUT]))
    avg = re.search(r"^\s*# Avg bus bandwidth\s*:\s*([0-9]{1,12}(?:\.[0-9]{1,12})?)\b", text, re.M)
    oob = re.search(r"^\s*# Out of bounds values\s*:\s*([0-9]{1,9})\b", text, re.M)
    failure = NCCL_FAILURE_RE.search(text)
    rows, wrong, max_error, validated = [], 0, None, False
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 11 or not (COUNT_RE.fullmatch(cols[0]) and COUNT_RE.fullmatch(cols[1])):
            continue
        nums = [_finite(c) for c in cols[-8:]]
        if None in (nums[0], nums[1], nums[2], nums[4], nums[5], nums[6]):
            continue  # a cut-off row
        rows.append((int(cols[0]), nums[2], nums[6]))
        for token, w in ((cols[-5], nums[3]), (cols[-1], nums[7])):
            if w is None:
                continue
            validated = True
            if OLD_ERROR_RE.match(token):
                max_error = w if max_error is None else max(max_error, w)
                wrong += w > OLD_ERROR_LIMIT  # one wrong size: the old layout has no element count
            else:
                wrong += int(w) if 0 <= w < 2 ** 53 else 1  # a count; anything else is not a clean row
    if avg is None and not rows and not failure:
        return None
    largest = max(rows) if rows else None
    mean = sum(b for r in rows for b in r[1:]) / (2 * len(rows)) if rows else None
    return {"avg_busbw_gbs": float(avg.group(1)) if avg else (round(mean, 4) if mean is not None else None),
            "avg_from": "summary" if avg else ("rows" if rows else None),
            "max_busbw_gbs": max((max(r[1], r[2]) for r in rows), default=None),
            "largest_bytes": largest[0] if largest else None,
            "largest_busbw_gbs": max(largest[1], largest[2]) if largest else None,
            "wrong": wrong, "max_error": max_error, "validated": validated,
            "out_of_bounds": int(oob.group(1)) if oob else None,
            "sizes": len(rows), "failure": failure.group(0) if failure else None}


DCGM_VERDICTS = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip", "not_run": "skip",
                 "not run": "skip", "error": "fail"}
DCGM_CATEGORY_RE = re.compile(r"^[|+]-{3,}\s+(\w[\w ]*?)\s+-+[+|]")
DCGM_GPU_ROW_RE = re.compile(r"^GPU\s*(\d+):\s*(\w+)")
DCGM_GPUS_RE = re.compile(r"^(\w+)\s*-\s*GPUs?:\s*([\d,\s]+)$")
DCGM_META = {"DCGM Version": "version", "Driver Version Detected": "driver", "GPU Device IDs Detected": "devices"}


def _verdict(word):
    return DCGM_VERDICTS.get(word.strip().lower().replace("-", "_"))


def parse_dcgmi_diag(text):
    """-> {version, driver, tests: [{name, category, verdict, gpus: {id: verdict} | "all", detail}]} from the
    `dcgmi diag` table of DCGM 2.x-4.x: `Pass - All`, `Fail - GPU: 1`, per-GPU rows `GPU0: Fail` under a
    test (4.x), `Warning`/`Info`/`Error` rows and their continuation rows. A test's verdict is the worst
    of its rows; an `Error` row makes it a failure."""
    doc, cur, cat, last_label = {"version": None, "driver": None, "tests": []}, None, None, None
    for line in text[:MAX_TOOL_OUTPUT].splitlines():
        line = line.strip()
        m = DCGM_CATEGORY_RE.match(line)
        if m:
            cat, cur, last_label = m.group(1).strip(), None, None
            continue
        if not line.startswith("|") or line.startswith(("|=", "|-")):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 2:
            continue
        name, value = cells
        if name in DCGM_META:
            doc[DCGM_META[name]] = value
            continue
        if name == "Diagnostic" and value == "Result":
            continue
        if name in ("Warning", "Info", "Error") and cur is not None:
            cur["detail"].append("%s: %s" % (name, value))
            last_label = name
            if name == "Error":
                cur["verdict"] = "fail"  # an Error row: the test could not complete
            continue
        if not name:
            gm = DCGM_GPU_ROW_RE.match(value)
            if gm and cur is not None and _verdict(gm.group(2)):
                _gpu_verdict(cur, gm.group(1), _verdict(gm.group(2)))
            elif cur is not None and last_label and cur["detail"]:
                cur["detail"][-1] += value if value.startswith(" ") else " " + value
            elif cur is not None:
                _verdict_cell(cur, value)
            continue
        first = value.split(" ", 1)[0]
        if _verdict(first) and cat != "Metadata":
            cur = {"name": name, "category": cat, "verdict": None, "gpus": {}, "detail": []}
            doc["tests"].append(cur)
            last_label = None
            _verdict_cell(cur, value)
    for t in doc["tests"]:
        t["detail"] = [d[:300] for d in t["detail"][:16]]
        t["verdict"] = t["verdict"] or "skip"
    return doc


def _verdict_cell(test, value):
    """`Pass`, `Fail - All`, `Fail - GPU: 1`, `Pass - GPUs: 0, 2` -> the test's verdict and GPUs."""
    head = value.split(" - ", 1)
    v = _verdict(head[0])
    if v is None:
        return
    m = DCGM_GPUS_RE.match(value)
    if m:
        for gid in re.findall(r"\d+", m.group(2)):
            _gpu_verdict(test, gid, v)
    elif len(head) == 2 and head[1].strip().lower() == "all":
        test["gpus"]["all"] = v
    test["verdict"] = _worse(test["verdict"], v)


def _gpu_verdict(test, gid, verdict):
    """A verdict on GPU `gid` (digits from the tool's output). The test's verdict takes it whatever the
    id; only a GPU index (at most 4 digits, and 64 GPUs a test) gets its own entry."""
    if len(gid) <= 4:
        key = str(int(gid))
        if key in test["gpus"] or len(test["gpus"]) < 64:
            test["gpus"][key] = _worse(test["gpus"].get(key), verdict)
    test["verdict"] = _worse(test["verdict"], verdict)


_VERDICT_RANK = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}


def _worse(a, b):
    """The worse of two verdicts; None (nothing seen yet) yields to anything."""
    if a is None:
        return b
    return a if _VERDICT_RANK[a] >= _VERDICT_RANK[b] else b


DCGM_FE_GPU = 1  # DCGM 4.x results name their entity: entity_group "GPU", entity_group_id DCGM_FE_GPU


def parse_dcgmi_json(text):
    """`dcgmi diag -j` -> the same structure as parse_dcgmi_diag, or None. Three layouts:
    DCGM 3.x: {"DCGM GPU Diagnostic": {"version", "test_categories": [{category, tests: [{name,
    results: [{gpu_ids, status, warnings}]}]}]}}; DCGM 4.x (NVIDIA's testing/python3/dcgm_diag_schema.json):
    {"DCGM Diagnostic": {"test_categories": [... results: [{entity_group, entity_group_id, entity_id,
    status, warnings}], test_summary: {status}], "runtime_error"}, "entity_groups", "metadata": {"version",
    "Driver Version Detected"}}; and a bare top-level "tests" list."""
    text = text[:MAX_TOOL_OUTPUT]
    brace = text.find("{")
    if brace < 0:
        return None
    try:
        data = json.loads(text[brace:])
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    root = next((data[k] for k in ("DCGM GPU Diagnostic", "DCGM Diagnostic") if isinstance(data.get(k), dict)),
                data)
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    doc = {"version": root.get("version") or meta.get("version"),
           "driver": root.get("driver_version_detected") or root.get("driver_version")
           or meta.get("Driver Version Detected"), "tests": []}
    if isinstance(root.get("runtime_error"), str) and root["runtime_error"]:
        doc["runtime_error"] = root["runtime_error"][:300]  # the diagnostic could not run: no verdict
    cats = root.get("test_categories")
    if isinstance(cats, list):
        pairs = [(c.get("category"), t) for c in cats if isinstance(c, dict)
                 for t in (c.get("tests") or []) if isinstance(t, dict)]
    else:
        pairs = [(t.get("category"), t) for t in (root.get("tests") or []) if isinstance(t, dict)]
    for cat, t in pairs[:256]:
        doc["tests"].append(_json_test(cat, t))
    return doc if doc["tests"] or doc["version"] or doc.get("runtime_error") else None


def _json_test(cat, t):
    test = {"name": str(t.get("name"))[:80], "category": cat, "verdict": None, "gpus": {}, "detail": []}
    for r in (t.get("results") or [])[:256]:
        if not isinstance(r, dict):
            continue
        v = _verdict(str(r.get("status", "")))
        if v is None:
            continue
        gpu = r.get("entity_group") == "GPU" or r.get("entity_group_id") == DCGM_FE_GPU
        ids = r.get("gpu_ids", r.get("gpu_id")) if "entity_id" not in r else (r["entity_id"] if gpu else None)
        for gid in re.findall(r"[0-9]+", str(ids)[:256]) if ids is not None else []:
            _gpu_verdict(test, gid, v)
        if ids is None:  # a whole-node result, or another entity (a CPU in DCGM 4.x)
            test["verdict"] = _worse(test["verdict"], v)
        for key in ("warnings", "errors", "info"):
            for w in (r.get(key) or [])[:4]:
                msg = w.get("warning") or w.get("error") or w.get("message") if isinstance(w, dict) else w
                test["detail"].append("%s: %s" % (key, str(msg)[:300]))
    summary = t.get("test_summary")
    if isinstance(summary, dict) and _verdict(str(summary.get("status", ""))):
        test["verdict"] = _worse(test["verdict"], _verdict(str(summary["status"])))
    test["verdict"] = test["verdict"] or "skip"
    return test


PERFTEST_UNITS = {"MB/sec": 1048576 * 8 / 1e9, "MiB/sec": 1048576 * 8 / 1e9, "Gb/sec": 1.0,
                  "GB/sec": 8.0, "GB/s": 8.0}  # perftest's MB is 2^20 bytes (newer versions say MiB)


def parse_perftest(text):
    """-> {gbps, bytes, rows, unit} of the largest message size in perftest bandwidth output (`-a` sweeps
    print one row per size; warnings may sit between the header and the rows), or None."""
    unit, best, rows = None, None, 0
    for line in text[:MAX_TOOL_OUTPUT].splitlines():
        m = re.search(r"BW average\[([^\]]+)\]", line)
        if m:
            unit = m.group(1)
            continue
        cols = line.split()
        if unit in PERFTEST_UNITS and len(cols) >= 4 and cols[0].isdigit() and cols[1].isdigit():
            avg = number_or_none(cols[3], float)
            if avg is None:
                continue
            rows += 1
            size = int(cols[0])
            if best is None or size >= best[0]:
                best = (size, avg)
    if best is None:
        return None
    return {"gbps": round(best[1] * PERFTEST_UNITS[unit], 3), "bytes": best[0], "rows": rows, "unit": unit}


def parse_ib_write_bw(text):
    """-> average bandwidth in Gb/s of the largest message size (see parse_perftest), or None."""
    p = parse_perftest(text)
    return None if p is None else p["gbps"]


def check_nccl(args, deadline, gpu_count):
    exe = which("all_reduce_perf")
    if exe is None:
        return [result("deep.nccl", "skipped", "all_reduce_perf (nccl-tests) not installed")]
    if not gpu_count:
        return [result("deep.nccl", "skipped", "no GPUs to run all_reduce_perf on")]
    argv = [exe, "-b", "8", "-e", "1G", "-f", "2", "-g", str(gpu_count)]
    rc, out, err = run_cmd(argv, deadline, timeout=300)
    parsed = parse_nccl_tests(out)
    return [judge_nccl(parsed, rc, err or out, float((args.get("thresholds") or {}).get("nccl_busbw_min_gbs") or 0))]


def judge_nccl(parsed, rc, output, minimum):
    """One deep.nccl result from a parsed run, the exit status and the tool's own output."""
    if rc != 0 or parsed is None or parsed["failure"] or not parsed["sizes"]:
        why = "timed out" if rc == "timeout" else (parsed or {}).get("failure") or \
            output.strip()[-200:] or "exit %s" % rc
        return result("deep.nccl", "fail", "all_reduce_perf failed: %s" % why, "reset-gpu",
                      dict(parsed or {}, rc=rc))
    ev = dict(parsed, min_gbs=minimum or None, rc=rc)
    if parsed["wrong"] or parsed["out_of_bounds"]:
        return result("deep.nccl", "fail", "all_reduce_perf produced wrong results", "inspect-hardware", ev)
    if minimum and (parsed["avg_busbw_gbs"] or 0) < minimum:
        return result("deep.nccl", "fail", "bus bandwidth %.1f GB/s < %g GB/s" % (
            parsed["avg_busbw_gbs"], minimum), "inspect-hardware", ev)
    return result("deep.nccl", "ok", "bus bandwidth %.1f GB/s%s%s" % (
        parsed["avg_busbw_gbs"] or 0, "" if minimum else " (judged against the fleet baseline)",
        "" if parsed["validated"] else "; results not validated (-c 0)"), evidence=ev)


def check_dcgm(args, deadline):
    level = int(args.get("dcgm_level") or 1)
    rc, out, err = run_cmd(["dcgmi", "diag", "-r", str(level), "-j"], deadline, timeout=900)
    if rc is None:
        return [result("deep.dcgm", "skipped", "dcgmi (DCGM) not installed")]
    doc = parse_dcgmi_json(out) or parse_dcgmi_diag(out)
    return [judge_dcgm(doc, rc, err or out, level)]


def judge_dcgm(doc, rc, output, level):
    """One deep.dcgm result. A GPU that fails any test is never ok; a non-zero exit without a failing
    test is an error (dcgmi could not run the diagnostic), never a pass."""
    tests = (doc or {}).get("tests") or []
    if not tests:
        why = (doc or {}).get("runtime_error") or ("timed out" if rc == "timeout" else output.strip()[-200:]
                                                   or "exit %s" % rc)
        return result("deep.dcgm", "error", "dcgmi diag -r %d gave no results: %s" % (level, why),
                      evidence={"rc": rc})
    failed = [t for t in tests if t["verdict"] == "fail"]
    warned = [t for t in tests if t["verdict"] == "warn"]
    gpus = sorted({g for t in failed for g, v in t["gpus"].items() if v == "fail"},
                  key=lambda g: (g == "all", int(g) if g.isdigit() else 0))
    ev = {"level": level, "rc": rc, "version": doc.get("version"), "driver": doc.get("driver"),
          "failed_gpus": gpus, "tests": {t["name"]: {"verdict": t["verdict"], "gpus": t["gpus"],
                                                      "detail": t["detail"][:4]} for t in tests[:64]}}
    subject = "all GPUs" if "all" in gpus else ",".join("gpu%s" % g for g in gpus)
    if failed:
        return result("deep.dcgm", "fail", "dcgmi diag -r %d failed: %s%s" % (
            level, ", ".join(t["name"] for t in failed), " on %s" % subject if subject else ""),
            "inspect-hardware", ev, subject)
    if rc not in (0, None):
        return result("deep.dcgm", "error", "dcgmi diag -r %d exited %s without a failing test" % (level, rc),
                      evidence=ev)
    if warned:
        return result("deep.dcgm", "warn", "dcgmi diag -r %d warned: %s" % (
            level, ", ".join(t["name"] for t in warned)), "none", ev)
    ran = [t for t in tests if t["verdict"] == "pass"]
    if not ran:
        return result("deep.dcgm", "warn", "dcgmi diag -r %d: every test was skipped" % level, "none", ev)
    return result("deep.dcgm", "ok", "dcgmi diag -r %d: %d tests passed, %d skipped" % (
        level, len(ran), len(tests) - len(ran)), evidence=ev)


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
        gbps = parse_ib_write_bw(out) if rc == 0 else None  # largest size of the run
        return gbps, None if gbps is not None else (err.strip()[-160:] or "exit %s" % rc)
    finally:
        server.kill()
        server.wait()
