"""`fleetctl failover watch` against real links and a real counters file, and a drill on a private
testbed: a network namespace with veth pairs (root), links taken down and up for real, the fleet
plugin's counters written by its C harness, the drill's transfer checked byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.failover.drill import Drill, DrillOptions
from fleetctl.failover.harness import HarnessFiles
from fleetctl.failover.realcluster import IpLinkFaults

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "nccl_plugin" / "tests"))
import fleetnet  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("gcc") is None,
                                reason="needs root, iproute2 and gcc (network namespaces, the plugin's harness)")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def oper(ns: str, dev: str) -> str:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", dev], capture_output=True, text=True).stdout
    try:
        return json.loads(out)[0].get("operstate", "")
    except (ValueError, IndexError):
        return ""


def wait_oper(ns: str, dev: str, state: str, timeout: float = 5.0) -> None:
    """The kernel's linkwatch publishes carrier changes up to a second late: wait for the state."""
    end = time.monotonic() + timeout
    while oper(ns, dev) != state:
        assert time.monotonic() < end, f"{dev} in {ns} not {state} after {timeout} s"
        time.sleep(0.05)


@pytest.fixture
def veth_ns():
    """Namespace <ns> holding veth `w0` whose peer `w0p` sits in namespace <ns>p (so the watched
    side loses carrier when the peer goes down, as a NIC does when its cable or switch port dies)."""
    ns = f"fw{os.getpid() % 100000}"
    for name in (ns, ns + "p"):
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        ip("netns", "add", name)
    try:
        ip("link", "add", "w0", "netns", ns, "type", "veth", "peer", "name", "w0p", "netns", ns + "p")
        ip("-n", ns, "link", "set", "w0", "up")
        ip("-n", ns + "p", "link", "set", "w0p", "up")
        wait_oper(ns, "w0", "UP")
        yield ns
    finally:
        for name in (ns, ns + "p"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def fleetctl_in(ns: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "fleetctl", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_watch_sees_link_down_up_flaps_and_plugin_counters(veth_ns, tmp_path):
    fleetnet.build()
    counters_dir, prom = tmp_path / "counters", tmp_path / "failover.prom"
    watch = fleetctl_in(veth_ns, "--format", "json", "failover", "watch", "--interval", "0.2", "--duration", "600",
                        "--nic", "w0", "--counters-dir", str(counters_dir), "--prometheus", str(prom))
    first = watch.stdout.readline()  # the watch has started (its state at start): now change things
    assert first, watch.stderr.read()[-2000:]
    # the plugin's harness, both ends in one run over two loopback paths, writing its counters
    env = {**os.environ, "FLEET_NET_IFACES": "127.0.0.1,127.0.0.2", "FLEET_NET_COUNTERS_DIR": str(counters_dir)}
    harness = subprocess.Popen([str(fleetnet.HARNESS), "--lib", str(fleetnet.LIB), "--version", "12", "--fork",
                                "--seconds", "2", "--max-size", str(1 << 20)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(3):
        ip("-n", veth_ns + "p", "link", "set", "w0p", "down")
        wait_oper(veth_ns, "w0", "DOWN")
        time.sleep(0.3)  # a few of the watch's intervals: the state is seen by events and by re-dumps
        ip("-n", veth_ns + "p", "link", "set", "w0p", "up")
        wait_oper(veth_ns, "w0", "UP")
        time.sleep(0.3)
    out, err = harness.communicate(timeout=60)
    assert harness.returncode == 0, err[-2000:]
    time.sleep(0.6)  # the watch reads the final counters files
    watch.send_signal(signal.SIGINT)  # stop it now, not at --duration
    stdout, stderr = watch.communicate(timeout=60)
    assert watch.returncode == 130, stderr[-2000:]  # interrupted: EXIT_INTERRUPTED
    records = [json.loads(line) for line in [first, *stdout.splitlines()]]
    links = [r for r in records if r.get("link") == "w0"]
    assert links[0]["event"] == "link_state" and links[0]["up"] is True
    changes = [r["event"] for r in links[1:]]
    assert changes == ["link_down", "link_up"] * 3, changes
    last = links[-1]
    assert last["downs"] == 3 and last["flapping"] is True and 0.5 < last["period_s"] < 3.0
    assert last["carrier_changes"] >= 6
    # counters: both harness processes, seen alive while running, with bytes moved
    seen = [r for r in records if r["event"] == "counters"]
    pids = {r["pid"] for r in seen}
    assert len(pids) == 2 and {p.stem for p in counters_dir.glob("*.json")} == {str(p) for p in pids}
    assert any(r["alive"] and r["bytes_sent"] > 0 for r in seen)
    assert all(r["errors"] == 0 for r in seen)
    text = prom.read_text()
    assert 'fleetctl_failover_link_downs{link="w0",kind="netdev"} 3' in text
    assert 'fleetctl_failover_link_flapping{link="w0",kind="netdev"} 1' in text
    assert "# TYPE fleetctl_failover_plugin_bytes_sent_total counter" in text  # the harness has ended: no sample
    from prometheus_client.parser import text_string_to_metric_families

    assert {f.name for f in text_string_to_metric_families(text)} >= {"fleetctl_failover_link_up",
                                                                       "fleetctl_failover_plugin_bytes_sent"}
    assert "# TYPE fleetctl_failover_plugin_connections gauge" in text


def test_watch_once_exits_1_on_a_link_without_carrier(veth_ns, tmp_path):
    ip("-n", veth_ns + "p", "link", "set", "w0p", "down")
    wait_oper(veth_ns, "w0", "DOWN")
    proc = fleetctl_in(veth_ns, "--format", "json", "failover", "watch", "--once", "--counters-dir", str(tmp_path))
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    data = json.loads(stdout)
    assert data["problems"] == ["w0 is down"]
    assert [(l["link"], l["up"]) for l in data["links"]] == [("w0", False)]
    proc = fleetctl_in(veth_ns, "failover", "watch", "--once", "--prometheus", "-", "--counters-dir", str(tmp_path))
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1 and 'fleetctl_failover_link_up{link="w0",kind="netdev"} 0' in stdout


class NetnsRunner:
    """The drill's runner on fleetnet's two-namespace testbed: node `a` and `b` are namespaces."""

    shared_clock = True

    def __init__(self, tb):
        self.tb, self.workdir = tb, tb.tmp

    def popen(self, node, argv, env):
        return self.tb.popen(node, argv, {**os.environ, **env})

    def run(self, node, argv, timeout=60):
        return subprocess.run(["ip", "netns", "exec", self.tb.ns[node], *argv], check=True, capture_output=True,
                              text=True, timeout=timeout).stdout


def test_drill_on_a_veth_testbed_down_and_flap():
    fleetnet.build()
    with fleetnet.Testbed(f"fd{os.getpid() % 10000}") as tb:
        runner = NetnsRunner(tb)
        # a static route through each NIC: the kernel drops it with the link, the drill puts it back
        for k in range(2):
            ip("-n", tb.ns["a"], "route", "add", f"10.{90 + k}.0.0/24", "via", tb.addr["b"][k], "dev", f"eth{k}",
               "table", str(100 + k))
        options = DrillOptions(trials=1, fault="both", hold_s=1.0, flap_s=2.5, phase_s=0.7, holddown_ms=300)
        report = Drill(runner, IpLinkFaults(runner), "a", "b", ["eth0", "eth1"],
                       HarnessFiles(fleetnet.HARNESS, fleetnet.LIB), options).run()
        for k in range(2):
            routes = runner.run("a", ["ip", "route", "show", "table", str(100 + k)])
            assert f"10.{90 + k}.0.0/24 via {tb.addr['b'][k]} dev eth{k}" in routes
    data = report.to_dict()
    assert report.problems == [], data
    assert [(t.fault, t.nic) for t in report.trials] == [("down", "eth0"), ("flap", "eth1")]
    i = report.integrity
    assert i["bytes_checked"] > 0 and (i["corrupt"], i["duplicated"], i["lost"]) == (0, 0, 0)
    for t in report.trials:
        assert t.detection_ms is not None and 0 <= t.detection_ms < 1000, data
        assert t.resume_ms is not None and t.resume_ms < 2000, data
        assert t.failback_ms is not None and t.failback_ms < 10_000, data
        assert t.gbps_before > 0 and t.gbps_during > 0 and t.gbps_after > 0, data
    assert data["events"]["a"]["failback"] >= 2


def test_counters_nested_past_the_stack_are_a_damaged_file(tmp_path):
    from fleetctl.failover.counters import scan

    (tmp_path / "123.json").write_text("[" * 4000)
    result = scan(tmp_path)
    assert result.files == [] and result.damaged == {str(tmp_path / "123.json"): "nested too deeply"}


def test_watch_keeps_only_the_damaged_files_of_now_with_their_reasons(tmp_path):
    """Jobs can create any number of names over a long watch: the damaged set must not grow forever,
    and the snapshot says why each file is damaged."""
    from fleetctl.failover.watch import Watch

    w = Watch(counters_dir=str(tmp_path), sysfs_root=str(tmp_path / "nosys"), use_netlink=False)
    (tmp_path / "1.json").write_text("{}")
    records = w.start()
    assert [r["path"] for r in records if r["event"] == "counters_damaged"] == [str(tmp_path / "1.json")]
    for n in range(2, 50):
        (tmp_path / f"{n - 1}.json").unlink()
        (tmp_path / f"{n}.json").write_text("garbage")
        w._counters()
    assert w.damaged_seen == {str(tmp_path / "49.json")}
    assert w.snapshot()["damaged"] == {str(tmp_path / "49.json"): "Expecting value: line 1 column 1 (char 0)"}


def test_counters_cap_counts_counters_files_only(tmp_path, monkeypatch):
    from fleetctl.failover import counters

    monkeypatch.setattr(counters, "MAX_FILES", 3)
    for n in range(5):
        (tmp_path / f"0{n}.json.tmp").write_text("x")  # sort before the real one
    (tmp_path / "77.json").write_text("{}")
    assert list(counters.scan(tmp_path).damaged) == [str(tmp_path / "77.json")]


def test_watch_once_counts_a_named_nic_that_is_not_there(tmp_path):
    from fleetctl.failover.watch import Watch

    w = Watch(links={"eth9"}, counters_dir=str(tmp_path), sysfs_root=str(tmp_path / "nosys"), use_netlink=False)
    w.start()
    assert w.problems() == ["eth9: no such netdev or InfiniBand port"]
