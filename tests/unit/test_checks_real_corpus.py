"""The node checks judged on real outputs written by other people's tools and machines
(tests/data/real/, where each came from: tests/data/real/PROVENANCE.md).

Every sample has an expectation read by hand from the sample itself and the tool's documentation (the
comment says why): the parsed facts and the verdict. A sample without an expectation fails the suite.
"""

import calendar
import time
from pathlib import Path

import pytest

from fleetctl.checks.payload.deep import (judge_dcgm, judge_nccl, parse_dcgmi_diag, parse_dcgmi_json,
                                          parse_nccl_tests, parse_perftest)
from fleetctl.checks.payload.gpu_collect import GpuSourceError, merge_smi_nvlink, parse_smi_xml
from fleetctl.checks.payload.gpu_judge import judge_gpus
from fleetctl.checks.payload.host import judge_clock, parse_chronyc_tracking, parse_ntpq_peers
from fleetctl.checks.payload.xid import judge_scan, line_time, scan_lines

REAL = Path(__file__).parents[1] / "data" / "real"
BOOT = 1_000_000.0  # boot epoch for dmesg/kmsg uptime stamps


def utc(text):
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def local(*fields):
    return time.mktime(tuple(fields) + (0, 0, -1))


# ---------------------------------------------------------------- kernel logs
# file -> {"<code>@<subject>": (status, action, count)} for every finding, plus optional facts:
# "first": {finding: epoch}, "evidence": {finding: {key: value}}, "time": (line prefix, epoch) of one line
KERN = {
    # dmesg -T (local wall clock in brackets), R5xx GSP timeout flood on an H100 XE9680: catalog RESET_GPU
    "kern-dmesg-T-xid119-gsp.log": {
        "findings": {"xid.119@0000:9b:00": ("fail", "reset-gpu", 5)},
        "first": {"xid.119@0000:9b:00": local(2025, 2, 23, 16, 24, 18)},
        "evidence": {"xid.119@0000:9b:00": {"pid": "2024380", "process": "nvidia-smi"}}},
    # plain dmesg, R570: the GPU is announced gone over three lines and no Xid is printed: still an Xid 79
    "kern-dmesg-fallen-off-bus-no-xid.log": {
        "findings": {"xid.79@0000:b3:00": ("fail", "reboot", 1)},
        "first": {"xid.79@0000:b3:00": BOOT + 1843.308145},
        "evidence": {"xid.79@0000:b3:00": {"fallen_off_bus_message": True}}},
    # dmesg --decode --time-format iso, only the Data line of SXid 12028: fatal per the FM catalog
    "kern-dmesg-decode-iso-sxid12028.log": {
        "findings": {"sxid.12028@0000:84:00.0": ("fail", "reboot", 1)},
        "first": {"sxid.12028@0000:84:00.0": utc("2025-01-25T10:34:54") + 0.859532},
        "evidence": {"sxid.12028@0000:84:00.0": {"device": "nvidia-nvswitch1"}}},
    # plain dmesg at boot: NVSwitch link interrupts the driver itself calls Non-fatal
    "kern-dmesg-sxid22013-nonfatal.log": {
        "findings": {"sxid.22013@0000:04:00.0": ("warn", "none", 8)}},
    # journalctl lines with the time cut off: Xid 45 names its cause; the cause lines are not in the
    # excerpt, so each GPU is judged as its cause (NVLink5 errors that killed the job: reset)
    "kern-journal-xid45-caused-by-previous.log": {
        "findings": {"xid.45@0000:dc:00": ("fail", "reset-gpu", 2), "xid.45@0000:ed:00": ("fail", "reset-gpu", 2),
                     "xid.45@0000:ba:00": ("fail", "reset-gpu", 2), "xid.45@0000:97:00": ("fail", "reset-gpu", 1)},
        "evidence": {"xid.45@0000:dc:00": {"caused_by": [149]}, "xid.45@0000:97:00": {"caused_by": [145]}},
        "stats": {"untimed": 7}},
    # kmsg message text of Blackwell NVLink errors: the driver prints Fatal or Nonfatal per event
    "kern-kmsg-nvlink-xid144-149.log": {
        "findings": {"xid.149@0019:01:00": ("fail", "reset-gpu", 1), "xid.149@0000:00:00": ("fail", "reset-gpu", 1),
                     "xid.145@0018:01:00": ("warn", "none", 1), "xid.144@0000:01:00": ("warn", "none", 1),
                     "xid.94@0000:9b:00": ("warn", "restart-app", 1)}},
    # plain dmesg, MIG test tool: Xid 43 is IGNORE in the catalog
    "kern-dmesg-xid43-mig.log": {
        "findings": {"xid.43@0009:01:00": ("ok", "none", 1)},
        "first": {"xid.43@0009:01:00": BOOT + 1231741.378609},
        "evidence": {"xid.43@0009:01:00": {"pid": "3188489", "process": "trigger_xid"}}},
    # journalctl short without host name, RTX PRO 6000 Blackwell, driver 595: the printed recovery action
    "kern-journal-nohost-xid120-154.log": {
        "findings": {"xid.120@0000:01:00": ("fail", "reset-gpu", 1), "xid.154@0000:01:00": ("fail", "reset-gpu", 1)},
        "evidence": {"xid.154@0000:01:00": {"recovery_action": "GPU Reset Required"}}},
    "kern-journal-nohost-xid62-154-45.log": {
        "findings": {"xid.62@0000:01:00": ("fail", "reset-gpu", 1), "xid.154@0000:01:00": ("fail", "reset-gpu", 1),
                     "xid.45@0000:01:00": ("ok", "none", 1)},  # 45 next to 62 on the same GPU: cleanup
        "evidence": {"xid.45@0000:01:00": {"pid": "12542", "process": "VLLM::Worker"}}},
    # bare NVRM lines (no time at all), RTX 5080: untimed, still judged
    "kern-bare-xid62-154-gsp-crashcat.log": {
        "findings": {"xid.62@0000:01:00": ("fail", "reset-gpu", 1), "xid.154@0000:01:00": ("fail", "reset-gpu", 1)},
        "stats": {"untimed": 2}},
    # rsyslog RFC 3339 with +03:00; the "GPU has fallen off the bus" line repeats the Xid 79: one finding
    "kern-rsyslog-rfc3339-xid79.log": {
        "findings": {"xid.79@0000:01:00": ("fail", "reboot", 1)},
        "first": {"xid.79@0000:01:00": utc("2026-06-01T12:55:06") + 0.218036},
        "evidence": {"xid.79@0000:01:00": {"pid": "30393", "process": "Media"}}},
    # 2015 syslog, 304xx driver, no pid/name: Xids the catalog marks unused today: inspect, not ignore
    "kern-syslog-xid1-xid9-2015.log": {
        "findings": {"xid.1@0000:01:00": ("warn", "inspect-hardware", 1),
                     "xid.9@0000:01:00": ("warn", "inspect-hardware", 1)}},
    # dmesg --decode iso: Xid 13 with pid='<unknown>'
    "kern-dmesg-decode-iso-xid13.log": {
        "findings": {"xid.13@0000:38:00": ("warn", "restart-app", 1)},
        "first": {"xid.13@0000:38:00": utc("2025-01-21T04:26:49") + 0.803751},
        "evidence": {"xid.13@0000:38:00": {"pid": "<unknown>", "process": "<unknown>"}}},
    # formats without any Xid: nothing found, and the line times are read
    "kern-dmesg-decode-iso-segfault.log": {
        "findings": {}, "time": ("kern  :warn  : 2025-01-21T04:41:44,285060+00:00 ",
                                 utc("2025-01-21T04:41:44") + 0.28506)},
    "kern-journal-ru-locale.log": {"findings": {}, "time": ("июл 27 14:08:03 laptop kernel: ", "month 7")},
    "kern-rfc5424-btrfs.log": {"findings": {}, "time": ("2022-12-26T07:44:45.000000+01:00 server02 kernel - - - ",
                                                        utc("2022-12-26T06:44:45"))},
    "kern-kmsg-nvswitch-open.log": {"findings": {}, "time": ("6,3964,206764307,-;", BOOT + 206.764307)},
    # driver 295 (2012): `Xid (0000:01:00): N, ...` with no `PCI:`, no pid, no name: compiz crashing in
    # libnvidia-glcore, application-level Xids (31 MMU fault, 13 graphics exception, 32 pushbuffer)
    "kern-xid-295-precise-13-31-32-no-name.log": {
        "findings": {"xid.31@0000:01:00": ("warn", "restart-app", 2), "xid.13@0000:01:00": ("warn", "restart-app", 2),
                     "xid.32@0000:01:00": ("warn", "restart-app", 4)},
        "first": {"xid.31@0000:01:00": BOOT + 1032.911832, "xid.32@0000:01:00": BOOT + 1037.046654}},
    # driver 304 (2013), bare lines (no time at all): display engine hung (16) eight times, then 8
    "kern-xid-304-optimus-16-8-no-name.log": {
        "findings": {"xid.16@0000:01:00": ("warn", "inspect-hardware", 8), "xid.8@0000:01:00": ("warn", "restart-app", 1)},
        "stats": {"untimed": 9}},
    # journal in a locale with lowercase month names ("sep"), driver 610 loading, an IRQ storm: no Xid
    "kern-locale-lowercase-sep-cachyos-nvrm-610.log": {"findings": {}, "time": ("sep 03 13:25:15 cachyos kernel: ",
                                                                                  "sep 3 13:25:15")},
}


