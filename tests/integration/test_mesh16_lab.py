"""The mesh at 16 hosts x 2 NICs with default settings (issue 10): a clean lab gives no finding, a
lab whose every host is busy gives no network finding (probe warnings allowed), each fault kind
and two faults at once are named, and `--rate` far above the budget warns without a false network
finding.

These need the 16-host lab: marker `mesh16`, run by scripts/test as its own pytest invocation
(FLEETCTL_TEST_LAB_HOSTS=16 FLEETCTL_TEST_LAB_LEAVES=4 -m mesh16); in the default 4-host session
they are deselected. The machine has 2 cores: the loaded runs really starve the agents.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.fanout import get_transport
from fleetctl.lab import faults
from fleetctl.meshrun.analyze import to_dict
from fleetctl.meshrun.probe_run import MeshOptions, probe_run

pytestmark = [pytest.mark.lab, pytest.mark.mesh16]
DURATION = 5.0


@pytest.fixture(scope="module")
def lab16(lab):
    # conftest deselects these tests unless the session lab has 16 hosts
    assert len(lab.nodes) >= 16, "needs FLEETCTL_TEST_LAB_HOSTS=16 FLEETCTL_TEST_LAB_LEAVES=4"
    return lab


@pytest.fixture
def fault(lab16):
    added = []

    def add(target, kind, value=None, **kw):
        added.append(faults.add(target, kind, value, **kw))

    yield add
    if added:
        faults.clear()


@pytest.fixture
def cpu_load(lab16):
    """Two busy loops in every host's network namespace for the test's whole run."""
    procs = []

    def start(per_host: int = 2):
        for node in lab16.nodes:
            for _ in range(per_host):
                procs.append(subprocess.Popen(
                    ["nsenter", f"--net=/run/netns/{lab16.netns(node)}", "python3", "-c",
                     "while 1: pass"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))
        time.sleep(0.5)

    yield start
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=10)


def mesh(lab, **kw):
    with get_transport("local", cluster=lab.cluster) as t:
        result = probe_run(lab.cluster, lab.nodes, t, MeshOptions(**{"duration": DURATION, **kw}))
    return to_dict(result.run, result.analysis)


def network(data):
    return [f for f in data["findings"] if f.get("category") != "probe"]


def named(data):
    return sorted((f["element"]["type"], f["element"]["id"], f["metric"]) for f in network(data))


def test_clean_16_host_lab_with_defaults_gives_no_finding(lab16, capsys, monkeypatch):
    for k, v in lab16.env.items():
        monkeypatch.setenv(k, v)
    rc = cli_run(["audit", "--mesh-only", "--duration", str(DURATION), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    # Never a network finding. A probe note (an agent starved of CPU by this 2-core machine for a
    # window, its probes set aside and said so, exit 1) is the measurement telling the truth about
    # itself: allowed, but only as that (a CI run once saw one agent at 96 % CPU in 1 window of 7).
    assert network(data) == [] and rc in (0, 1), json.dumps(data["findings"], indent=1)[:3000]
    assert all(f.get("check") == "probe.overload" for f in data["findings"]), data["findings"]
    assert rc == (1 if data["findings"] else 0)
    plan = data["summary"]["plan"]
    assert plan["design"] == "full-mesh" and plan["pairs"] == 32 * 30
    assert plan["host_pps_max"] <= plan["budget_pps"] and not plan["over_budget"]
    assert data["summary"]["loss_floor"]["links"]["loss_floor_pct_max"] < 1.0


def test_busy_hosts_give_no_network_finding(lab16, cpu_load):
    cpu_load(2)
    data = mesh(lab16)
    assert network(data) == [], json.dumps(network(data), indent=1)[:3000]
    for f in data["findings"]:
        assert f["check"] in ("probe.overload", "probe.budget") and f["severity"] == "warning"


def test_loss_on_a_leaf_spine_link_is_named(lab16, fault):
    fault("leaf2->spine1", "loss", "3")
    data = mesh(lab16)
    assert named(data) == [("link", "leaf2--spine1", "loss")], named(data)


def test_link_down_is_named(lab16, fault):
    fault("leaf3--spine2", "down")
    data = mesh(lab16)
    assert named(data) == [("link", "leaf3--spine2", "down")], named(data)


def test_nic_down_is_named(lab16, fault):
    fault("node7:eth1", "down")
    data = mesh(lab16)
    assert named(data) == [("nic", "node7:eth1", "down")], named(data)


def test_two_faults_at_once_are_both_named(lab16, fault):
    fault("leaf1->spine2", "loss", "5")
    fault("node12:eth0", "down")
    data = mesh(lab16)
    assert named(data) == [("link", "leaf1--spine2", "loss"), ("nic", "node12:eth0", "down")], \
        named(data)


def test_rate_far_above_the_budget_warns_without_false_network_finding(lab16):
    data = mesh(lab16, rate=200.0)  # 200/s per pair: 24,000 probes/s per host, budget 2,000
    assert data["summary"]["plan"]["over_budget"]
    assert "probe.budget" in [f.get("check") for f in data["findings"]]
    assert network(data) == [], json.dumps(network(data), indent=1)[:3000]
