"""Host checks (mounts, clock tools, CPUs/memory) and deep-test output parsers."""

from pathlib import Path

import pytest

from fleetctl.checks.payload.common import Deadline
from fleetctl.checks.payload.deep import (check_dcgm, check_ib_write_bw, check_nccl, parse_dcgmi_diag,
                                          parse_ib_write_bw, parse_nccl_tests)
from fleetctl.checks.payload.host import (check_clock, check_cpus_memory, check_mounts, judge_clock,
                                          parse_chronyc_tracking, parse_mounts, parse_ntpq_peers,
                                          parse_pmc_time_status, parse_timedatectl)

FIX = Path(__file__).parents[1] / "fixtures" / "checks"
TH = {"clock_offset_warn_ms": 1.0, "clock_offset_fail_ms": 100.0, "disk_free_min_pct": 5.0}


def fix(name):
    return (FIX / name).read_text()


def test_clock_parsers():
    c = parse_chronyc_tracking(fix("chronyc-tracking.txt"))
    assert c["synced"] and abs(c["offset_ms"] + 0.021347) < 1e-9 and c["source"] == "169.254.169.123"
    assert judge_clock(c, TH)["status"] == "ok"
    u = parse_chronyc_tracking(fix("chronyc-unsynced.txt"))
    assert u["synced"] is False and judge_clock(u, TH)["status"] == "warn"
    n = parse_ntpq_peers(fix("ntpq-pn.txt"))
    assert n == {"tool": "ntpq", "offset_ms": -0.213, "synced": True, "source": "10.0.0.2"}
    p = parse_pmc_time_status(fix("pmc-time-status.txt"))
    assert p["offset_ms"] == -0.00125 and p["synced"]
    assert parse_timedatectl(fix("timedatectl-show.txt"))["synced"] is False
    assert parse_chronyc_tracking("506 Cannot talk to daemon") is None


def test_clock_offset_limits():
    assert judge_clock({"tool": "x", "synced": True, "offset_ms": 2.5}, TH)["status"] == "warn"
    r = judge_clock({"tool": "x", "synced": True, "offset_ms": -250.0}, TH)
    assert (r["status"], r["action"]) == ("fail", "drain")


def test_clock_without_any_tool_is_skipped_with_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("fleetctl.checks.payload.common.which", lambda name, *a: None)
    r = check_clock(TH, Deadline(5))[0]
    assert r["status"] == "skipped" and "chronyc absent" in r["message"]


def test_mounts(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw,relatime 0 0\n"
                      f"tmpfs {tmp_path} tmpfs rw,nosuid 0 0\n"
                      "nfs:/export /scratch nfs ro,vers=4.2 0 0\n"
                      "/dev/sdb1 /data\\040disk ext4 rw 0 0\n")
    assert parse_mounts(mounts.read_text())["/data disk"] == ["rw"]
    out = check_mounts([str(tmp_path), "/scratch", "/home/absent"], TH, str(mounts))
    by = {(r["code"], r["subject"]): r for r in out}
    assert by[("host.mount", str(tmp_path))]["status"] == "ok"
    assert by[("host.disk", str(tmp_path))]["status"] == "ok"
    assert by[("host.mount", "/scratch")]["status"] == "fail" and "read-only" in by[("host.mount", "/scratch")]["message"]
    assert by[("host.mount", "/home/absent")]["status"] == "fail"
    assert by[("host.disk", "/tmp")]["status"] in ("ok", "fail")
    full = check_mounts([str(tmp_path)], {"disk_free_min_pct": 100.1}, str(mounts))
    assert [r["status"] for r in full if r["code"] == "host.disk"] == ["fail", "fail"]


def test_cpus_and_memory_against_the_class():
    facts = {}
    r = {x["code"]: x for x in check_cpus_memory({"cpus": 9999, "memory_gb": 0.5}, facts)}
    assert r["host.cpus"]["status"] == "fail" and r["host.memory"]["status"] == "ok"
    r = {x["code"]: x for x in check_cpus_memory({"memory_gb": 1e6}, facts)}
    assert r["host.memory"]["status"] == "fail" and facts["cpus"] >= 1