def _kern_facts(name):
    raw = (REAL / name).read_bytes().splitlines()
    scan = scan_lines(raw, boot=BOOT)
    out = judge_scan(scan, {"boot_id": "b", "boot_epoch": BOOT}, {}, name)
    return scan, {"%s@%s" % (r["code"], r["subject"]): r for r in out if r["code"] not in ("xid.scan",)}


@pytest.mark.parametrize("name", sorted(KERN))
def test_kernel_log_samples(name):
    want = KERN[name]
    scan, found = _kern_facts(name)
    assert {k: (r["status"], r["action"], r["evidence"]["count"]) for k, r in found.items()} == want["findings"]
    for key, epoch in want.get("first", {}).items():
        assert found[key]["evidence"]["first"] == pytest.approx(epoch), key
    for key, facts in want.get("evidence", {}).items():
        assert {k: found[key]["evidence"].get(k) for k in facts} == facts, key
    for key, value in want.get("stats", {}).items():
        assert scan.stats[key] == value, key
    if "time" in want:
        prefix, expected = want["time"]
        t = line_time(prefix, BOOT)
        if expected == "month 7":
            assert time.localtime(t)[1:6] == (7, 27, 14, 8, 3)
        elif expected == "sep 3 13:25:15":
            assert time.localtime(t)[1:6] == (9, 3, 13, 25, 15)
        else:
            assert t == pytest.approx(expected)
    assert scan.stats["unparsed"] == 0


