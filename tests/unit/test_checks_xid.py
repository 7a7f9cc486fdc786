"""Xid parsing of real line formats, the policy table, flood de-duplication and reboot escalation."""

import calendar
import time
from pathlib import Path

import pytest

from fleetctl.checks.payload.common import Deadline
from fleetctl.checks.payload.xid import check_xids, judge_xids, line_time, parse_xid_lines

FIX = Path(__file__).parents[1] / "fixtures" / "checks"


def iso(text):
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def lines(name):
    return (FIX / name).read_bytes().splitlines()


def judged(events, stats, **args):
    args.setdefault("boot_id", "boot-a")
    return {r["code"]: r for r in judge_xids(events, stats, args, args.pop("state", {}), "test")}


def test_dmesg_iso_several_driver_generations():
    events, stats = parse_xid_lines(lines("xid-dmesg-iso.log"))
    assert [e["xid"] for e in events] == [13, 31, 79, 79, 79, 48, 63, 94, 119, 45]
    assert stats["unparsed"] == 0 and stats["xid_lines"] == 10
    old, new = events[0], events[3]
    assert old["pci"] == "0000:3b:00" and old["pid"] is None and "Warp Exception" in old["text"]
    assert new["pid"] == "<unknown>" and new["name"] == "<unknown>"
    assert events[2]["pid"] == "1234" and events[2]["name"] == "python3"
    assert events[2]["time"] == pytest.approx(iso("2026-11-29T15:50:01") + 0.123456)


def test_flood_is_one_finding_with_a_count_and_policy_actions():
    events, stats = parse_xid_lines(lines("xid-dmesg-iso.log"))
    r = judged(events, stats)
    assert r["xid.79"]["status"] == "fail" and r["xid.79"]["action"] == "reboot"
    assert r["xid.79"]["evidence"]["count"] == 3 and "(x3)" in r["xid.79"]["message"]
    assert (r["xid.13"]["status"], r["xid.13"]["action"]) == ("warn", "restart-app")
    assert (r["xid.48"]["status"], r["xid.48"]["action"]) == ("fail", "reset-gpu")
    assert r["xid.63"]["status"] == "ok"  # informational per NVIDIA's catalog
    assert (r["xid.94"]["status"], r["xid.94"]["action"]) == ("warn", "restart-app")
    assert r["xid.119"]["status"] == "fail"
    assert r["xid.45"]["status"] == "ok"  # 45 next to 119 on the same GPU is cleanup noise
    assert r["xid.scan"]["evidence"]["lines"] == 13


def test_xid_45_alone_is_a_warning():
    events, stats = parse_xid_lines(["2026-11-29T15:54:00,000000+00:00 NVRM: Xid (PCI:0000:cc:00): 45, "
                                     "pid=777, name=python3, Ch 00000010"])
    assert judged(events, stats)["xid.45"]["status"] == "warn"


def test_since_filters_older_lines():
    events, stats = parse_xid_lines(lines("xid-dmesg-iso.log"), since=iso("2026-11-29T15:51:00"))
    assert [e["xid"] for e in events] == [48, 63, 94, 119, 45]
    assert stats["before_since"] == 5


def test_kmsg_and_plain_dmesg_use_boot_time():
    boot = 1_000_000.0
    events, _ = parse_xid_lines(lines("xid-kmsg.txt"), boot=boot)
    assert [(e["xid"], e["time"]) for e in events] == [(79, boot + 3600.25), (94, boot + 3700.0)]
    events, _ = parse_xid_lines(lines("xid-dmesg-uptime.txt"), since=boot + 3650, boot=boot)
    assert [(e["xid"], e["pci"]) for e in events] == [(43, "0000:3b:00")]


def test_journal_with_timezone_and_syslog_prefix():
    events, _ = parse_xid_lines(lines("xid-journal.txt"))
    assert events[0]["time"] == pytest.approx(iso("2026-11-29T15:50:01") + 0.123456)
    assert [e["xid"] for e in events] == [79, 74]
    boot = 2_000_000.0
    events, stats = parse_xid_lines(lines("xid-syslog.txt"), boot=boot)
    assert events[0]["time"] == boot + 3600.25  # the kernel's uptime stamp beats the syslog time
    assert events[1]["xid"] == 13 and events[1]["time"] is not None


def test_corrupt_and_truncated_lines_are_counted_not_raised():
    events, stats = parse_xid_lines(lines("xid-corrupt.log"))
    assert stats["unparsed"] == 2  # the truncated one and the one with a non-numeric Xid
    assert stats["untimed"] == 1
    assert [e["xid"] for e in events] == [79, 79, 48, 31, 31]
    assert "\ufffd" in events[3]["name"]  # invalid UTF-8 in a process name does not lose the Xid
    r = judged(events, stats)
    assert r["xid.unparsed"]["status"] == "warn" and r["xid.unparsed"]["evidence"]["unparsed"] == 2
    # with a since-time, a line without a time cannot be placed: left out and counted
    events, stats = parse_xid_lines(lines("xid-corrupt.log"), since=0)
    assert stats["untimed"] == 1 and len(events) == 4


def test_line_time_without_prefix_is_none():
    assert line_time("", 1.0) is None
    assert line_time("[  12.5] ", None) is None


def test_site_override_changes_status_and_action():
    events, stats = parse_xid_lines(lines("xid-dmesg-iso.log"))
    r = judged(events, stats, xid_policy={"63": {"status": "fail", "action": "reset-gpu"},
                                         "999": {"status": "warn", "action": "none"}})
    assert (r["xid.63"]["status"], r["xid.63"]["action"]) == ("fail", "reset-gpu")
    assert "site policy" in r["xid.63"]["message"]


def test_unknown_xid_is_a_warning_to_inspect():
    events, stats = parse_xid_lines(["[ 1.0] NVRM: Xid (PCI:0000:3b:00): 154, pid=1, name=x, GPU recovery"])
    assert judged(events, stats, boot_epoch=0)["xid.154"]["status"] == "warn"


def test_reboot_recoverable_xid_escalates_after_n_reboots():
    events, stats = parse_xid_lines(lines("xid-dmesg-iso.log"))
    state = {}
    for n, boot in enumerate(["b1", "b1", "b2", "b3"]):
        r = judged(events, stats, state=state, boot_id=boot, thresholds={"xid_reboot_escalation": 2})
    # seen in b1, again after one reboot (b2), again after a second (b3): a hardware case now
    assert r["xid.79"]["action"] == "inspect-hardware" and "after 2 reboots" in r["xid.79"]["message"]
    assert state["xid_boots"]["0000:3b:00/79"] == ["b1", "b2", "b3"]
    assert r["xid.13"]["action"] == "restart-app"  # not reboot-recoverable: never escalated
    state = {"xid_boots": {"0000:3b:00/79": ["b1"]}}
    r = judged(events, stats, state=state, boot_id="b2", thresholds={"xid_reboot_escalation": 2})
    assert r["xid.79"]["action"] == "reboot"


def test_check_xids_reads_the_path_override(tmp_path):
    log = tmp_path / "kern.log"
    log.write_bytes((FIX / "xid-dmesg-iso.log").read_bytes())
    out = check_xids({"kernel_log": str(log), "boot_id": "x"}, Deadline(0), {})
    assert {r["code"] for r in out} >= {"xid.79", "xid.scan"}
    err = check_xids({"kernel_log": str(tmp_path / "missing.log")}, Deadline(0), {})
    assert [(r["code"], r["status"]) for r in err] == [("xid.source", "error")]
    assert "missing.log: No such file or directory" in err[0]["message"]
