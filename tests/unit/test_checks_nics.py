"""NIC checks on InfiniBand and Ethernet sysfs trees built in a temporary directory."""

import os

import pytest

from fleetctl.checks.payload.common import Deadline
from fleetctl.checks.payload.nics import check_nics, counter_rates, ib_rate_gbps, judge_counter_rates

IB_COUNTERS = ("symbol_error", "port_rcv_errors", "port_xmit_discards", "link_downed",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_rcv_data")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def ib_device(root, name="mlx5_0", state="4: ACTIVE", phys="5: LinkUp", rate="400 Gb/sec (4X NDR)",
              fw="28.39.1002", width="16", counters=None):
    dev = root / "class/infiniband" / name
    write(dev / "fw_ver", fw)
    port = dev / "ports/1"
    write(port / "state", state)
    write(port / "phys_state", phys)
    write(port / "rate", rate)
    write(port / "link_layer", "InfiniBand")
    for c in IB_COUNTERS:
        write(port / "counters" / c, str((counters or {}).get(c, 0)))
    for f, v in (("current_link_width", width), ("max_link_width", "16"),
                 ("current_link_speed", "32.0 GT/s PCIe"), ("max_link_speed", "32.0 GT/s PCIe")):
        write(dev / "device" / f, v)
    return dev


def netdev(root, name="eth1", oper="up", speed="100000", mtu="9000", carrier="2", pci=True):
    dev = root / "class/net" / name
    write(dev / "operstate", oper)
    write(dev / "speed", speed)
    write(dev / "mtu", mtu)
    write(dev / "carrier_changes", carrier)
    for c in ("rx_errors", "tx_errors", "rx_crc_errors", "rx_bytes"):
        write(dev / "statistics" / c, "0")
    if pci:
        for f, v in (("current_link_width", "16"), ("max_link_width", "16"),
                     ("current_link_speed", "16.0 GT/s PCIe"), ("max_link_speed", "16.0 GT/s PCIe")):
            write(dev / "device" / f, v)
    return dev


def run(root, nics, state=None, **args):
    results, facts = check_nics(dict(args, sysfs_root=str(root), nics=nics, boot_id="b1"), Deadline(0),
                                state if state is not None else {})
    return results, facts


def find(results, code, subject=None):
    hits = [r for r in results if r["code"] == code and (subject is None or r["subject"] == subject)]
    assert len(hits) == 1, (code, subject, results)
    return hits[0]


IB = {"name": "mlx5_0", "kind": "infiniband", "rate_gbps": 400, "firmware": "28.39.1002"}
ETH = {"name": "eth1", "kind": "ethernet", "rate_gbps": 100, "mtu": 9000}


def test_healthy_ib_and_ethernet(tmp_path):
    ib_device(tmp_path)
    netdev(tmp_path)
    results, facts = run(tmp_path, [IB, ETH])
    assert {r["status"] for r in results} <= {"ok", "skipped"}, results
    assert facts["mlx5_0"] == {"ports": {"1": {"rate_gbps": 400.0, "link_layer": "InfiniBand"}},
                               "firmware": "28.39.1002",
                               "pcie": {"width": 16, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0}}
    assert facts["eth1"]["mtu"] == 9000 and facts["eth1"]["rate_gbps"] == 100.0
    assert find(results, "nic.counters", "mlx5_0/1")["status"] == "skipped"  # quick: one sample, no snapshot


def test_ib_port_down_degraded_rate_pcie_and_firmware(tmp_path):
    ib_device(tmp_path, "mlx5_0", state="1: DOWN", phys="3: Disabled")
    ib_device(tmp_path, "mlx5_1", rate="200 Gb/sec (4X HDR)", width="8", fw="28.36.1010")
    results, _ = run(tmp_path, [IB, dict(IB, name="mlx5_1")])
    assert find(results, "nic.link", "mlx5_0/1")["status"] == "fail"
    slow = find(results, "nic.link", "mlx5_1/1")
    assert slow["status"] == "fail" and "200 Gb/s, expected 400" in slow["message"]
    assert find(results, "nic.pcie", "mlx5_1")["status"] == "fail"
    assert find(results, "nic.firmware", "mlx5_1")["status"] == "warn"