# ---------------------------------------------------------------- dcgmi diag
# file -> (verdict of the check, subject, {test: verdict}, version)
DCGM = {
    # DCGM 2.x ("Blacklist", "Page Retirement"), no metadata block
    "dcgmi-diag-2x-pass.txt": ("ok", "", {"Blacklist": "pass", "Page Retirement": "pass"}, None),
    "dcgmi-diag-2x-fail.txt": ("fail", "", {"Persistence Mode": "fail", "Inforom": "fail", "NVML Library": "pass"},
                               None),
    "dcgmi-diag-3.3.9-r1-pass.txt": ("ok", "", {"Denylist": "pass", "Inforom": "pass"}, "3.3.9"),
    # -v: Info rows with continuation rows between the tests; EUD skipped is not a pass
    "dcgmi-diag-3.3.9-r3-pass-verbose.txt": ("ok", "", {"PCIe": "pass", "Diagnostic": "pass",
                                                        "Targeted Power": "pass", "EUD Test": "skip"}, "3.3.9"),
    # cuInit failed on every GPU: GPU Memory "Fail - All" with one Warning per GPU
    "dcgmi-diag-3.3.8-r3-cuda-init-fail.txt": ("fail", "all GPUs", {"GPU Memory": "fail", "PCIe": "skip",
                                                                    "Persistence Mode": "pass"}, "3.3.8"),
    # DCGM 4.x: one row per GPU under each test
    "dcgmi-diag-4.2.3-per-gpu-rows.txt": ("ok", "", {"software": "pass", "memory": "pass"}, "4.2.3"),
    # dcgmi diag -j of DCGM 3.1.0 with a warning line before the JSON and null entries in the test list
    "dcgmi-diag-3.1.0-json.txt": ("ok", "", {"Denylist": "pass", "software": "pass"}, "3.1.0"),
}


