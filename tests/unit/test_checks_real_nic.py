"""NIC error counters judged on real outputs of other people's machines (tests/data/real/, see
PROVENANCE.md): perfquery [-x], a sysfs counter dump, mlx5 `ethtool -S`. Each sample is parsed into
the one counter vocabulary and then goes through the check's own code path: a sysfs tree written from
the sample, read by sample_counters and judged by the nic.counters judge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetctl.checks.payload import nics
from fleetctl.checks.payload.netdev import NetdevView
from fleetctl.checks.payload.nic_counters import (bit_error_rate, mlx5_phy_counters, parse_ethtool_stats,
                                                  parse_perfquery, saturated, simulated_stats_text)

REAL = Path(__file__).parents[1] / "data" / "real"

# sample -> [(lid, port, extended, {counter: value} that an expert reads there)], saturated counters
PERFQUERY = {
    # a switch port: one link-down, relay errors and discards (congestion), no symbol errors
    "perfquery-x-switch-linkdowned-xmitdiscards.txt": [(2052, 1, True, {
        "symbol_error": 0, "link_error_recovery": 0, "link_downed": 1, "port_rcv_errors": 0,
        "port_rcv_switch_relay_errors": 7, "port_xmit_discards": 20046, "port_xmit_wait": 41864608,
        "port_xmit_data": 178791657177235, "port_rcv_data": 178762341961629})],
    "perfquery-x-switch-2ports-clean.txt": [
        (1719, 1, True, {"symbol_error": 0, "link_downed": 0, "port_xmit_wait": 22730501}),
        (1719, 2, True, {"symbol_error": 0, "link_downed": 0, "port_xmit_wait": 36510964})],
    "perfquery-x-hca-clean.txt": [(134, 1, True, {"symbol_error": 0, "port_xmit_wait": 0,
                                                   "port_rcv_data": 9752484588300})],
    # every counter 0, data included: present and zero, not missing
    "perfquery-x-rhel75-all-zero.txt": [(10, 1, True, {"port_xmit_data": 0, "port_rcv_data": 0, "symbol_error": 0})],
    # the basic PortCounters layout (CounterSelect2 and QP1Dropped in the middle, data at the end)
    "perfquery-basic-cx4-edr-homelab-clean.txt": [(1, 1, False, {
        "symbol_error": 0, "port_rcv_errors": 0, "port_xmit_data": 16480432, "port_rcv_data": 10932,
        "port_xmit_wait": 239508, "excessive_buffer_overrun_errors": 0})],
}

ETHTOOL = {
    # grep'd to the non-zero error counters: CRC and symbol errors on every lane (a failing optic)
    "ethtool-S-mlx5-cx6dx-crc-symbol-lane-errors-filtered.txt": {
        "raw": {"rx_crc_errors_phy": 13147323, "rx_symbol_err_phy": 13115284, "rx_err_lane_3_phy": 13115284},
        "phy": {"rx_crc_errors": 13147323, "rx_symbol_err_packets": 13115284}},
    # zero counters left out by the poster: no physical error counter at all, huge host-side discards
    "ethtool-S-mlx5-xdp-rx-discards-phy-nonzero-only.txt": {
        "raw": {"rx_discards_phy": 58591428329, "rx_out_of_buffer": 990473555, "tx_pause_ctrl_phy": 5745055},
        "phy": {"rx_bytes_phy": 6211329423080}},
}

SYSFS_DUMP = "ib-sysfs-counters-mlx5-cx7-saturated-linkdowned-xmitdiscards.txt"
NIC_SAMPLES = tuple(PERFQUERY) + tuple(ETHTOOL) + (SYSFS_DUMP,)


class _Deadline:
    def left(self):
        return 60.0


def _tree(tmp_path, port_key, counters):
    """A sysfs tree with one IB port whose counter files hold `counters`."""
    dev, port = port_key.split("/")
    cdir = tmp_path / "class/infiniband" / dev / "ports" / port / "counters"
    cdir.mkdir(parents=True, exist_ok=True)
    for name, value in counters.items():
        (cdir / name).write_text("%d\n" % value)
    (tmp_path / "class/net").mkdir(parents=True, exist_ok=True)
    return str(tmp_path)


def _read(tmp_path, port_key):
    view = NetdevView(str(tmp_path), _Deadline())
    return nics.sample_counters([{"name": port_key.split("/")[0], "kind": "infiniband"}], view)[port_key]


@pytest.mark.parametrize("name", sorted(PERFQUERY))
def test_perfquery_samples(name):
    blocks = parse_perfquery((REAL / name).read_text())
    assert [(b["lid"], b["port"], b["extended"]) for b in blocks] == [e[:3] for e in PERFQUERY[name]]
    for block, (_, _, _, want) in zip(blocks, PERFQUERY[name]):
        assert {k: block["counters"].get(k) for k in want} == want
        assert saturated(block["counters"]) == []


def test_a_real_switch_port_read_twice_fails_on_a_new_link_down_and_keeps_congestion_out(tmp_path):
    [block] = parse_perfquery((REAL / "perfquery-x-switch-linkdowned-xmitdiscards.txt").read_text())
    before = block["counters"]
    after = dict(before, link_downed=before["link_downed"] + 1, port_xmit_wait=before["port_xmit_wait"] + 10 ** 6)
    _tree(tmp_path, "sw/1", after)
    r = nics._judge_key("sw/1", _read(tmp_path, "sw/1"), None, before, 600.0, 200.0)
    assert r["status"] == "fail" and "link_downed rose by 1" in r["message"]
    assert "port_xmit_wait" not in r["message"]  # waiting is congestion, not a link error
    # the same counters with no change: steady, and no BER claimed from zero errors
    r = nics._judge_key("sw/1", before, None, before, 600.0, 200.0)
    assert r["status"] == "ok" and r["evidence"]["effective_ber"].startswith("0 errors in 600 s: too few")


def test_the_real_sysfs_dump_with_saturated_counters_says_what_it_cannot_measure(tmp_path):
    counters = {}
    lines = (REAL / SYSFS_DUMP).read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^=== \./(\w+) ===$", line)
        if m:
            counters[m.group(1)] = int(lines[i + 1])
    assert len(counters) == 21
    _tree(tmp_path, "mlx5_1/1", counters)
    read = _read(tmp_path, "mlx5_1/1")
    assert read == counters
    # excessive_buffer_overrun_errors is a 4-bit counter: 15 is its maximum
    stuck = ["excessive_buffer_overrun_errors", "link_downed", "port_xmit_discards", "port_xmit_wait"]
    assert saturated(read) == stuck
    # one read and no earlier snapshot: nothing judged, and the saturated counters are named
    r = nics._judge_key("mlx5_1/1", read, None, None, 0, 400.0)
    assert r["status"] == "skipped" and ", ".join(stuck) + " saturated" in r["message"]
    # a saturated counter reads as unchanged: it must not pass as "steady" evidence, nor as a rise
    later = dict(read, port_rcv_switch_relay_errors=read["port_rcv_switch_relay_errors"] + 1)
    r = nics._judge_key("mlx5_1/1", later, None, read, 3600.0, 400.0)
    assert r["status"] == "ok" and r["evidence"]["saturated"] == stuck
    assert "not measured until the port's counters are reset" in r["message"]


@pytest.mark.parametrize("name", sorted(ETHTOOL))
def test_ethtool_samples(name):
    stats = parse_ethtool_stats((REAL / name).read_text())
    want = ETHTOOL[name]
    assert {k: stats.get(k) for k in want["raw"]} == want["raw"]
    assert mlx5_phy_counters(stats) == want["phy"]


def test_the_real_failing_optic_read_twice_warns_on_symbol_packets_and_crc():
    stats = mlx5_phy_counters(parse_ethtool_stats(
        (REAL / "ethtool-S-mlx5-cx6dx-crc-symbol-lane-errors-filtered.txt").read_text()))
    later = {k: v + 3000 for k, v in stats.items()}
    r = nics._judge_key("eth5", later, ({"eth5": stats}, {"eth5": later}, 1.0), None, 0, 100.0)
    assert r["status"] == "warn"
    assert "rx_crc_errors at 3000.0/s" in r["message"] and "rx_symbol_err_packets at 3000.0/s" in r["message"]


def test_effective_ber_is_symbol_errors_over_the_bits_the_link_carried():
    # 400 Gb/s for an hour with 1440 uncorrected symbol errors: 1e-12, exactly at the IBTA target
    assert bit_error_rate(1440, 400, 3600)[0] == pytest.approx(1e-12)
    assert bit_error_rate(2, 400, 3600) == (None, "2 errors in 3600 s: too few to estimate")
    assert bit_error_rate(100, None, 3600) == (None, "link rate unknown")
    rates = {"symbol_error": (200, 200 / 60)}
    bad = nics.judge_counter_rates("p", rates, 60.0, True, 100.0, ev := {})
    assert ev["effective_ber"] == pytest.approx(200 / (100e9 * 60))
    assert ("fail", "symbol_error at 12000/h (limit 120/h)") in bad
    assert any(s == "warn" and t.startswith("effective BER 3.3e-11 over 60 s") for s, t in bad)


def test_the_labs_emulated_counters_grow_at_their_rate_through_the_same_parser():
    doc = {"eth0": {"since": 1000.0, "values": {"rx_pcs_symbol_err_phy": 5}, "per_s": {"rx_pcs_symbol_err_phy": 20}}}
    text = simulated_stats_text(doc, "eth0", now=1010.0)
    assert text == "NIC statistics:\n     rx_pcs_symbol_err_phy: 205\n"
    assert mlx5_phy_counters(parse_ethtool_stats(text)) == {"symbol_error": 205}
    assert simulated_stats_text(doc, "eth9") == "" and simulated_stats_text("junk", "eth0") == ""


@pytest.mark.parametrize("text", ["     rx_crc_errors_phy: -5\n", "     x: 99999999999999999999999\n",
                                  "rx_pcs_symbol_err_phy 12\n", "\x00: 1\n" * 5])
def test_hostile_ethtool_lines_are_ignored(text):
    assert mlx5_phy_counters(parse_ethtool_stats(text)) == {}


def test_a_nic_that_appears_between_the_two_reads_is_judged_without_a_window():
    values = {"symbol_error": 5, "link_downed": 0}
    r = nics._judge_key("eth9", values, ({}, {"eth9": values}, 1.0), None, 0, 100.0)
    # nothing to compare with in the first read: no rate, no BER claimed (it used to crash the group)
    assert r["status"] == "ok" and "effective_ber_short" not in r["evidence"]