def test_ethernet_down_mtu_and_unknown_speed(tmp_path):
    netdev(tmp_path, "eth1", oper="down")
    netdev(tmp_path, "eth2", mtu="1500")
    netdev(tmp_path, "veth0", speed="-1", pci=False)
    results, facts = run(tmp_path, [ETH, dict(ETH, name="eth2"), dict(ETH, name="veth0")])
    assert find(results, "nic.link", "eth1")["status"] == "fail"
    mtu = find(results, "nic.mtu", "eth2")
    assert mtu["status"] == "fail" and "MTU 1500, expected 9000" in mtu["message"]
    veth = find(results, "nic.link", "veth0")
    assert veth["status"] == "ok" and "speed unknown" in veth["message"]  # rate not judged, no crash
    assert facts["veth0"]["rate_gbps"] is None
    assert find(results, "nic.pcie", "veth0")["status"] == "skipped"


def test_missing_nic_fails(tmp_path):
    (tmp_path / "class/net").mkdir(parents=True)
    results, _ = run(tmp_path, [ETH, IB])
    assert [r["status"] for r in results if r["code"] == "nic.present"] == ["fail", "fail"]


def test_unreadable_sysfs_file_is_an_error_for_that_item_only(tmp_path):
    dev = ib_device(tmp_path)
    (dev / "ports/1/state").unlink()
    (dev / "ports/1/state").mkdir()  # reading it raises IsADirectoryError even as root
    eth = netdev(tmp_path)
    (eth / "mtu").unlink()
    os.symlink(tmp_path / "nowhere", eth / "mtu")
    results, _ = run(tmp_path, [IB, ETH])
    link = find(results, "nic.link", "mlx5_0")
    assert link["status"] == "error" and "cannot read" in link["message"] and "state" in link["message"]
    assert find(results, "nic.mtu", "eth1")["status"] == "error"
    assert find(results, "nic.firmware", "mlx5_0")["status"] == "ok"
    assert find(results, "nic.link", "eth1")["status"] == "ok"


def test_discovery_without_site_nics_skips_down_ports(tmp_path):
    netdev(tmp_path, "eth0")
    netdev(tmp_path, "docker0", oper="down", pci=False)
    netdev(tmp_path, "lo", pci=False)
    results, facts = run(tmp_path, [])
    assert set(facts) == {"eth0", "docker0"}
    assert find(results, "nic.link", "docker0")["status"] == "skipped"


def test_counter_rates_and_thresholds():
    rates = counter_rates({"symbol_error": 10, "link_downed": 1, "port_rcv_errors": 5, "x": None},
                          {"symbol_error": 40, "link_downed": 2, "port_rcv_errors": 4, "x": 3}, 2.0)
    assert rates == {"symbol_error": (30, 15.0), "link_downed": (1, 0.5), "port_rcv_errors": (0, 0.0)}
    bad = judge_counter_rates("mlx5_0/1", rates, 2.0, False)
    assert ("fail", "link_downed rose by 1") in bad
    assert any(s == "warn" and "symbol_error at 15.0/s" in t for s, t in bad)
    assert judge_counter_rates("p", {"port_xmit_discards": (150, 150.0)}, 1.0, False)[0][0] == "warn"
    assert judge_counter_rates("p", {"port_xmit_discards": (90, 90.0)}, 1.0, False) == []
    # long window: 200 symbol errors in an hour is over 120/h: fatal, though far below 10/s
    long = judge_counter_rates("p", counter_rates({"symbol_error": 0}, {"symbol_error": 200}, 3600), 3600, True)
    assert long == [("fail", "symbol_error at 200/h (limit 120/h)")]
    # carrier flaps: 3 in 6 h is flapping, 2 is not
    assert judge_counter_rates("e", {"carrier_changes": (3, 0.0)}, 21600, True)[0][0] == "warn"
    assert judge_counter_rates("e", {"carrier_changes": (2, 0.0)}, 21600, True) == []


def test_ib_rate_parsing():
    assert ib_rate_gbps("400 Gb/sec (4X NDR)") == 400.0
    assert ib_rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert ib_rate_gbps("garbage") is None