@pytest.mark.parametrize("name", sorted(DCGM))
def test_dcgmi_diag_samples(name):
    status, subject, verdicts, version = DCGM[name]
    text = (REAL / name).read_text()
    doc = parse_dcgmi_json(text) or parse_dcgmi_diag(text)
    tests = {t["name"]: t["verdict"] for t in doc["tests"]}
    assert {k: tests.get(k) for k in verdicts} == verdicts
    assert doc["version"] == version
    r = judge_dcgm(doc, 0, text, 3)
    assert (r["status"], r["subject"]) == (status, subject), r["message"]


def test_dcgmi_multi_row_result_fails_only_the_failing_gpus():
    """DCGM 4.x prints a test's verdict per GPU: pass on some, fail on another. The 4.2.3 sample with
    GPU2's row turned into a failure (the row format is the sample's own) must fail GPU2 only."""
    text = (REAL / "dcgmi-diag-4.2.3-per-gpu-rows.txt").read_text().replace("GPU2: Pass ", "GPU2: Fail ")
    doc = parse_dcgmi_diag(text)
    software = {t["name"]: t for t in doc["tests"]}["software"]
    assert software["verdict"] == "fail" and software["gpus"] == {"0": "pass", "1": "pass", "2": "fail", "3": "pass"}
    r = judge_dcgm(doc, 0, text, 2)
    assert (r["status"], r["subject"], r["evidence"]["failed_gpus"]) == ("fail", "gpu2", ["2"])


def test_dcgmi_exit_status_is_taken_into_account():
    text = (REAL / "dcgmi-diag-3.3.9-r1-pass.txt").read_text()
    doc = parse_dcgmi_diag(text)
    assert judge_dcgm(doc, 226, text, 1)["status"] == "error"  # non-zero without a failing test: not a pass
    fail = (REAL / "dcgmi-diag-2x-fail.txt").read_text()
    assert judge_dcgm(parse_dcgmi_diag(fail), 0, fail, 1)["status"] == "fail"  # a Fail row wins over rc 0
    assert judge_dcgm(parse_dcgmi_diag("Error: unable to connect to host engine"), 255, "Error", 1)["status"] == "error"


# ---------------------------------------------------------------- nccl-tests
# file -> (verdict, avg busbw GB/s, largest size, busbw there, #wrong, validated)
NCCL = {
    # NCCL 2.6-era layout: no redop/root columns, error printed as a float (0e+00)
    "nccl-2.6-old-layout-0e+00.txt": ("ok", 6.6972, 134217728, 21.86, 0, True),
    "nccl-2.14-allreduce-a100-16rank.txt": ("ok", 175.531, 10737418240, 180.08, 0, True),
    "nccl-v100-8gpu-1g.txt": ("ok", 135.455, 1073741824, 135.5, 0, True),
    # srun -l / mpirun --tag-output "0: " prefixes, validation off (#wrong N/A), no summary line:
    # the average comes from the rows
    "nccl-alltoall-rank-prefix-NA-wrong.txt": ("ok", 95.9279, 536870912, 176.1, 0, False),
    # output cut inside the last row: the cut row is not read
    "nccl-h100-2gpu-truncated-row.txt": ("ok", 1.4043, 65536, 4.83, 0, True),
    # "Test NCCL failure ... unhandled cuda error": a failed run, never a bandwidth
    "nccl-test-failure-unhandled-cuda.txt": ("fail", None, None, None, 0, False),
    # the header printed and no row (old multi-node run): nothing measured is a failure
    "nccl-old-header-v100-2node.txt": ("fail", None, None, None, None, None),
    # old layout with float rounding errors (2e-07, 3e-08) on a clean run ("Out of bounds values : 0 OK"):
    # an error is a magnitude, not a count of wrong results
    "nccl-old-layout-k80-4gpu-2e-07.txt": ("ok", 2.54225, 2147483648, 2.56, 0, True),
    "nccl-old-layout-v100-4gpu-nccl283.txt": ("ok", 4.18969, 134217728, 9.43, 0, True),
    # Open MPI --tag-output ([1,0]<stdout>:), with stderr lines and other ranks' lines between
    "nccl-tag-output-rtx5090-socket.txt": ("ok", 1.57614, 134217728, 2.31, 0, True),
    "nccl-tag-output-efa-t4-2node.txt": ("ok", 1.15327, 1073741824, 3.12, 0, True),
    # a Ray worker's prefix before Open MPI's
    "nccl-ray-tag-output-h200-allgather.txt": ("ok", 122.073, 8589934592, 332.58, 0, True),
}


