"""The running lab: Slurm, sshd with strict host keys, a valid site file, hostnames, GPUs, status."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import paramiko
import pytest

from fleetctl.cli import run as cli_run
from fleetctl.lab import lifecycle

pytestmark = pytest.mark.lab


@pytest.mark.slurm
def test_srun_runs_on_every_node(lab):
    n = len(lab.nodes)
    out = subprocess.run(["srun", f"-N{n}", "hostname"], capture_output=True, text=True, timeout=60,
                         env=lab.command_env(), check=True).stdout
    assert sorted(out.split()) == sorted(lab.nodes)


@pytest.mark.slurm
def test_ssh_strict_host_keys(lab):
    site = lab.cluster
    ssh = site.access["ssh"]
    assert ssh["host_key_policy"] == "strict"
    for node in lab.nodes:
        client = paramiko.SSHClient()
        client.load_host_keys(ssh["known_hosts"])
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(ssh["addresses"][node], username=ssh["user"], key_filename=ssh["identity_file"],
                       look_for_keys=False, allow_agent=False, timeout=10)
        try:
            _, stdout, _ = client.exec_command("hostname; ip -o -4 addr show dev eth0; echo $SLURM_CONF")
            text = stdout.read().decode()
        finally:
            client.close()
        hostname, addr_line, slurm_conf = text.splitlines()[:3]
        assert hostname == node and slurm_conf == lab.env["SLURM_CONF"]
        nic_address = lab.state["addresses"]["nics"][f"{node}:eth0"]
        assert f"{nic_address}/30" in addr_line


def test_ssh_refuses_unknown_host_key(lab, tmp_path):
    """Strict means strict: an empty known_hosts refuses the node."""
    ssh = lab.cluster.access["ssh"]
    (tmp_path / "known_hosts").write_text("")
    client = paramiko.SSHClient()
    client.load_host_keys(str(tmp_path / "known_hosts"))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException):
        client.connect(ssh["addresses"][lab.nodes[0]], username="root", key_filename=ssh["identity_file"],
                       look_for_keys=False, allow_agent=False, timeout=10)
    client.close()


def test_site_file_describes_the_lab(lab):
    site = lab.cluster
    p = lab.params
    assert site.name == "lab"
    assert len(site.nodes) == p.hosts
    assert len(site.switches) == p.leaves + p.spines
    assert len(site.links) == p.leaves * p.spines + p.hosts * p.nics_per_host
    assert "leaf1--spine2" in site.links
    link = site.links[f"node{p.hosts}:eth1--leaf{p.leaves}"]
    # a_address/b_address are the real interface addresses inside the namespaces
    out = lab.run_in(f"node{p.hosts}", ["ip", "-o", "-4", "addr", "show", "dev", "eth1"]).stdout
    assert f" {link.a.address}/30 " in out
    out = lab.run_in(f"leaf{p.leaves}", ["ip", "-o", "-4", "addr", "show"]).stdout
    assert f" {link.b.address}/30 " in out
    assert site.access["local"]["netns"].format(node="node1") == lab.netns("node1")
    assert site.slurm["partition"] == "gpu"
    assert site.node_classes[0].gpus.count == p.gpus_per_host


def test_config_check_accepts_the_site_file(lab, capsys):
    assert cli_run(["config", "check", str(lab.site_file), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_simulated_gpus_and_kernel_log(lab):
    site = lab.cluster
    doc = json.loads(open(site.checks["simulated_gpus"].format(node="node2")).read())
    assert doc["simulated"] is True and len(doc["gpus"]) == lab.params.gpus_per_host
    for node in lab.nodes:
        assert os.path.isfile(site.checks["kernel_log"].format(node=node))


def test_up_again_is_idempotent(lab):
    st = lifecycle.up(lab.params)
    assert st["started"] == lab.state["started"]  # the same lab, not a rebuild


def test_up_with_another_size_is_a_clear_error(lab, capsys):
    rc = cli_run(["lab", "up", "--hosts", str(lab.params.hosts + 1)])
    assert rc == 3
    assert "another size is up" in capsys.readouterr().err


@pytest.mark.slurm
def test_status_and_env(lab, capsys):
    assert cli_run(["lab", "status", "--format", "json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["status"] == "up" and not st["problems"]
    assert all(p["running"] for p in st["processes"])
    assert set(st["clock"]["hosts"]) == set(lab.nodes)
    for truth in st["clock"]["hosts"].values():
        assert 0.5 <= abs(truth["offset_ms"]) <= 5 and 1 <= abs(truth["drift_ppm"]) <= 50
    assert cli_run(["lab", "env"]) == 0
    out = capsys.readouterr().out
    assert f"export SLURM_CONF={lab.env['SLURM_CONF']}" in out
    assert f"export FLEETCTL_SITE={lab.site_file}" in out


@pytest.mark.slurm
def test_prolog_hooks_are_installed_by_dropping_a_file(lab, tmp_path):
    marker = tmp_path / "prolog-ran"
    hook = lab.lab_dir / "hooks" / "prolog.d" / "50-test"
    hook.write_text(f"#!/bin/sh\necho \"$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_CONF\" >> {marker}\n")
    hook.chmod(0o755)
    try:
        subprocess.run(["srun", "-N2", "true"], env=lab.command_env(), check=True, timeout=60)
    finally:
        hook.unlink()
    lines = [line.split() for line in marker.read_text().splitlines()]
    nodes = {words[0] for words in lines}
    assert len(nodes) == 2 and nodes <= set(lab.nodes)
    # hooks can call scontrol (to drain a node): they see the lab's slurm.conf
    assert {words[2] for words in lines} == {lab.env["SLURM_CONF"]}


def test_management_addresses_answer(lab):
    for node in lab.nodes:
        with socket.create_connection((lab.state["addresses"]["mgmt"][node], 22), timeout=2):
            pass


def test_clock_truth_is_readable_by_the_probe_agent(lab):
    from fleetctl.lab.clock import host_clocks

    clocks = host_clocks(lab.cluster.data["lab"]["state_dir"])
    assert set(clocks) == set(lab.nodes) and lab.cluster.data["lab"]["clock_skew"] is True
    c = clocks["node1"]
    truth = lab.state["clock"]["hosts"]["node1"]
    assert c.offset_at(c.t0) == truth["offset_ms"] / 1000
    assert abs(c.offset_at(c.t0 + 1000) - c.offset_at(c.t0) - truth["drift_ppm"] * 1e-3) < 1e-12


@pytest.mark.slurm
def test_every_slurm_command_is_the_labs_slurm(lab, tmp_path):
    """A Debian root's Slurm must be the one seen everywhere: in the test's PATH, in a job step, in a
    Prolog (where fleetctl's hooks call scontrol) and in an ssh session, as on a real node."""
    want = f"slurm-wlm {lab.state['slurm']['version']}."
    env = lab.command_env()
    assert subprocess.run(["scontrol", "--version"], env=env, capture_output=True, text=True,
                          check=True, timeout=30).stdout.startswith(want)
    step = subprocess.run(["srun", "-N1", "-w", lab.nodes[0], "scontrol", "--version"], env=env,
                          capture_output=True, text=True, check=True, timeout=60).stdout
    assert step.startswith(want), step
    marker = tmp_path / "prolog-version"
    hook = lab.lab_dir / "hooks" / "prolog.d" / "50-version"
    hook.write_text(f"#!/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin scontrol --version >> {marker}\n")
    hook.chmod(0o755)
    try:
        subprocess.run(["srun", "-N1", "-w", lab.nodes[1], "true"], env=env, check=True, timeout=60)
    finally:
        hook.unlink()
    assert marker.read_text().startswith(want), marker.read_text()
    ssh = lab.cluster.access["ssh"]
    client = paramiko.SSHClient()
    client.load_host_keys(ssh["known_hosts"])
    client.connect(ssh["addresses"][lab.nodes[2]], username=ssh["user"], key_filename=ssh["identity_file"],
                   look_for_keys=False, allow_agent=False, timeout=10)
    try:
        _, stdout, _ = client.exec_command("scontrol --version")
        assert stdout.read().decode().startswith(want)
    finally:
        client.close()
