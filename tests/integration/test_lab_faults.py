"""Faults measured on real traffic through the lab's fabric, and `fault clear` restoring everything.

Hosts: the first host (on leaf1) sends to the last host (on the last leaf), so every flow crosses
leaf -> spine -> leaf and the paths are known from TTL-limited probes of the same 5-tuple.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from fleetctl.lab import faults

pytestmark = pytest.mark.lab

SPORTS = range(41000, 41064)
FLOW_DPORT = 45000  # the lab's ECMP hash covers both ports: trace with the port the flows use


def _py(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def trace(lab, src: str, dst: str, sports=SPORTS, dport: int = FLOW_DPORT) -> dict[int, list]:
    """{sport: [hop addresses]} from `src` NIC (node:ethK) to `dst` NIC, for UDP to `dport`."""
    nics = lab.state["addresses"]["nics"]
    out = lab.run_in(src.split(":")[0], _py("fleetctl.lab.tracer", "--src", nics[src], "--dst", nics[dst],
                                             "--sports", f"{sports[0]}-{sports[-1]}", "--dport", str(dport),
                                             "--max-ttl", "5"))
    return {int(k): v for k, v in json.loads(out.stdout)["paths"].items()}


def spine_of(lab, hops: list) -> str | None:
    """The spine a path crossed: hop 2 is a spine's ingress address on a leaf--spine cable."""
    for link in lab.cluster.links.values():
        if link.b.kind == "switch" and link.b.device.startswith("spine") and link.b.address in hops:
            return link.b.device
    return None


def flow(lab, src: str, dst: str, *, sport: int, count: int = 0, pps: float = 0, rate_bps: float = 0,
         size: int = 200, duration: float = 0, dport: int = FLOW_DPORT) -> dict:
    """Send one UDP flow and count what arrives: {"sent", "received", "rate_bps", ...}."""
    nics = lab.state["addresses"]["nics"]
    dst_node = dst.split(":")[0]
    sink = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{lab.netns(dst_node)}"]
        + _py("fleetctl.lab.traffic", "sink", "--bind", nics[dst], "--port", str(dport), "--idle", "0.4",
              "--timeout", "20"), stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(sink.stdout.readline())["ready"]
        args = ["send", "--src", nics[src], "--sport", str(sport), "--dst", nics[dst], "--dport", str(dport),
                "--size", str(size)]
        for flag, value in (("--count", count), ("--pps", pps), ("--rate-bps", rate_bps),
                            ("--duration", duration)):
            if value:
                args += [flag, str(value)]
        sent = json.loads(lab.run_in(src.split(":")[0], _py("fleetctl.lab.traffic", *args)).stdout)
        received = json.loads(sink.communicate(timeout=30)[0])
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return {**sent, **received}


def ends(lab):
    first, last = lab.nodes[0], lab.nodes[-1]
    return f"{first}:eth0", f"{last}:eth0"


def sport_via(lab, src, dst, spine: str) -> int:
    for sport, hops in trace(lab, src, dst).items():
        if spine_of(lab, hops) == spine:
            return sport
    raise AssertionError(f"no source port of {SPORTS} crosses {spine}")


@pytest.fixture(autouse=True)
def no_faults_left(lab):
    yield
    faults.clear()


def test_ttl_sweep_shows_every_leaf_spine_path(lab):
    first, last = lab.nodes[0], lab.nodes[-1]
    spines = {s for s in lab.cluster.switches if s.startswith("spine")}
    nics = [f"eth{k}" for k in range(lab.params.nics_per_host)]
    for a in nics:
        for b in nics:
            paths = trace(lab, f"{first}:{a}", f"{last}:{b}")
            dst_addr = lab.state["addresses"]["nics"][f"{last}:{b}"]
            assert all(hops[-1] == dst_addr for hops in paths.values()), "every probe arrives"
            assert all(len(hops) == 4 for hops in paths.values()), "leaf, spine, leaf, host"
            leaf_addr = lab.cluster.links[f"{first}:{a}--leaf1"].b.address
            assert {hops[0] for hops in paths.values()} == {leaf_addr}
            assert {spine_of(lab, hops) for hops in paths.values()} == spines


