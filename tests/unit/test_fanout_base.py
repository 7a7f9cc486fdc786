"""Commands, options from the site file, the registry and the bounded thread pool."""

from __future__ import annotations

import threading
import time

import pytest

from fleetctl.config import parse_site
from fleetctl.errors import ConfigError, UsageError
from fleetctl.fanout import Command, FanoutOptions, HostResult, get_transport, transport_class
from fleetctl.fanout.base import run_parallel
from fleetctl.fanout.ssh_jump import parse_jump_host
from fleetctl.errors import TransportError


def test_command_forms_and_quoting():
    assert Command.of("uname -r | cut -d. -f1").as_argv() == ["/bin/sh", "-c", "uname -r | cut -d. -f1"]
    argv = Command.of(["printf", "%s", "a b", "$HOME", "it's"])
    assert argv.as_shell() == "printf %s 'a b' '$HOME' 'it'\"'\"'s'"
    assert argv.as_argv() == ["printf", "%s", "a b", "$HOME", "it's"]
    with pytest.raises(ValueError):
        Command()


def test_options_default_to_the_schema():
    o = FanoutOptions.from_site(None)
    assert (o.concurrency, o.connect_timeout, o.command_timeout) == (64, 10.0, 60.0)
    assert (o.ssh_user, o.ssh_port, o.host_key_policy) == ("root", 22, "strict")
    assert o.known_hosts.endswith("/.ssh/known_hosts") and not o.known_hosts.startswith("~")


def test_options_from_site_paths_relative_to_the_site_file(tmp_path):
    text = """
[cluster]
name = "c"
[access]
concurrency = 8
command_timeout = 5
[access.ssh]
identity_file = "keys/id"
known_hosts = "/etc/ssh/ssh_known_hosts"
jump_host = "admin@bastion:2222"
addresses = { gpu1 = "10.0.0.1" }
[access.srun]
extra_args = ["--reservation=maint"]
[slurm]
partition = "gpu"
conf = "slurm.conf"
"""
    site = parse_site(text, source=str(tmp_path / "site.toml"))
    o = FanoutOptions.from_site(site)
    assert o.concurrency == 8 and o.command_timeout == 5.0
    assert o.identity_file == str(tmp_path / "keys/id") and o.known_hosts == "/etc/ssh/ssh_known_hosts"
    assert o.slurm_conf == str(tmp_path / "slurm.conf")
    assert o.srun_partition == "gpu" and o.srun_extra_args == ("--reservation=maint",)
    assert o.addresses == {"gpu1": "10.0.0.1"} and o.jump_host == "admin@bastion:2222"


def test_registry():
    assert transport_class("local").name == "local"
    with pytest.raises(UsageError, match="unknown transport 'rsh'; choose one of clush, local, srun, ssh"):
        transport_class("rsh")
    assert get_transport(None).name == "ssh"


def test_run_rejects_no_nodes_and_bad_timeouts():
    t = get_transport("local")
    with pytest.raises(UsageError, match="no nodes"):
        t.run([], "true")
    with pytest.raises(UsageError, match="invalid timeout"):
        t.run(["a"], "true", timeout=0)


def test_parse_jump_host():
    assert parse_jump_host("bastion", "root") == ("root", "bastion", 22)
    assert parse_jump_host("ops@bastion:2222", "root") == ("ops", "bastion", 2222)
    with pytest.raises(TransportError, match="invalid jump host 'b:x'"):
        parse_jump_host("b:x", "root")


def test_pool_bounds_concurrency_and_keeps_every_result():
    running, peak, lock = 0, 0, threading.Lock()

    def work(node):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        if node == "n7":
            raise RuntimeError("boom")
        return HostResult(node, "ok", 0)

    seen = []
    results = run_parallel([f"n{i}" for i in range(20)], work, 4, seen.append)
    assert peak <= 4 and len(results) == 20 and len(seen) == 20
    [bad] = [r for r in results if r.node == "n7"]
    assert bad.status == "error" and "RuntimeError: boom" in bad.error


