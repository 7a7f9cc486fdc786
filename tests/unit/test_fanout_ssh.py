"""The ssh transport against a real OpenSSH sshd listening on loopback addresses (no lab needed).

One sshd listens on 127.0.0.2-127.0.0.5 with a generated host key; nodes n1..n4 map to those addresses.
Each failure mode is produced for real: a wrong known_hosts entry, a key the server does not know, a
port nobody listens on, a listener whose accept queue is full (SYNs dropped: connect times out), a
listener that never speaks ssh, a command that hangs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.fanout import FanoutOptions, get_transport, run_python
from fleetctl.fanout.payload import json_output

SSHD = "/usr/sbin/sshd"
ADDRESSES = {f"n{i}": f"127.0.0.{i + 1}" for i in range(1, 5)}

pytestmark = pytest.mark.skipif(not (os.path.exists(SSHD) and shutil.which("ssh-keygen")
                                     and os.geteuid() == 0), reason="needs root, sshd and ssh-keygen")


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True)
    return path


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, root: Path):
        self.root = root
        self.host_key = _keygen(root / "host_key")
        self.client_key = _keygen(root / "client_key")
        self.stranger_key = _keygen(root / "stranger_key")  # not in authorized_keys
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        self.port = _free_port("127.0.0.2")
        listen = "".join(f"ListenAddress {a}:{self.port}\n" for a in ADDRESSES.values())
        (root / "sshd_config").write_text(
            f"{listen}HostKey {self.host_key}\nAuthorizedKeysFile {root}/authorized_keys\n"
            "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPidFile none\nLogLevel ERROR\nMaxStartups 100\n"
            # n4's address refuses to forward: a jump through it shows traffic really goes via the jump
            "Match LocalAddress 127.0.0.5\n    AllowTcpForwarding no\n")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.log = open(root / "sshd.log", "w")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self._wait()
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(self.known_hosts_lines())

    def known_hosts_lines(self, key_file: Path | None = None) -> str:
        key = " ".join((key_file or Path(f"{self.host_key}.pub")).read_text().split()[:2])
        return "".join(f"[{a}]:{self.port} {key}\n" for a in ADDRESSES.values())

    def _wait(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.5", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
                time.sleep(0.05)
        raise RuntimeError("sshd did not start")

    def options(self, **changes) -> FanoutOptions:
        o = FanoutOptions(ssh_port=self.port, identity_file=str(self.client_key),
                          known_hosts=str(self.known_hosts), addresses=dict(ADDRESSES),
                          connect_timeout=5, command_timeout=20)
        for k, v in changes.items():
            setattr(o, k, v)
        return o

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)
        self.log.close()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def _run(options, nodes, command, **kw):
    with get_transport("ssh", options) as t:
        return {r.node: r for r in t.run(nodes, command, **kw)}


def test_exit_codes_output_and_node_variable(sshd):
    res = _run(sshd.options(), ["n1", "n2", "n3"],
               'echo "out $FLEETCTL_NODE"; echo err >&2; [ "$FLEETCTL_NODE" != n2 ] || exit 7')
    assert res["n1"].status == "ok" and res["n1"].exit_code == 0
    assert res["n1"].stdout == "out n1\n" and res["n1"].stderr == "err\n"
    assert res["n2"].status == "failed" and res["n2"].exit_code == 7 and res["n2"].stdout == "out n2\n"
    assert all(r.duration_s > 0 for r in res.values())


def test_argv_words_arrive_intact(sshd):
    words = ["a b", "$HOME", "it's", "`id`", "; rm -rf /tmp/nothing"]
    res = _run(sshd.options(), ["n1"], ["printf", "<%s>", *words])
    assert res["n1"].stdout == "".join(f"<{w}>" for w in words)


def test_python_payload_on_stdin(sshd):
    script = "import json, os, sys\nprint(json.dumps({'node': os.environ['FLEETCTL_NODE'], 'args': sys.argv[1:]}))\n"
    with get_transport("ssh", sshd.options()) as t:
        results = run_python(t, ["n1", "n2"], script, ["--x", "a b"])
    assert [json_output(r) for r in results] == [{"node": "n1", "args": ["--x", "a b"]},
                                                 {"node": "n2", "args": ["--x", "a b"]}]


def test_large_output_on_both_streams(sshd):
    # More than paramiko's 2 MiB channel window on each stream: both must be drained together.
    res = _run(sshd.options(), ["n1"], "head -c 3000000 /dev/zero | tr '\\0' a; "
               "head -c 3000000 /dev/zero | tr '\\0' b >&2")
    assert res["n1"].ok and len(res["n1"].stdout) == 3_000_000 and len(res["n1"].stderr) == 3_000_000


def test_host_key_mismatch_is_refused(sshd, tmp_path):
    other = _keygen(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    lines = sshd.known_hosts_lines().splitlines(keepends=True)
    # n2's entry carries another key; n1, n3 keep the real one.
    known.write_text(lines[0] + sshd.known_hosts_lines(Path(f"{other}.pub")).splitlines(True)[1] + lines[2])
    res = _run(sshd.options(known_hosts=str(known)), ["n1", "n2", "n3"], "true")
    assert res["n1"].ok and res["n3"].ok
    assert res["n2"].status == "hostkey-mismatch"
    assert "HOST KEY MISMATCH for n2" in res["n2"].error and res["n2"].exit_code is None


def test_unknown_host_strict_accept_new_and_ignore(sshd, tmp_path):
    known = tmp_path / "kh"
    known.write_text("")
    res = _run(sshd.options(known_hosts=str(known)), ["n1"], "true")
    assert res["n1"].status == "hostkey-unknown" and "strict" in res["n1"].error

    res = _run(sshd.options(known_hosts=str(known), host_key_policy="accept-new"), ["n1", "n2"], "true")
    assert res["n1"].ok and res["n2"].ok
    recorded = known.read_text()
    assert f"[127.0.0.2]:{sshd.port} ssh-ed25519" in recorded and f"[127.0.0.3]:{sshd.port}" in recorded
    # Recorded keys are then checked strictly.
    assert _run(sshd.options(known_hosts=str(known)), ["n2"], "true")["n2"].ok

    res = _run(sshd.options(known_hosts=str(tmp_path / "absent"), host_key_policy="ignore"), ["n3"], "true")
    assert res["n3"].ok


def test_auth_failure(sshd):
    res = _run(sshd.options(identity_file=str(sshd.stranger_key)), ["n1"], "true")
    assert res["n1"].status == "auth-failed"
    assert "root@" in res["n1"].error and "rejected our key" in res["n1"].error


def test_refused_port(sshd):
    port = _free_port("127.0.0.9")
    res = _run(sshd.options(ssh_port=port, addresses={"dead": "127.0.0.9"}), ["dead"], "true")
    assert res["dead"].status == "refused" and f"127.0.0.9:{port} refused" in res["dead"].error


def test_unresolvable_name(sshd):
    res = _run(sshd.options(), ["no-such-host.invalid"], "true")
    assert res["no-such-host.invalid"].status == "unreachable"
    assert "cannot resolve" in res["no-such-host.invalid"].error


def test_connect_timeout_when_syns_are_dropped(sshd):
    # A listener that never accepts, its one-slot queue filled: further SYNs are dropped.
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.10", 0))
        lsock.listen(0)
        port = lsock.getsockname()[1]
        fillers = []
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.10", port))
            fillers.append(c)
        time.sleep(0.1)
        start = time.monotonic()
        res = _run(sshd.options(ssh_port=port, connect_timeout=1.0,
                                addresses={"slow": "127.0.0.10", "n1": "127.0.0.2"}), ["slow"], "true")
        took = time.monotonic() - start
        for c in fillers:
            c.close()
    assert res["slow"].status == "unreachable" and "timed out after 1 s" in res["slow"].error
    assert 0.9 < took < 3


def test_silent_server_times_out_in_handshake(sshd):
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.11", 0))
        lsock.listen(8)  # accepts TCP (kernel), never sends an ssh banner
        port = lsock.getsockname()[1]
        res = _run(sshd.options(ssh_port=port, connect_timeout=1.0, addresses={"mute": "127.0.0.11"}),
                   ["mute"], "true")
    assert res["mute"].status == "unreachable" and "timed out" in res["mute"].error, res["mute"]


def _pids_running(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker in open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_hung_command_times_out_while_others_report_and_is_killed(sshd):
    marker = f"sleep 15.{os.getpid()}"  # unique, to find the remote process afterwards
    start = time.monotonic()
    res = _run(sshd.options(), ["n1", "n2", "n3", "n4"],
               f'[ "$FLEETCTL_NODE" = n3 ] && {{ echo started; {marker}; }}; echo done', timeout=1.5)
    took = time.monotonic() - start
    assert res["n3"].status == "timeout" and res["n3"].stdout == "started\n"
    assert "timed out after 1.5 s" in res["n3"].error
    assert all(res[n].ok and res[n].stdout == "done\n" for n in ("n1", "n2", "n4"))
    assert took < 6
    # A root session ignores the ssh signal request; the token reaper must have killed it anyway.
    deadline = time.monotonic() + 3
    while _pids_running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_running(marker) == []


def test_jump_host(sshd):
    with get_transport("ssh", sshd.options(jump_host=f"root@127.0.0.2:{sshd.port}")) as t:
        res = {r.node: r for r in t.run(["n3", "n4"], 'echo "$FLEETCTL_NODE"')}
        assert res["n3"].ok and res["n3"].stdout == "n3\n"
        assert res["n4"].ok and res["n4"].stdout == "n4\n"
        # A refused port behind the jump host is reported per host; the jump connection survives.
        t.options.addresses["dead"] = "127.0.0.9"
        t.options.ssh_port = _free_port("127.0.0.9")
        dead = t.run(["dead"], "true")[0]
    assert dead.status == "refused" and "via jump host" in dead.error, (dead.status, dead.error)


def test_jump_host_that_refuses_forwarding(sshd):
    # Same targets, but the jump host (n4's address) forbids forwarding: the channel is refused there.
    res = _run(sshd.options(jump_host=f"127.0.0.5:{sshd.port}"), ["n1", "n2"], "true")
    assert {r.status for r in res.values()} == {"unreachable"}
    assert all("via jump host" in r.error and "prohibited" in r.error for r in res.values()), res


def test_unreachable_jump_host_fails_every_node(sshd):
    port = _free_port("127.0.0.9")
    res = _run(sshd.options(jump_host=f"127.0.0.9:{port}"), ["n1", "n2"], "true")
    assert {r.status for r in res.values()} == {"refused"}
    assert all("jump host" in r.error for r in res.values())


# ---- the CLI over real ssh: exit codes and JSON


def _site(sshd, tmp_path, **ssh) -> Path:
    addresses = ", ".join(f'{n} = "{a}"' for n, a in ADDRESSES.items())
    extra = "".join(f'{k} = "{v}"\n' for k, v in ssh.items())
    site = tmp_path / "site.toml"
    site.write_text(f"""