def test_the_same_5_tuple_keeps_its_path(lab):
    src, dst = ends(lab)
    assert trace(lab, src, dst, range(41000, 41016)) == trace(lab, src, dst, range(41000, 41016))


def test_loss_on_one_direction(lab):
    src, dst = ends(lab)
    sport = sport_via(lab, src, dst, "spine2")
    faults.add("leaf1->spine2", "loss", 30)
    result = flow(lab, src, dst, sport=sport, count=4000, pps=8000)
    loss = 1 - result["received"] / result["sent"]
    assert 0.26 <= loss <= 0.34, result
    other = sport_via(lab, src, dst, "spine1")
    assert flow(lab, src, dst, sport=other, count=1000, pps=8000)["received"] == 1000
    faults.clear("leaf1->spine2")
    assert flow(lab, src, dst, sport=sport, count=2000, pps=8000)["received"] == 2000


def _tx_packets(lab, where: str, dev: str) -> int:
    out = lab.run_in(where, ["ip", "-s", "-j", "link", "show", "dev", dev]).stdout
    return json.loads(out)[0]["stats64"]["tx"]["packets"]


def test_down_link_carries_nothing_and_traffic_reroutes(lab):
    src, dst = ends(lab)
    faults.add("leaf1--spine1", "down")
    paths = trace(lab, src, dst)
    assert {spine_of(lab, hops) for hops in paths.values()} == {"spine2"}
    before = _tx_packets(lab, "leaf1", "spine1"), _tx_packets(lab, "spine1", "leaf1")
    for sport in list(SPORTS)[:16]:
        assert flow(lab, src, dst, sport=sport, count=50, pps=5000)["received"] == 50
    assert (_tx_packets(lab, "leaf1", "spine1"), _tx_packets(lab, "spine1", "leaf1")) == before
    faults.clear("leaf1--spine1")
    assert {spine_of(lab, hops) for hops in trace(lab, src, dst).values()} == {"spine1", "spine2"}


def test_nic_down_and_clear_restores_full_connectivity(lab):
    first, last = lab.nodes[0], lab.nodes[-1]
    faults.add(f"{last}:eth1", "down")
    assert flow(lab, f"{first}:eth0", f"{last}:eth1", sport=41000, count=50, pps=5000)["received"] == 0
    assert flow(lab, f"{first}:eth0", f"{last}:eth0", sport=41000, count=50, pps=5000)["received"] == 50
    faults.clear(f"{last}:eth1")
    nics = [f"eth{k}" for k in range(lab.params.nics_per_host)]
    for a in nics:
        for b in nics:
            for sport, hops in trace(lab, f"{first}:{a}", f"{last}:{b}", range(41000, 41008)).items():
                assert hops[-1] == lab.state["addresses"]["nics"][f"{last}:{b}"]
            assert flow(lab, f"{first}:{a}", f"{last}:{b}", sport=41001, count=50, pps=5000)["received"] == 50


def test_rate_cap_is_observed(lab):
    first, last = lab.nodes[0], lab.nodes[-1]
    faults.add(f"{first}:eth0->leaf1", "rate", "20mbit", load_pct=0)
    result = flow(lab, f"{first}:eth0", f"{last}:eth0", sport=41000, rate_bps=60e6, size=1000, duration=1.5)
    # The sender asked for 60 Mbit/s; what crossed the capped NIC (and arrived) is the cap.
    assert 14e6 <= result["rate_bps"] <= 22e6, result
    faults.clear()
    result = flow(lab, f"{first}:eth0", f"{last}:eth0", sport=41000, rate_bps=30e6, size=1000, duration=1.0)
    assert result["rate_bps"] > 25e6, result