@pytest.mark.parametrize("name", sorted(NCCL))
def test_nccl_tests_samples(name):
    status, avg, largest, busbw, wrong, validated = NCCL[name]
    text = (REAL / name).read_text()
    p = parse_nccl_tests(text)
    if avg is not None or wrong is not None:
        assert (p["avg_busbw_gbs"], p["largest_bytes"], p["largest_busbw_gbs"], p["wrong"], p["validated"]) == \
            (pytest.approx(avg) if avg else None, largest, busbw, wrong, validated)
    assert judge_nccl(p, 0, text, 0)["status"] == status


def test_old_layout_errors_are_kept_as_their_largest_magnitude():
    p = parse_nccl_tests((REAL / "nccl-old-layout-v100-4gpu-nccl283.txt").read_text())
    assert p["max_error"] == pytest.approx(2e-07) and p["out_of_bounds"] == 0


def test_nccl_wrong_results_in_float_notation_fail():
    text = (REAL / "nccl-2.6-old-layout-0e+00.txt").read_text().replace("20.34  0e+00", "20.34  2e+00", 1)
    p = parse_nccl_tests(text)
    assert p["wrong"] == 1 and judge_nccl(p, 0, text, 0)["status"] == "fail"  # one size far off


# ---------------------------------------------------------------- perftest
# file -> (Gb/s of the largest size, bytes of that size, rows). MB/sec and MiB/sec are 2^20 bytes.
PERFTEST = {
    "ibwb-roce-gbits-postlist.txt": (0.48, 8, 1),  # --report_gbits: already Gb/s
    "ibwb-mib-roce-65536.txt": (11030.45 * 2**20 * 8 / 1e9, 65536, 1),
    "ibwb-mib-ib-home-lab.txt": (3293.56 * 2**20 * 8 / 1e9, 65536, 1),
    "ibwb-mib-gpudirect-cuda.txt": (14948.67 * 2**20 * 8 / 1e9, 65536, 1),
    "ibwb-mib-rocm-8m.txt": (19044.43 * 2**20 * 8 / 1e9, 8388608, 1),
    "ibwb-mib-cpu-freq-warning.txt": (46557.03 * 2**20 * 8 / 1e9, 65536, 1),  # warning between header and row
    "ibwb-send-bw-a-sweep-efa.txt": (8909.75 * 2**20 * 8 / 1e9, 8192, 13),  # -a: the largest size is judged
    "ibwb-mib-bidir-duplicate-header.txt": (4020.54 * 2**20 * 8 / 1e9, 1000, 2),
    "ibwb-mib-siw-rdma-cm.txt": (6595.36 * 2**20 * 8 / 1e9, 65536, 1),
}


@pytest.mark.parametrize("name", sorted(PERFTEST))
def test_perftest_samples(name):
    gbps, size, rows = PERFTEST[name]
    p = parse_perftest((REAL / name).read_text())
    assert (p["gbps"], p["bytes"], p["rows"]) == (pytest.approx(gbps, abs=0.001), size, rows)


# ---------------------------------------------------------------- clock sync
# file -> (parser, synced, offset ms, check status). A local-clock reference is not a synchronisation.
CLOCK = {
    "chronyc-tracking-local-7f7f0101-2019.txt": (parse_chronyc_tracking, False, 0.0, "warn"),
    "chronyc-tracking-local-srlinux-2026.txt": (parse_chronyc_tracking, False, 0.0, "warn"),
    "chronyc-tracking-local-offset-6ms.txt": (parse_chronyc_tracking, False, -6.055588, "warn"),
    "chronyc-tracking-local-stratum8-head.txt": (parse_chronyc_tracking, False, -0.68, "warn"),
    "ntpq-p-locl-sys-peer.txt": (parse_ntpq_peers, False, 0.0, "warn"),  # "*LOCAL(0) .LOCL." selected
    "ntpq-p-locl-init-no-peer.txt": (parse_ntpq_peers, False, None, "warn"),  # nothing selected at all
}


@pytest.mark.parametrize("name", sorted(CLOCK))
def test_clock_samples(name):
    parse, synced, offset, status = CLOCK[name]
    info = parse((REAL / name).read_text())
    assert (info["synced"], info["offset_ms"]) == (synced, pytest.approx(offset) if offset is not None else None)
    r = judge_clock(info, {"clock_offset_warn_ms": 1.0, "clock_offset_fail_ms": 100.0})
    assert r["status"] == status and "not synchronized" in r["message"]