def test_strict_policy_needs_the_known_hosts_file(tmp_path):
    from fleetctl.fanout.hostkeys import KnownHosts

    with pytest.raises(ConfigError, match="known_hosts file .* not found"):
        KnownHosts(str(tmp_path / "absent"), "strict")
    KnownHosts(str(tmp_path / "absent"), "accept-new")  # created on first contact


def _keys(tmp_path, *names, keytype="ed25519"):
    """Real keys from ssh-keygen, loaded with paramiko: (PKey, base64 blob) per name."""
    import subprocess

    import paramiko

    out = []
    for name in names:
        path = tmp_path / name
        subprocess.run(["ssh-keygen", "-q", "-t", keytype, *(["-b", "1024"] if keytype == "rsa" else []),
                        "-N", "", "-f", str(path)], check=True)
        key = paramiko.PKey.from_path(str(path))
        out.append((key, key.get_base64()))
    return out


def test_known_hosts_plain_hashed_revoked_and_junk_lines(tmp_path):
    import base64
    import hashlib
    import hmac

    from fleetctl.fanout.hostkeys import HostKeyRefused, KnownHosts

    (one, one_b), (two, two_b), (bad, bad_b), (other, _) = _keys(tmp_path, "one", "two", "bad", "other")
    [(rsa, rsa_b)] = _keys(tmp_path, "rsa", keytype="rsa")
    salt = b"0123456789abcdefghij"
    hashed = "|1|{}|{}".format(base64.b64encode(salt).decode(),
                               base64.b64encode(hmac.new(salt, b"[10.0.0.2]:2222", hashlib.sha1).digest()).decode())
    path = tmp_path / "known_hosts"
    path.write_text("\n".join([
        "# comment",
        f"node1,10.0.0.1 ssh-ed25519 {one_b}",
        f"{hashed} ssh-ed25519 {two_b}",
        f"@cert-authority *.example.com ssh-ed25519 {other.get_base64()}",
        f"@revoked * ssh-ed25519 {bad_b}",
        "garbage",
        f"node3 ssh-rsa {rsa_b}",
    ]) + "\n")
    kh = KnownHosts(str(path), "strict")
    kh.check("node1", ["node1", "10.0.0.1"], one)
    kh.check("node2", ["[node2]:2222", "[10.0.0.2]:2222"], two)
    kh.check("node3", ["node3"], rsa)
    with pytest.raises(HostKeyRefused) as exc:
        kh.check("node1", ["node1"], other)
    assert exc.value.status == "hostkey-mismatch" and "HOST KEY MISMATCH for node1" in exc.value.message
    with pytest.raises(HostKeyRefused, match="@revoked"):
        kh.check("node1", ["node1"], bad)
    with pytest.raises(HostKeyRefused, match="holds only ssh-rsa"):
        kh.check("node3", ["node3"], one)
    with pytest.raises(HostKeyRefused) as exc:
        kh.check("node9", ["node9"], one)
    assert exc.value.status == "hostkey-unknown"
    # RSA known: offer the SHA-2 RSA algorithms first
    offered = ["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256"]
    assert kh.preferred_key_types(["node3"], offered)[:2] == ["rsa-sha2-512", "rsa-sha2-256"]


def test_known_hosts_accept_new_records_once(tmp_path):
    from fleetctl.fanout.hostkeys import KnownHosts

    [(key, blob)] = _keys(tmp_path, "new")
    path = tmp_path / "sub" / "known_hosts"
    kh = KnownHosts(str(path), "accept-new")
    kh.check("n1", ["n1", "10.0.0.1"], key)
    kh.check("n1", ["n1", "10.0.0.1"], key)
    assert path.read_text() == f"10.0.0.1 ssh-ed25519 {blob}\n"
    KnownHosts(str(path), "strict").check("n1", ["n1", "10.0.0.1"], key)