def test_two_samples_catch_a_counter_increase(tmp_path, monkeypatch):
    """Standard level: the payload samples, waits, samples again; a link_downed rise in between fails.
    The rise is written while the check sleeps between its two samples (deterministic, no timer race)."""
    import time
    import types
    from fleetctl.checks.payload import nics as nics_module
    dev = ib_device(tmp_path)
    counter = dev / "ports/1/counters/link_downed"

    def sleep_and_flap(seconds):
        counter.write_text("1\n")
        time.sleep(seconds)

    monkeypatch.setattr(nics_module, "time", types.SimpleNamespace(sleep=sleep_and_flap, time=time.time))
    results, _ = run(tmp_path, [IB], counter_interval_s=0.2)
    r = find(results, "nic.counters", "mlx5_0/1")
    assert r["status"] == "fail" and "link_downed rose by 1" in r["message"]


def test_snapshot_from_the_previous_run_gives_long_window_rates(tmp_path):
    eth = netdev(tmp_path, carrier="2")
    state = {}
    run(tmp_path, [ETH], state=state)
    assert state["counters"]["values"]["eth1"]["carrier_changes"] == 2
    state["counters"]["time"] -= 3600  # as if the previous run was an hour ago
    (eth / "carrier_changes").write_text("7\n")
    results, _ = run(tmp_path, [ETH], state=state)
    r = find(results, "nic.counters", "eth1")
    assert r["status"] == "warn" and "flapping" in r["message"] and r["evidence"]["long_window_s"] >= 3600
    state["counters"]["boot_id"] = "other-boot"  # counters restart at boot: no comparison across boots
    results, _ = run(tmp_path, [ETH], state=state)
    assert find(results, "nic.counters", "eth1")["status"] == "skipped"


# ------------------------------------------------------------------ network namespaces (netlink view)
FIX = __import__("pathlib").Path(__file__).parents[1] / "fixtures" / "checks"


def test_ip_link_json_recorded_in_a_namespace():
    """Recorded on this machine: `ip -j -s -s -d link show` in a namespace with a veth pair, peer down."""
    from fleetctl.checks.payload.netdev import parse_ip_link_json
    links = parse_ip_link_json((FIX / "ip-link-netns.json").read_text())
    assert links["vA"]["operstate"] == "lowerlayerdown" and links["vA"]["mtu"] == 9000
    assert links["vB"]["operstate"] == "down" and links["vA"]["counters"]["carrier_changes"] == 3
    assert links["lo"]["carrier"] is False


def _have_netns_tools():
    import shutil
    return os.geteuid() == 0 and shutil.which("ip") and shutil.which("nsenter")


@pytest.fixture
def netns():
    """A real network namespace with a veth pair (the lab's NICs are veths inside namespaces)."""
    import subprocess
    if not _have_netns_tools():
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with iproute2 and util-linux: this test must run there")
        pytest.skip("needs root, ip and nsenter")
    name = f"fleetctl-chk-{os.getpid()}"
    ip = lambda *a: subprocess.run(["ip", *a], check=True, capture_output=True)  # noqa: E731
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "add", "vA", "type", "veth", "peer", "name", "vB")
        ip("-n", name, "link", "set", "vA", "mtu", "9000")
        for dev in ("lo", "vA", "vB"):
            ip("-n", name, "link", "set", dev, "up")
        yield name, ip
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_payload_inside_a_namespace_sees_its_own_nics(netns):
    """/sys/class/net inside `nsenter --net` still lists the host's devices; the payload must notice and
    read the namespace's own interfaces (netlink). Taking a NIC down there fails the link check."""
    from fleetctl.checks import run_payload_subprocess
    name, ip = netns
    args = {"level": "quick", "budget_s": 5, "nics": [{"name": "vA", "mtu": 9000}, {"name": "vB", "mtu": 1500}]}
    nsenter = ["nsenter", f"--net=/run/netns/{name}", "python3", "-I", "-S"]
    doc = run_payload_subprocess(args, python=nsenter)
    links = {r["subject"]: r for r in doc["results"] if r["code"] in ("nic.link", "nic.mtu", "nic.present")
             and r["status"] != "ok"}
    assert links == {}, links
    link = next(r for r in doc["results"] if r["code"] == "nic.link" and r["subject"] == "vA")
    assert link["evidence"]["source"] == "netlink"
    ip("-n", name, "link", "set", "vB", "down")
    doc = run_payload_subprocess(args, python=nsenter)
    bad = {r["subject"]: r["message"] for r in doc["results"] if r["code"] == "nic.link" and r["status"] == "fail"}
    assert bad == {"vA": "vA is lowerlayerdown", "vB": "vB is down"}