[cluster]
name = "sshd-test"
[access]
transport = "ssh"
connect_timeout = 2.0
[access.ssh]
port = {sshd.port}
identity_file = "{sshd.client_key}"
known_hosts = "{sshd.known_hosts}"
addresses = {{ {addresses} }}
{extra}
[[node_classes]]
name = "loop"
nodes = "n[1-4]"
""")
    return site


def test_cli_exec_over_ssh_exit_codes(sshd, tmp_path, capsys):
    site = _site(sshd, tmp_path)
    assert cli_run(["--site", str(site), "exec", "n[1-4]", "--", "uname", "-s"]) == 0
    out = capsys.readouterr().out
    assert "n[1-4] (4)" in out and "Linux" in out

    assert cli_run(["exec", "n[1-2]", "--site", str(site), "--format", "json", "--",
                    'test "$FLEETCTL_NODE" = n1']) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["by_status"] == {"ok": 1, "failed": 1}
    assert [g["nodes"] for g in data["groups"]] == ["n1", "n2"]


def test_cli_exec_auth_failure_exit_2(sshd, tmp_path, capsys):
    site = _site(sshd, tmp_path)
    text = site.read_text().replace(str(sshd.client_key), str(sshd.stranger_key))
    site.write_text(text)
    assert cli_run(["--site", str(site), "exec", "n1", "--", "true"]) == 2
    captured = capsys.readouterr()
    assert "auth-failed" in captured.out and "1 auth-failed: n1" in captured.err


def test_cli_missing_identity_file_is_a_one_line_error(sshd, tmp_path, capsys):
    site = _site(sshd, tmp_path)
    site.write_text(site.read_text().replace(str(sshd.client_key), str(tmp_path / "nope")))
    assert cli_run(["--site", str(site), "exec", "n1", "--", "true"]) == 3
    err = capsys.readouterr().err
    assert "identity file" in err and "not found" in err and "Traceback" not in err