def _rtt_mean(lab, src, dst, sport) -> float:
    nics = lab.state["addresses"]["nics"]
    dst_node = dst.split(":")[0]
    echo = subprocess.Popen(["nsenter", f"--net=/run/netns/{lab.netns(dst_node)}"]
                            + _py("fleetctl.lab.traffic", "echo", "--bind", nics[dst], "--port", "45001",
                                  "--timeout", "3"), stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(echo.stdout.readline())["ready"]
        out = lab.run_in(src.split(":")[0], _py("fleetctl.lab.traffic", "ping", "--src", nics[src], "--sport",
                                                str(sport), "--dst", nics[dst], "--dport", "45001",
                                                "--count", "200", "--interval", "0.003", "--blocking"))
    finally:
        echo.kill()
        echo.wait()
    return json.loads(out.stdout)["rtt_us"]["mean"]


def test_rate_fault_with_load_makes_queueing_delay(lab):
    first, last = lab.nodes[0], lab.nodes[-1]
    src, dst = f"{first}:eth0", f"{last}:eth0"
    quiet = _rtt_mean(lab, src, dst, 41002)
    fault = faults.add(f"{first}:eth0->leaf1", "rate", "10mbit", load_pct=90)
    assert fault["processes"] and fault["load_pct"] == 90
    time.sleep(0.5)
    loaded = _rtt_mean(lab, src, dst, 41002)
    assert loaded > quiet + 500, (quiet, loaded)  # microseconds: a queue of ms, not noise
    faults.clear()
    from fleetctl.lab import system

    assert not any(system.alive(p["pid"], p["start"]) for p in fault["processes"])


def test_flap_toggles_the_link_and_clear_restores_it(lab):
    faults.add("leaf1--spine1", "flap", "600ms")
    states = set()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        out = lab.run_in("leaf1", ["ip", "-br", "link", "show", "dev", "spine1"]).stdout
        states.add(out.split()[1])
        time.sleep(0.05)
    assert {"UP", "DOWN"} <= states, states
    (fault,) = faults.listing()
    faults.clear("leaf1--spine1")
    from fleetctl.lab import system

    assert not system.alive(fault["processes"][0]["pid"], fault["processes"][0]["start"])
    assert lab.run_in("leaf1", ["ip", "-br", "link", "show", "dev", "spine1"]).stdout.split()[1] == "UP"
    src, dst = ends(lab)
    assert {spine_of(lab, hops) for hops in trace(lab, src, dst).values()} == {"spine1", "spine2"}


def test_gpu_faults_change_the_simulated_state(lab):
    site = lab.cluster
    gpus_file = site.checks["simulated_gpus"].format(node="node2")
    log_file = site.checks["kernel_log"].format(node="node2")
    faults.add("node2:gpu3", "xid", 79)
    last = open(log_file).read().splitlines()[-1]
    gpu = json.load(open(gpus_file))["gpus"][3]
    pci = gpu["pci_bus_id"][4:-2]  # 00000000:5d:00.0 -> 0000:5d:00
    assert re.fullmatch(rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{{6}}\+00:00 NVRM: Xid \(PCI:{pci}\): 79, "
                        r"pid=\d+, name=\S+, GPU has fallen off the bus\.", last), last
    faults.add("node2:gpu3", "ecc_dbe")
    faults.add("node2:gpu3", "temp", 91)
    faults.add("node2:gpu1", "pcie_width", 8)
    doc = json.load(open(gpus_file))
    assert doc["simulated"] is True
    assert doc["gpus"][3]["ecc"]["volatile_dbe"] == 1 and doc["gpus"][3]["temperature_c"] == 91
    assert doc["gpus"][1]["pcie"]["width"] == 8
    faults.clear()
    doc = json.load(open(gpus_file))
    assert doc["gpus"][3]["ecc"]["volatile_dbe"] == 0 and doc["gpus"][1]["pcie"]["width"] == 16
    # Clearing the Xid models its repair by reboot: a new kernel log, the old one kept beside it.
    assert open(log_file).read() == ""
    assert open(str(log_file) + ".1").read().splitlines()[-1] == last


def test_bad_fault_targets_are_clear_errors(lab, capsys):
    from fleetctl.cli import run as cli_run

    assert cli_run(["lab", "fault", "add", "leaf1--spine9", "--loss", "5"]) == 3
    assert "leaf1--spine9" in capsys.readouterr().err
    assert cli_run(["lab", "fault", "add", "leaf1->spine2", "--down"]) == 3
    assert "whole cable" in capsys.readouterr().err
    assert cli_run(["lab", "fault", "add", "leaf1--spine2", "--loss", "150"]) == 3
    assert "--loss" in capsys.readouterr().err
    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--rate", "fast"]) == 3
    capsys.readouterr()
    assert cli_run(["lab", "fault", "add", "leaf1--spine2", "--rate", "fast"]) == 3
    assert "--rate 'fast'" in capsys.readouterr().err
