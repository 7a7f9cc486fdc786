"""`lab down` leaves the machine as it found it: after a normal run, after a failed `up`, and `up` cleans
the leftovers of a killed session while never touching what is not the lab's.

These tests take the session lab down for a while (they hold its lock through the `lab` fixture) and
bring it back at the end, so the other lab tests can run before or after them.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess

import pytest

from fleetctl.errors import LabError
from fleetctl.lab import lifecycle, paths, state, system
from fleetctl.lab.topology import LabParams

pytestmark = pytest.mark.lab

SMALL = LabParams(hosts=2, nics_per_host=2, leaves=2, spines=2, gpus_per_host=1)


def machine() -> dict:
    """What the lab may change on this machine."""
    nft = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    mounts = [line.split()[4] for line in open("/proc/self/mountinfo")
              if line.split()[4].startswith(str(paths.lab_dir()))]
    lab_procs = sorted(set(system.pids_mentioning(f"{paths.lab_dir()}/"))
                       | set(system.pids_mentioning("fleetctl.lab.")))
    return {"netns": system.netns_list(), "links": system.root_links(), "nft": sorted(nft.splitlines()),
            "mounts": mounts, "lab_processes": lab_procs, "state": paths.state_file().exists()}


@pytest.fixture(scope="module")
def bare(lab):
    """No lab running; the session lab is rebuilt afterwards (same size, same addresses and paths)."""
    lifecycle.down()
    yield machine()
    lab.state.clear()
    lab.state.update(lifecycle.up(lab.params))


def test_down_leaves_the_machine_as_found(bare):
    assert bare["lab_processes"] == [] and not bare["state"]
    st = lifecycle.up(SMALL)
    assert st["status"] == "up"
    during = machine()
    assert set(st["netns"]) <= set(during["netns"]) and during["lab_processes"]
    lifecycle.down()
    assert machine() == bare


@pytest.mark.parametrize("step", ["links", "slurm", "ssh", "site"])
def test_failed_up_names_the_step_and_cleans_up(bare, step, monkeypatch):
    monkeypatch.setenv("FLEETCTL_LAB_FAIL_AT", step)
    with pytest.raises(LabError, match=f"lab up failed at step '{step}'"):
        lifecycle.up(SMALL)
    assert machine() == bare


def test_up_cleans_leftovers_of_a_killed_session_and_nothing_else(bare):
    lifecycle.up(SMALL)
    # A killed session: state file gone, namespaces, links, mounts and daemons left behind.
    paths.state_file().unlink()
    foreign_ns, foreign_link = "node1", "notfl0"
    try:
        subprocess.run(["ip", "netns", "add", foreign_ns], check=True)
        subprocess.run(["ip", "link", "add", foreign_link, "type", "bridge"], check=True)
        st = lifecycle.up(SMALL)
        assert st["status"] == "up" and not lifecycle.unhealthy(st)
        lifecycle.down()
        after = machine()
        assert foreign_ns in after["netns"] and foreign_link in after["links"]
        after["netns"].remove(foreign_ns)
        after["links"].remove(foreign_link)
        assert after == bare
    finally:
        subprocess.run(["ip", "netns", "del", foreign_ns], check=False)
        subprocess.run(["ip", "link", "del", foreign_link], check=False)


def test_a_debian_roots_slurm_after_a_killed_session_is_cleaned_up(bare):
    """Slurm 24.11 from the Debian root: its daemons (run by the root's loader) and the lab's mount
    namespace are left behind by a killed session; the next `up` removes them, `down` leaves nothing."""
    params = dataclasses.replace(SMALL, slurm_from="trixie")
    st = lifecycle.up(params)
    assert st["slurm"]["version"] == "24.11" and st["mount_ns"] in machine()["mounts"]
    paths.state_file().unlink()
    st = lifecycle.up(params)
    assert st["status"] == "up" and not lifecycle.unhealthy(st)
    out = subprocess.run([f"{st['slurm']['bindir']}/sinfo", "-h", "-o", "%T %D"], capture_output=True,
                         text=True, timeout=30, check=True, env={**os.environ, **lifecycle.env()}).stdout
    assert out.split() == ["idle", str(params.hosts)]
    lifecycle.down()
    assert machine() == bare


def test_up_rebuilds_a_lab_whose_daemon_died(bare):
    st = lifecycle.up(SMALL)
    ctld = next(p for p in st["processes"] if p["name"] == "slurmctld")
    os.kill(ctld["pid"], signal.SIGKILL)
    assert system.wait_for(lambda: not system.alive(ctld["pid"]), 5)
    assert lifecycle.unhealthy(state.load())
    rebuilt = lifecycle.up(SMALL)
    assert rebuilt["started"] != st["started"] and not lifecycle.unhealthy(rebuilt)
    lifecycle.down()
    assert machine() == bare


def test_no_site_file_when_down(bare):
    assert paths.active_site() is None


def test_sixteen_hosts_on_four_leaves(bare):
    import json
    import sys

    big = LabParams(hosts=16, nics_per_host=2, leaves=4, spines=2)
    st = lifecycle.up(big)
    try:
        env = {**os.environ, "SLURM_CONF": st["slurm"]["conf"]}
        out = subprocess.run(["srun", "-N16", "hostname"], env=env, capture_output=True, text=True,
                             timeout=120, check=True).stdout
        assert sorted(out.split()) == sorted(f"node{i}" for i in range(1, 17))
        nics = st["addresses"]["nics"]
        trace = subprocess.run(["nsenter", "--net=/run/netns/fl-node1", sys.executable, "-m",
                                "fleetctl.lab.tracer", "--src", nics["node1:eth1"], "--dst",
                                nics["node16:eth0"], "--sports", "42000-42031"],
                               capture_output=True, text=True, check=True).stdout
        paths = json.loads(trace)["paths"].values()
        assert all(hops[-1] == nics["node16:eth0"] for hops in paths)
        assert len({hops[1] for hops in paths}) == 2  # both spines
    finally:
        lifecycle.down()
    assert machine() == bare


def test_network_only_lab(bare):
    from fleetctl.config import load_site

    st = lifecycle.up(LabParams(hosts=3, leaves=1, spines=1, slurm=False, ssh=False))
    try:
        assert st["processes"] == []
        site = load_site(paths.site_file())
        assert site.access["transport"] == "local" and site.slurm["conf"] == ""
        out = subprocess.run(["nsenter", "--net=/run/netns/fl-node3", "ping", "-c1", "-W2",
                              st["addresses"]["nics"]["node1:eth1"]], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        lifecycle.down()
    assert machine() == bare


def test_cli_without_a_lab(bare, capsys):
    from fleetctl.cli import run as cli_run

    assert cli_run(["lab", "status", "--format", "json"]) == 0
    assert '"status": "down"' in capsys.readouterr().out
    assert cli_run(["lab", "env"]) == 3
    assert "no lab is up" in capsys.readouterr().err
    assert cli_run(["lab", "fault", "add", "leaf1--spine1", "--loss", "5"]) == 3
    assert "no lab is up" in capsys.readouterr().err


def test_cli_refuses_while_a_test_session_holds_the_lab(bare):
    env = {k: v for k, v in os.environ.items() if k != "FLEETCTL_LAB_SESSION"}
    out = subprocess.run(["fleetctl", "lab", "down"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "test session holds the lab" in out.stderr