def test_nccl_tests_parser():
    p = parse_nccl_tests(fix("nccl-all_reduce_perf.txt"))
    assert p["avg_busbw_gbs"] == 52.7215 and p["max_busbw_gbs"] == 239.83
    assert p["wrong"] == 0 and p["out_of_bounds"] == 0 and p["sizes"] == 28
    bad = fix("nccl-all_reduce_perf.txt").replace("239.83      0", "239.83      5").replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 5 FAILED")
    p = parse_nccl_tests(bad)
    assert p["wrong"] == 5 and p["out_of_bounds"] == 5
    assert parse_nccl_tests("nccl error: unhandled system error") is None


def test_dcgmi_parser():
    doc = parse_dcgmi_diag(fix("dcgmi-diag-pass.txt"))
    assert len(doc["tests"]) == 9 and all(t["verdict"] == "pass" for t in doc["tests"])
    assert doc["version"] == "3.3.5"
    tests = {t["name"]: t for t in parse_dcgmi_diag(fix("dcgmi-diag-fail.txt"))["tests"]}
    assert tests["GPU Memory"]["verdict"] == "fail" and tests["GPU Memory"]["gpus"] == {"1": "fail"}
    assert "cuMemAlloc" in tests["GPU Memory"]["detail"][0]
    assert tests["Persistence Mode"]["verdict"] == "warn" and tests["PCIe"]["gpus"] == {"all": "pass"}
    assert "DCGM Version" not in tests


def test_ib_write_bw_parser():
    assert parse_ib_write_bw(fix("ib_write_bw.txt")) == 381.42
    # perftest's MB is 2^20 bytes (newer versions print MiB): 47677.50 MB/s is 399.95 Gb/s, not 381.42
    mb = fix("ib_write_bw.txt").replace("BW peak[Gb/sec]    BW average[Gb/sec]",
                                        "BW peak[MB/sec]    BW average[MB/sec]").replace("381.42", "47677.50")
    assert parse_ib_write_bw(mb) == pytest.approx(47677.50 * 2**20 * 8 / 1e9, abs=0.001)
    assert parse_ib_write_bw("Couldn't connect to 127.0.0.1:18515") is None


def test_absent_deep_tools_are_skipped_never_passed(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("fleetctl.checks.payload.deep.which", lambda name, *a: None)
    args = {"nics": [{"name": "mlx5_0", "kind": "infiniband", "rate_gbps": 400}]}
    for r in check_nccl(args, Deadline(5), 8) + check_ib_write_bw(args, Deadline(5)) + check_dcgm(args, Deadline(5)):
        assert r["status"] == "skipped" and "not installed" in r["message"], r


# ---- dcgmi diag -j of DCGM 4.x (fixtures written to NVIDIA's schema of that output; README)
def test_dcgm4_json_failure_is_a_failure_on_its_gpu():
    from fleetctl.checks.payload.deep import judge_dcgm, parse_dcgmi_json

    text = fix("dcgmi-diag-4x-fail.json")
    doc = parse_dcgmi_json(text)
    assert doc["version"] == "4.2.3" and doc["driver"] == "570.124.06"
    tests = {t["name"]: t for t in doc["tests"]}
    assert tests["memory"]["verdict"] == "fail" and tests["memory"]["gpus"] == {"0": "pass", "1": "fail"}
    assert tests["cpu_eud"]["verdict"] == "pass" and tests["cpu_eud"]["gpus"] == {}  # a CPU is not GPU 0
    assert "memory mismatch" in tests["memory"]["detail"][0]
    r = judge_dcgm(doc, 0, text, 2)
    assert r["status"] == "fail" and r["subject"] == "gpu1"


def test_dcgm4_json_pass_and_runtime_error():
    from fleetctl.checks.payload.deep import judge_dcgm, parse_dcgmi_json

    ok = parse_dcgmi_json(fix("dcgmi-diag-4x-pass.json"))
    assert judge_dcgm(ok, 0, "", 2)["status"] == "ok"
    err = parse_dcgmi_json(fix("dcgmi-diag-4x-runtime-error.json"))
    r = judge_dcgm(err, 226, "", 2)
    assert r["status"] == "error" and "unable to establish a connection" in r["message"]
