"""The tree transport's own logic: reading OpenSSH's failures (real outputs, tests/data/real/PROVENANCE.md),
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
from fleetctl.fanout.tree import _SSH_WRAPPER, TreeTransport, ssh_failure

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
    o = FanoutOptions(identity_file="/k/id", known_hosts="/k/known", tree_gateways="gw[1-2]",
                      tree_ssh_config="/k/ssh_config", tree_python="/usr/bin/python3")
    for key, value in kw.items():
        setattr(o, key, value)
    return o


def test_ssh_options_carry_the_site_access_settings():
    opts = TreeTransport(options(ssh_port=2222)).ssh_options()
    assert opts == ["-oLogLevel=ERROR", "-oKexAlgorithms=^curve25519-sha256,curve25519-sha256@libssh.org",
                    "-oPort=2222", "-F", "/k/ssh_config", "-i", "/k/id",
                    "-oIdentitiesOnly=yes", "-oStrictHostKeyChecking=yes", "-oUserKnownHostsFile=/k/known"]
    assert "-oStrictHostKeyChecking=accept-new" in TreeTransport(options(host_key_policy="accept-new")).ssh_options()
    ignore = TreeTransport(options(host_key_policy="ignore")).ssh_options()
    assert "-oStrictHostKeyChecking=no" in ignore and "-oUserKnownHostsFile=/dev/null" in ignore
    # Port 22 is left to ssh_config, where some hosts may have their own.
    assert not any(o.startswith("-oPort") for o in TreeTransport(options()).ssh_options())


@pytest.mark.parametrize("change, says", [
    ({"jump_host": "bastion"}, "jump_host does not combine"),
    ({"addresses": {"n1": "10.0.0.1"}, "tree_ssh_config": ""}, "needs access.tree.ssh_config"),
])
def test_site_settings_the_tree_cannot_honour_are_refused(change, says):
    with pytest.raises(UsageError, match=says):
        TreeTransport(options(**change)).ssh_options()


def test_topology_puts_the_gateways_under_this_machine_and_the_rest_under_them():
    tree = TreeTransport(options()).topology(["gw1", "n1", "n2", "n3"])
    levels = [str(group.nodeset) for group in tree]
    assert levels[1:] == ["gw[1-2]", "n[1-3]"]


@pytest.mark.parametrize("change, says", [
    ({"tree_gateways": "", "tree_topology": ""}, "needs access.tree.gateways"),
    ({"tree_gateways": "gw["}, "invalid access.tree.gateways"),
    ({"tree_topology": "/nonexistent/topology.conf"}, "access.tree.topology /nonexistent/topology.conf: no such file"),
])
def test_topology_mistakes_are_usage_errors(change, says):
    with pytest.raises(UsageError, match=says):
        TreeTransport(options(**change)).topology(["n1"])


def test_a_clush_topology_file_is_used_as_it_is(tmp_path):
    import socket

    root = socket.gethostname().split(".")[0]
    conf = tmp_path / "topology.conf"
    conf.write_text(f"[routes]\n{root}: gw1\ngw1: gw2\ngw2: n[1-100]\n")
    tree = TreeTransport(options(tree_topology=str(conf))).topology(["n1"])
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


def test_tree_is_a_transport_by_name():
    assert get_transport("tree", options()).name == "tree"