# ---------------------------------------------------------------- nvidia-smi -q -x
SMI_XML = {
    # L4, driver 555: ECC on and clean, remapping clean, no retired-page counts (Ada), idle clocks
    "smi-q-x-l4-555.xml": {
        "driver_version": "555.42.06", "cuda_version": "12.5",
        "gpu": {"name": "NVIDIA L4", "pci_bus_id": "00000000:01:00.0", "persistence_mode": False,
                "ecc_mode": True, "ecc": {"volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 0, "aggregate_dbe": 0},
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                "retired_pages": None, "throttle_reasons": ["gpu_idle"], "temperature_c": 45, "power_w": 27.22,
                "pcie": {"gen": 4, "max_gen": 4, "width": 16, "max_width": 16}, "vbios_version": "95.04.29.00.06"},
        "status": {"gpu.ecc": "ok", "gpu.remap": "ok", "gpu.persistence": "warn", "gpu.throttle": "ok"}},
    # laptop RTX 4070, driver 575: ECC N/A (not a zero), GPU Recovery Action "None", PCIe gen 2 of 4 at idle
    "smi-q-x-rtx4070-575.xml": {
        "driver_version": "575.51.02", "cuda_version": "12.9",
        "gpu": {"name": "NVIDIA GeForce RTX 4070 Laptop GPU", "persistence_mode": True, "ecc_mode": None,
                "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
                "recovery_action": "None", "serial": None,
                "pcie": {"gen": 2, "max_gen": 4, "width": 8, "max_width": 8}},
        "status": {"gpu.ecc": "ok", "gpu.recovery": "ok", "gpu.pcie": "ok"}},  # N/A is "no ECC", not "ECC off"
}


@pytest.mark.parametrize("name", sorted(SMI_XML))
def test_nvidia_smi_xml_samples(name):
    want = SMI_XML[name]
    record = parse_smi_xml((REAL / name).read_text())
    assert (record["driver_version"], record["cuda_version"]) == (want["driver_version"], want["cuda_version"])
    gpu = record["gpus"][0]
    assert {k: gpu.get(k) for k in want["gpu"]} == want["gpu"]
    results = {r["code"]: r["status"] for r in judge_gpus(record, {}, {})}
    assert {k: results.get(k) for k in want["status"]} == want["status"]


def test_nvidia_smi_xml_same_facts_as_the_csv_path():
    """The XML record has every key the CSV/NVML record has (judge_gpus reads one shape)."""
    from fleetctl.checks.payload.gpu_collect import SMI_FIELDS, parse_smi_csv
    csv_keys = set(parse_smi_csv(",".join(["1"] * len(SMI_FIELDS)))["gpus"][0])
    xml_keys = set(parse_smi_xml((REAL / "smi-q-x-l4-555.xml").read_text())["gpus"][0])
    assert csv_keys <= xml_keys


@pytest.mark.parametrize("doc", [
    '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>',
    '<!DOCTYPE nvidia_smi_log [<!ELEMENT nvidia_smi_log ANY>]><nvidia_smi_log/>',
    "<nvidia_smi_log><gpu>" * 3,
    "<other/>",
])
def test_nvidia_smi_xml_refuses_dangerous_or_foreign_documents(doc):
    with pytest.raises(GpuSourceError):
        parse_smi_xml(doc)


# Fabric discovery samples: their expectations are in test_discover_real.py.
DISCOVER = ("ibnetdiscover-x5-voltaire-qdr.topo", "ibnetdiscover-x5-voltaire-qdr.map",
            "ibnetdiscover-x5-voltaire-qdr.spine", "lldpcli-json-nexus-eno8303.json",
            "lldpcli-json-list-router-eno1.json", "lldpcli-json-single-nameless-chassis.json")


# OpenSSH client errors: their expectations are in test_fanout_clush.py.
OPENSSH = ("openssh-9.2p1-hostkey-changed.txt", "openssh-9.2p1-hostkey-unknown.txt", "openssh-9.2p1-auth-denied.txt",
           "openssh-9.2p1-connect-timeout.txt", "openssh-9.2p1-banner-timeout.txt", "openssh-9.2p1-refused.txt",
           "openssh-9.2p1-unresolved.txt", "openssh-maxstartups-reset-nixos-2024.txt",
           "openssh-kex-closed-shellcrash-2022.txt", "openssh-7-exchange-reset-machinery-2016.txt")


# nvidia-smi nvlink --status: sample -> (GPU count, NVLinks the node class expects, status, GPUs at fault).
# A GPU with every link down prints NVML's message instead of Link lines: 0 active, never "not reported";
# judged against the class: a fault where links are expected, nothing where none are (PCIe cards).
NVLINK = {
    "smi-nvlink-a6000-gpu2-all-inactive.txt": (3, 4, "fail", "gpu2"),
    "smi-nvlink-rtx3090x4-all-inactive.txt": (4, 0, "ok", ""),
    "smi-nvlink-a100-pcie-all-inactive.txt": (2, 0, "ok", ""),
    "smi-nvlink-gh200-single-Nvlink-spelling.txt": (1, 0, "ok", ""),
}


@pytest.mark.parametrize("name", sorted(NVLINK))
def test_nvlink_status_samples(name):
    count, want, status, subject = NVLINK[name]
    record = {"gpus": [{"index": i, "nvlink": None} for i in range(count)]}
    merge_smi_nvlink(record, (REAL / name).read_text())
    assert all(g["nvlink"] is not None for g in record["gpus"])  # every GPU reported
    [r] = [r for r in judge_gpus(record, {"nvlinks": want}, {}) if r["code"] == "gpu.nvlink"]
    assert (r["status"], r.get("subject", "")) == (status, subject), r


def test_all_links_down_where_the_class_expects_nvlink_is_a_failure():
    record = {"gpus": [{"index": i, "nvlink": None} for i in range(4)]}
    merge_smi_nvlink(record, (REAL / "smi-nvlink-rtx3090x4-all-inactive.txt").read_text())
    [r] = [r for r in judge_gpus(record, {"nvlinks": 4}, {}) if r["code"] == "gpu.nvlink"]
    assert r["status"] == "fail" and "0 of 4 NVLinks active" in r["message"]


# NIC error counters: their expectations are in test_checks_real_nic.py.
NIC = ("perfquery-x-switch-linkdowned-xmitdiscards.txt", "perfquery-x-switch-2ports-clean.txt",
       "perfquery-x-hca-clean.txt", "perfquery-x-rhel75-all-zero.txt", "perfquery-basic-cx4-edr-homelab-clean.txt",
       "ib-sysfs-counters-mlx5-cx7-saturated-linkdowned-xmitdiscards.txt",
       "ethtool-S-mlx5-cx6dx-crc-symbol-lane-errors-filtered.txt",
       "ethtool-S-mlx5-xdp-rx-discards-phy-nonzero-only.txt")


# NVLink fabric, IMEX, NVLink errors, fabric manager: their expectations are in test_checks_real_fabric.py.
FABRIC = ("smi-q-fabric-azure-insufficient-resources.txt", "smi-q-fabric-gb200-completed-unhealthy.txt",
          "smi-q-fabric-hgx-550-completed-short.txt", "smi-q-fabric-inprogress-580.txt",
          "imex-ctl-gb200-aws-18node-up.txt", "imex-ctl-gh200-1node-up.txt", "imex-ctl-gh200-2node-up.txt",
          "smi-nvlink-e-a100-sxm4-535-clean.txt", "fabricmanager-a40-nv-warn-nothing-to-do-zh-locale.txt",
          "fabricmanager-aws-nvl5-systemctl-active-probe.txt", "fabricmanager-h20-journal-pre-nvl5-configured.txt",
          "fabricmanager-rtx4090-pre-nvl5-nothing-to-do.txt")


def test_every_sample_has_an_expectation_and_a_provenance():
    samples = {p.name for p in REAL.iterdir() if p.name != "PROVENANCE.md"}
    expected = (set(KERN) | set(DCGM) | set(NCCL) | set(PERFTEST) | set(CLOCK) | set(SMI_XML) | set(DISCOVER)
                | set(OPENSSH) | set(NVLINK) | set(NIC) | set(FABRIC)
                | {"clush-groups-cluster.yaml"})  # test_nodegroups.py
    assert samples == expected
    assert len(samples) >= 90
    provenance = (REAL / "PROVENANCE.md").read_text()
    assert [s for s in sorted(samples) if "`%s`" % s not in provenance] == []
