"""`fleetctl exec` and the fan-out transports across the emulated lab: real sshd per node namespace
(strict host keys), real Slurm 22.05 (srun), real network namespaces (local)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.fanout import FanoutOptions, get_transport, run_python
from fleetctl.fanout.payload import json_output
from fleetctl.nodeset import fold
from labutil import sbatch, scontrol

pytestmark = pytest.mark.lab
SRUN = pytest.param("srun", marks=pytest.mark.slurm)  # run on every Slurm version (-m slurm)

PAYLOAD = """import json, os, socket, sys
print(json.dumps({"node": os.environ.get("FLEETCTL_NODE"), "hostname": socket.gethostname(),
                  "args": sys.argv[1:]}))
"""


@pytest.fixture
def site_env(lab, monkeypatch):
    monkeypatch.setenv("FLEETCTL_SITE", str(lab.site_file))
    for key, value in lab.env.items():
        monkeypatch.setenv(key, value)
    return lab


@pytest.mark.parametrize("transport", ["ssh", SRUN, "clush"])
def test_exec_every_node(site_env, capsys, transport):
    lab = site_env
    nodes = fold(lab.nodes)
    assert cli_run(["exec", "-t", transport, nodes, "--format", "json", "--", "hostname"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["transport"] == transport and data["summary"]["ok"] == len(lab.nodes)
    assert {r["node"]: r["stdout"] for r in data["results"]} == {n: f"{n}\n" for n in lab.nodes}
    # The kernel is shared by every namespace: one folded group.
    assert cli_run(["exec", "-t", transport, nodes, "--", "uname", "-r"]) == 0
    out = capsys.readouterr().out
    assert f"{nodes} ({len(lab.nodes)})" in out


@pytest.mark.parametrize("transport", ["ssh", SRUN, "clush"])
def test_per_node_exit_status(site_env, capsys, transport):
    lab = site_env
    first, second = lab.nodes[0], lab.nodes[1]
    code = cli_run(["exec", "-t", transport, fold(lab.nodes[:3]), "--format", "json", "--",
                    f'echo hi; [ "$(hostname)" != {second} ] || exit 3'])
    assert code == 2
    data = json.loads(capsys.readouterr().out)
    by_node = {r["node"]: r for r in data["results"]}
    assert by_node[second]["status"] == "failed" and by_node[second]["exit_code"] == 3
    assert by_node[first]["status"] == "ok" and by_node[first]["stdout"] == "hi\n"


@pytest.mark.parametrize("transport", ["ssh", SRUN, "clush"])
def test_hung_node_times_out_others_reported(site_env, transport):
    lab = site_env
    hung = lab.nodes[-1]
    with get_transport(transport, cluster=lab.cluster) as t:
        start = time.monotonic()
        results = t.run(lab.nodes, f'[ "$(hostname)" = {hung} ] && sleep 25; echo done', timeout=3)
        took = time.monotonic() - start
    by_node = {r.node: r for r in results}
    assert by_node[hung].status == "timeout"
    assert all(by_node[n].ok and by_node[n].stdout == "done\n" for n in lab.nodes if n != hung)
    assert took < 20


@pytest.mark.parametrize("transport", ["ssh", SRUN, "local", "clush"])
def test_python_payload(site_env, transport):
    lab = site_env
    with get_transport(transport, cluster=lab.cluster) as t:
        results = run_python(t, lab.nodes, PAYLOAD, ["--level", "quick"])
    for r in results:
        data = json_output(r)
        assert data is not None, r
        assert data["node"] == r.node and data["args"] == ["--level", "quick"]
        if transport != "local":  # local enters only the network namespace, not the node's UTS one
            assert data["hostname"] == r.node


def test_local_transport_runs_in_each_node_namespace(site_env):
    lab = site_env
    with get_transport("local", cluster=lab.cluster) as t:
        results = t.run(lab.nodes, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"])
    for r in results:
        assert r.ok, r
        assert f"{lab.state['addresses']['nics'][f'{r.node}:eth0']}/" in r.stdout


def test_host_key_mismatch_on_a_lab_node(site_env, tmp_path, capsys):
    lab = site_env
    site = lab.cluster
    ssh = site.access["ssh"]
    victim = lab.nodes[1]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "fake")], check=True)
    fake = " ".join((tmp_path / "fake.pub").read_text().split()[:2])
    lines = []
    victim_addr = ssh["addresses"].get(victim, victim)
    for line in open(ssh["known_hosts"]).read().splitlines():
        host = line.split()[0] if line.strip() else ""
        names = host.split(",")
        if victim in names or victim_addr in names or f"[{victim_addr}]:22" in names:
            line = f"{host} {fake}"
        lines.append(line)
    (tmp_path / "known_hosts").write_text("\n".join(lines) + "\n")
    options = FanoutOptions.from_site(site)
    options.known_hosts = str(tmp_path / "known_hosts")
    with get_transport("ssh", options) as t:
        results = {r.node: r for r in t.run(lab.nodes, "true")}
    assert results[victim].status == "hostkey-mismatch" and "HOST KEY MISMATCH" in results[victim].error
    assert all(results[n].ok for n in lab.nodes if n != victim)


def test_unreachable_lab_address(site_env):
    lab = site_env
    options = FanoutOptions.from_site(lab.cluster)
    options.connect_timeout = 1.5
    options.addresses = {**options.addresses, "ghost": "10.250.0.250"}  # in the lab's mgmt subnet, no host
    with get_transport("ssh", options) as t:
        [ghost, real] = t.run(["ghost", lab.nodes[0]], "true")
    assert ghost.status == "unreachable" and real.ok


def tree_options(lab, tmp_path, **changes) -> FanoutOptions:
    """The lab's clush settings (a tree: a gateway per leaf) with an ssh_config that also names two
    hosts that are not there."""
    options = FanoutOptions.from_site(lab.cluster)
    config = tmp_path / "ssh_config"
    config.write_text(Path(options.clush_ssh_config).read_text()
                      + "Host ghost\n  HostName 10.250.0.250\nHost closed\n  HostName 10.250.0.11\n  Port 1\n")
    options.clush_ssh_config, options.connect_timeout = str(config), 1.5
    for key, value in changes.items():
        setattr(options, key, value)
    return options


def test_tree_reports_each_node_behind_a_gateway_as_ssh_saw_it(site_env, tmp_path):
    lab = site_env
    with get_transport("clush", tree_options(lab, tmp_path)) as t:
        results = {r.node: r for r in t.run([*lab.nodes, "ghost", "closed"], "echo $FLEETCTL_NODE")}
    assert all(results[n].ok and results[n].stdout == f"{n}\n" for n in lab.nodes)
    assert results["ghost"].status == "unreachable" and "10.250.0.250" in results["ghost"].error
    assert results["closed"].status == "refused" and "Connection refused" in results["closed"].error


def test_tree_moves_a_dead_gateways_nodes_to_the_others(site_env, tmp_path):
    lab = site_env
    gateways = lab.cluster.access["clush"]["gateways"]
    with get_transport("clush", tree_options(lab, tmp_path, clush_gateways=f"ghost,{gateways}")) as t:
        results = t.run(lab.nodes, "hostname")
    assert all(r.ok and r.stdout == f"{r.node}\n" for r in results), results


def test_tree_with_no_reachable_gateway_names_the_gateway(site_env, tmp_path, capsys):
    lab = site_env
    with get_transport("clush", tree_options(lab, tmp_path, clush_gateways="ghost")) as t:
        results = t.run(lab.nodes, "true")
    for r in results:
        assert r.status == "unreachable" and "no gateway" in r.error and "ghost" in r.error, r
    # A site mistake is fleetctl's usage error (exit 3), not a result per node.
    broken = tmp_path / "site.toml"
    broken.write_text(lab.site_file.read_text().replace(f'gateways = "{lab.cluster.access["clush"]["gateways"]}"',
                                                        'gateways = "gw["'))
    assert cli_run(["exec", "--site", str(broken), "-t", "clush", fold(lab.nodes), "--", "true"]) == 3
    assert "invalid access.clush.gateways" in capsys.readouterr().err


def operator_ssh(lab, tmp_path, known_hosts: Path) -> FanoutOptions:
    """An operator's own OpenSSH setup, all in their ssh_config: key and known_hosts (host keys
    trusted through the lab's SSH CA), aliases, every node behind a bastion (ProxyJump). The site
    keeps fleetctl's defaults and names no gateway (clush's direct mode)."""
    addresses = lab.cluster.access["ssh"]["addresses"]
    bastion, nodes = lab.nodes[0], lab.nodes[1:3]
    lines = ["Host *", f"  IdentityFile {lab.cluster.access['ssh']['identity_file']}", "  IdentitiesOnly yes",
             f"  UserKnownHostsFile {known_hosts}", "  GlobalKnownHostsFile /dev/null",
             f"Host bastion\n  HostName {addresses[bastion]}", "Host web-*\n  ProxyJump bastion"]
    lines += [f"Host web-{n}\n  HostName {addresses[n]}" for n in nodes]
    config = tmp_path / f"ssh_config.{known_hosts.name}"
    config.write_text("\n".join(lines) + "\n")
    return FanoutOptions(clush_ssh_config=str(config), connect_timeout=5)


def test_clush_runs_with_the_operators_ssh_certificates_aliases_and_bastion(site_env, tmp_path):
    lab = site_env
    ssh = lab.cluster.access["ssh"]
    ca_known_hosts = Path(ssh["known_hosts"]).parent / "known_hosts_ca"
    bastion_address = ssh["addresses"][lab.nodes[0]]
    aliases = [f"web-{n}" for n in lab.nodes[1:3]]
    probe = 'echo "$FLEETCTL_NODE $(hostname) ${SSH_CONNECTION%% *}"'
    with get_transport("clush", operator_ssh(lab, tmp_path, ca_known_hosts)) as t:
        results = t.run(aliases, probe)
    for alias, r in zip(aliases, results):
        # The node's own name, and the connection came from the bastion, not from this machine.
        assert r.ok and r.stdout == f"{alias} {alias[4:]} {bastion_address}\n", r
    # A CA the hosts' certificates are not signed by: strict checking refuses every host.
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other_ca")], check=True)
    other = (tmp_path / "other_ca.pub").read_text().split()[:2]
    (tmp_path / "known_hosts_other").write_text(f"@cert-authority * {' '.join(other)}\n")
    with get_transport("clush", operator_ssh(lab, tmp_path, tmp_path / "known_hosts_other")) as t:
        results = t.run(aliases, "true")
    assert all(r.status == "hostkey-unknown" and "Host key verification failed" in r.error for r in results), results
    # The site's own jump host and known_hosts (no ssh_config of the operator's): the jump hop gets them too.
    options = FanoutOptions.from_site(lab.cluster)
    options.clush_gateways, options.known_hosts = "", str(ca_known_hosts)
    options.jump_host = f"root@{bastion_address}"
    with get_transport("clush", options) as t:
        results = t.run(lab.nodes[1:3], probe)
    assert all(r.ok and r.stdout == f"{r.node} {r.node} {bastion_address}\n" for r in results), results


def test_clush_without_gateways_connects_from_here(site_env):
    lab = site_env
    options = FanoutOptions.from_site(lab.cluster)
    options.clush_gateways = ""
    with get_transport("clush", options) as t:
        results = t.run(lab.nodes, 'echo "$FLEETCTL_NODE ${SSH_CONNECTION%% *}"')
    assert all(r.ok and r.stdout == f"{r.node} 10.250.0.1\n" for r in results), results


@pytest.mark.slurm
def test_node_groups_from_slurm_and_the_site(site_env, capsys, tmp_path):
    """`@partition:NAME` and `@job:ID` read from the lab's real Slurm; `@name` from the site file."""
    lab = site_env
    partition = lab.cluster.data["slurm"]["partition"]
    assert cli_run(["exec", f"@partition:{partition}", "--format", "json", "--", "hostname"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == fold(lab.nodes)
    job = sbatch(lab, "-w", fold(lab.nodes[1:3]), "-N2", "--wrap", "sleep 60")
    try:
        deadline = time.monotonic() + 20
        while "JobState=RUNNING" not in scontrol(lab, "show", "job", job) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cli_run(["exec", f"@job:{job}!{lab.nodes[2]}", "--format", "json", "--", "hostname"]) == 0
        assert json.loads(capsys.readouterr().out)["nodes"] == lab.nodes[1]
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), check=False)
    site = tmp_path / "site.toml"
    site.write_text(lab.site_file.read_text() + f'\n[groups.static]\nfirst = "{lab.nodes[0]}"\n')
    assert cli_run(["exec", "--site", str(site), "@first", "--format", "json", "--", "true"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == lab.nodes[0]
    assert cli_run(["exec", "--site", str(site), "@nosuch", "--", "true"]) == 3
    assert "unknown group @nosuch" in capsys.readouterr().err


@pytest.mark.slurm
def test_srun_with_a_drained_node_fails_every_node_with_sruns_message(site_env):
    """The documented srun limit: all nodes or none. Each node gets srun's own reason."""
    lab = site_env
    victim = lab.nodes[-1]
    env = lab.command_env()
    subprocess.run(["scontrol", "update", f"nodename={victim}", "state=drain",
                    "reason=fleetctl-test: srun all-or-nothing"], env=env, check=True)
    try:
        options = FanoutOptions.from_site(lab.cluster)
        options.connect_timeout = 2
        with get_transport("srun", options) as t:
            start = time.monotonic()
            results = t.run(lab.nodes, "true", timeout=10)
            took = time.monotonic() - start
    finally:
        subprocess.run(["scontrol", "update", f"nodename={victim}", "state=resume"], env=env, check=True)
    assert {r.status for r in results} == {"error"}, results
    assert all(r.error.startswith("no exit status from srun for this node: srun: error:") for r in results)
    assert took < 10  # --immediate: no waiting in the queue for the drained node
