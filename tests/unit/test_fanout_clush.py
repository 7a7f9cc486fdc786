"""The clush transport's own logic: reading OpenSSH's failures (real outputs, tests/data/real/PROVENANCE.md),
the ssh options and topology it hands ClusterShell, the site mistakes it refuses, and the wrapper that
gives each node FLEETCTL_NODE. The transport end to end runs in tests/integration/test_exec_lab.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.errors import UsageError
from fleetctl.fanout import FanoutOptions, get_transport
from fleetctl.fanout.clush import DEFAULT_KNOWN_HOSTS, _SSH_WRAPPER, ClushTransport, ssh_failure

REAL = Path(__file__).parent.parent / "data" / "real"


@pytest.mark.parametrize("sample, status, says", [
    ("openssh-9.2p1-hostkey-changed.txt", "hostkey-mismatch", "Host key for 10.250.0.12 has changed"),
    ("openssh-9.2p1-hostkey-unknown.txt", "hostkey-unknown", "No ED25519 host key is known"),
    ("openssh-9.2p1-auth-denied.txt", "auth-failed", "Permission denied (publickey)"),
    ("openssh-9.2p1-connect-timeout.txt", "unreachable", "Connection timed out"),
    ("openssh-9.2p1-banner-timeout.txt", "unreachable", "during banner exchange"),
    ("openssh-9.2p1-refused.txt", "refused", "port 1: Connection refused"),
    ("openssh-9.2p1-unresolved.txt", "unreachable", "Could not resolve hostname"),
    ("openssh-maxstartups-reset-nixos-2024.txt", "unreachable", "Connection reset by peer"),
    ("openssh-kex-closed-shellcrash-2022.txt", "unreachable", "Connection closed by remote host"),
    ("openssh-7-exchange-reset-machinery-2016.txt", "unreachable", "ssh_exchange_identification"),
])
def test_ssh_failures_from_real_outputs(sample, status, says):
    got, line = ssh_failure((REAL / sample).read_text())
    assert got == status and says in line and "\n" not in line


@pytest.mark.parametrize("stderr", ["", "grep: no such file\n", "error: exit 255 by choice\n"])
def test_a_255_without_sshs_words_is_the_commands_own(stderr):
    assert ssh_failure(stderr) is None


def options(**kw) -> FanoutOptions:
    o = FanoutOptions(identity_file="/k/id", known_hosts="/k/known", clush_gateways="gw[1-2]",
                      clush_ssh_config="/k/ssh_config", clush_python="/usr/bin/python3")
    for key, value in kw.items():
        setattr(o, key, value)
    return o


def test_ssh_options_carry_the_site_access_settings():
    opts = ClushTransport(options(ssh_port=2222)).ssh_options()
    assert opts == ["-oLogLevel=ERROR", "-oKexAlgorithms=^curve25519-sha256,curve25519-sha256@libssh.org",
                    "-F", "/k/ssh_config", "-i", "/k/id", "-oIdentitiesOnly=yes", "-oStrictHostKeyChecking=yes",
                    "-oUserKnownHostsFile=/k/known", "-oPort=2222"]
    assert "-oStrictHostKeyChecking=accept-new" in ClushTransport(options(host_key_policy="accept-new")).ssh_options()
    ignore = ClushTransport(options(host_key_policy="ignore")).ssh_options()
    assert "-oStrictHostKeyChecking=no" in ignore and "-oUserKnownHostsFile=/dev/null" in ignore
    # Port 22 is left to ssh_config, where some hosts may have their own.
    assert not any(o.startswith("-oPort") for o in ClushTransport(options()).ssh_options())


def test_site_settings_at_their_defaults_are_left_to_openssh():
    """Where the site keeps fleetctl's defaults, the operator's ssh_config and known_hosts (the user's
    and the system's, certificates included) decide; a jump host is OpenSSH's ProxyJump."""
    plain = ClushTransport(FanoutOptions()).ssh_options()  # known_hosts "~/.ssh/known_hosts"
    assert plain == ClushTransport(FanoutOptions(known_hosts=DEFAULT_KNOWN_HOSTS)).ssh_options()
    assert not any(o.startswith(("-F", "-i", "-oUserKnownHostsFile", "-oPort", "-oProxy")) for o in plain)
    assert "-oStrictHostKeyChecking=yes" in plain  # fleetctl's stance stays: strict unless the site says so
    # The jump host gets the same key, known_hosts and policy (ProxyJump would give it none of them).
    *_, proxy = ClushTransport(options(jump_host="admin@bastion:2222")).ssh_options()
    hop = shlex.split(proxy.removeprefix("-oProxyCommand="))
    assert hop[0] == "ssh"
    assert hop[-8:] == ["-oBatchMode=yes", "-l", "admin", "-p", "2222", "-W", "%h:%p", "bastion"]
    assert "-oUserKnownHostsFile=/k/known" in hop and "/k/id" in hop


def test_addresses_without_an_ssh_config_are_refused():
    with pytest.raises(UsageError, match="needs access.clush.ssh_config"):
        ClushTransport(options(addresses={"n1": "10.0.0.1"}, clush_ssh_config="")).ssh_options()


def test_topology_puts_the_gateways_under_this_machine_and_the_rest_under_them():
    tree = ClushTransport(options()).topology(["gw1", "n1", "n2", "n3"])
    levels = [str(group.nodeset) for group in tree]
    assert levels[1:] == ["gw[1-2]", "n[1-3]"]


@pytest.mark.parametrize("change, says", [
    ({"clush_gateways": "gw["}, "invalid access.clush.gateways"),
    ({"clush_topology": "/nonexistent/topology.conf"}, "topology /nonexistent/topology.conf: no such file"),
])
def test_topology_mistakes_are_usage_errors(change, says):
    with pytest.raises(UsageError, match=says):
        ClushTransport(options(**change)).topology(["n1"])


def test_without_gateways_it_connects_directly():
    assert ClushTransport(options(clush_gateways="")).topology(["n1"]) is None


def test_a_clush_topology_file_is_used_as_it_is(tmp_path):
    import socket

    root = socket.gethostname().split(".")[0]
    conf = tmp_path / "topology.conf"
    conf.write_text(f"[routes]\n{root}: gw1\ngw1: gw2\ngw2: n[1-100]\n")
    tree = ClushTransport(options(clush_topology=str(conf))).topology(["n1"])
    assert [str(group.nodeset) for group in tree][1:] == ["gw1", "gw2", "n[1-100]"]


def test_the_wrapper_gives_each_node_its_name_without_a_shell(tmp_path):
    """ClusterShell runs `PYTHON -c WRAPPER [ssh options] NODE COMMAND`; the wrapper must exec ssh with
    the node's name prefixed to the command, quoted, and every other argument untouched."""
    fake = tmp_path / "ssh"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    node = "n1;rm -rf /"
    out = subprocess.run([sys.executable, "-c", _SSH_WRAPPER, "-oBatchMode=yes", "-l", "root", node,
                          "echo $FLEETCTL_NODE"], capture_output=True, text=True, env=env, check=True).stdout
    args = out.splitlines()
    assert args[:4] == ["-oBatchMode=yes", "-l", "root", node]
    assert args[4] == f"FLEETCTL_NODE={shlex.quote(node)}; export FLEETCTL_NODE; echo $FLEETCTL_NODE"


def test_clush_is_a_transport_by_name():
    assert get_transport("clush", options()).name == "clush"
