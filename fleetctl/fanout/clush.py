"""The clush transport: fan-out through ClusterShell and OpenSSH itself, as `clush` does.

Every connection is OpenSSH's `ssh`, so the operator's own ssh setup applies as it does for clush
and pdsh: ssh_config (User, Port, HostName aliases, ProxyJump, ControlMaster), the user's and the
system's known_hosts with hashed names and `@cert-authority` host certificates, the ssh agent.
Site settings left at their defaults are left to that setup; the others are passed as options.

With `access.clush.gateways` (or a clush `topology.conf`) it is ClusterShell's tree mode, for fleets
past what one machine's ssh sessions carry: this machine opens one ssh session per gateway, each
gateway runs ClusterShell's own gateway (`python3 -m ClusterShell.Gateway`) and reaches its share of
the nodes, and the results come back up the tree as they arrive; a failed gateway's nodes move to
the others. fleetctl adds nothing to the protocol: gateways need Python and ClusterShell (Debian's
`clustershell` package or PyPI's, the same Python major version), not fleetctl; an
`access.clush.ssh_config`, the key and known_hosts paths must exist there too.

On each node the command gets FLEETCTL_NODE: ClusterShell's ssh line goes through a few lines of
Python (`_SSH_WRAPPER`) that prefix `FLEETCTL_NODE=<node>; export FLEETCTL_NODE;` and exec ssh, with
no shell in between.

Limits (docs/exec.md): output is read line by line (a last line without a newline gets one); a
command past the timeout is stopped by killing its ssh, which leaves a remote process that ignores
the closed session running; a node's command may run twice if its gateway fails after starting it
(ClusterShell then relaunches the gateway's nodes elsewhere); ssh's exit status 255 is read as an
ssh failure only when ssh said why on stderr.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
import threading
import time

from fleetctl.errors import UsageError
from fleetctl.fanout.base import OnResult, Transport
from fleetctl.fanout.result import (AUTH_FAILED, ERROR, FAILED, HOSTKEY_MISMATCH, HOSTKEY_UNKNOWN, OK, REFUSED,
                                    TIMEOUT, UNREACHABLE, Command, HostResult, decode)
from fleetctl.fanout.ssh_jump import parse_jump_host
from fleetctl.nodeset import fold, parse_nodeset

MAX_OUTPUT = 16 << 20  # bytes kept per node and stream; the rest is counted, not kept

# argv[-2] is the node, argv[-1] the remote command line (ClusterShell's SshClient puts them last).
_SSH_WRAPPER = ("import os,shlex,sys;a=sys.argv[1:];"
                "a[-1]='FLEETCTL_NODE=%s; export FLEETCTL_NODE; %s'%(shlex.quote(a[-2]),a[-1]);"
                "os.execvp('ssh',['ssh']+a)")

# OpenSSH's own words for why it could not run the command (it then exits 255).
_SSH_FAILURES = (
    (re.compile(r"Host key for \S+ has changed"), HOSTKEY_MISMATCH),
    (re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED"), HOSTKEY_MISMATCH),
    (re.compile(r"Host key verification failed|host key is known for .* strict checking"), HOSTKEY_UNKNOWN),
    (re.compile(r"Permission denied \("), AUTH_FAILED),
    (re.compile(r"^ssh: connect to host .*: Connection refused", re.M), REFUSED),
    (re.compile(r"^ssh: connect to host |^ssh: Could not resolve hostname|^(kex|ssh)_exchange_identification:|"
                r"^Connection (closed|reset|timed out) (by|during banner)", re.M), UNREACHABLE),
)


def ssh_failure(stderr: str) -> tuple[str, str] | None:
    """(status, ssh's line saying why) for an ssh that exited 255, from what it printed on stderr;
    None when it said nothing known (then the 255 is the remote command's own exit status)."""
    for pattern, status in _SSH_FAILURES:
        if m := pattern.search(stderr):
            start = stderr.rfind("\n", 0, m.start()) + 1
            end = stderr.find("\n", m.start())
            return status, stderr[start:end if end >= 0 else None].strip()[:300]
    return None


DEFAULT_KNOWN_HOSTS = os.path.expanduser("~/.ssh/known_hosts")


class ClushTransport(Transport):
    name = "clush"

    def ssh_options(self) -> list[str]:
        """OpenSSH options for the site's access.ssh settings that differ from OpenSSH's own setup,
        for every hop."""
        o = self.options
        if o.addresses and not o.clush_ssh_config:
            raise UsageError("access.ssh.addresses needs access.clush.ssh_config with the clush transport "
                             "(OpenSSH resolves node names itself): Host NODE / HostName ADDRESS entries")
        # The key exchange paramiko (the ssh transport) prefers, first: OpenSSH's default hybrid
        # post-quantum one costs ~0.1 s of CPU per connection on each side, which at 1,000 nodes is
        # minutes of the gateways' CPU. '^' keeps every other algorithm of the site's after it.
        opts = ["-oLogLevel=ERROR", "-oKexAlgorithms=^curve25519-sha256,curve25519-sha256@libssh.org"]
        if o.clush_ssh_config:
            opts += ["-F", o.clush_ssh_config]
        if o.identity_file:
            opts += ["-i", o.identity_file, "-oIdentitiesOnly=yes"]
        if o.host_key_policy == "ignore":
            opts += ["-oStrictHostKeyChecking=no", "-oUserKnownHostsFile=/dev/null"]
        else:
            opts.append("-oStrictHostKeyChecking=" + ("yes" if o.host_key_policy == "strict" else "accept-new"))
            if o.known_hosts and os.path.expanduser(o.known_hosts) != DEFAULT_KNOWN_HOSTS:  # else OpenSSH's own
                opts.append(f"-oUserKnownHostsFile={o.known_hosts}")
        if o.jump_host:
            # Not ProxyJump: OpenSSH gives the jump hop none of these options, only ssh_config.
            user, host, port = parse_jump_host(o.jump_host, o.ssh_user)
            hop = ["ssh", *opts, "-oBatchMode=yes", "-l", user, "-p", str(port), "-W", "%h:%p", host]
            opts.append("-oProxyCommand=" + shlex.join(hop))
        if o.ssh_port != 22:  # else a port in ssh_config for some hosts stays theirs
            opts.append(f"-oPort={o.ssh_port}")
        return opts

    def topology(self, nodes: list[str]):
        """ClusterShell's topology tree rooted at this machine; None without gateways (direct)."""
        from ClusterShell.NodeSet import NodeSet
        from ClusterShell.Topology import TopologyError, TopologyGraph, TopologyParser

        root = socket.gethostname().split(".")[0] or "localhost"
        o = self.options
        if o.clush_topology:
            if not os.path.isfile(o.clush_topology):
                raise UsageError(f"access.clush.topology {o.clush_topology}: no such file")
            try:
                return TopologyParser(o.clush_topology).tree(root)
            except (OSError, TopologyError, ValueError) as exc:
                raise UsageError(f"access.clush.topology {o.clush_topology}: {exc}") from None
        if not o.clush_gateways:
            return None
        gateways = parse_nodeset(o.clush_gateways, what="access.clush.gateways")
        behind = NodeSet.fromlist(nodes) - gateways - NodeSet(root)
        graph = TopologyGraph()
        graph.add_route(NodeSet(root), gateways)
        if behind:
            graph.add_route(gateways, behind)
        return graph.to_tree(root)

    def _run(self, nodes: list[str], command: Command, timeout: float, stdin: bytes | None,
             on_result: OnResult) -> list[HostResult]:
        # Site mistakes are usage errors (exit 3) before anything starts, not per-node results.
        setup = {"topology": self.topology(nodes), "ssh_options": shlex.join(self.ssh_options())}
        run = _TreeRun(self, nodes, command, timeout, stdin, on_result, setup)
        # ClusterShell keeps one task per thread: a thread of its own gives every run a fresh task
        # (a failed run cannot leave state behind) and keeps Ctrl-C responsive here.
        worker = threading.Thread(target=run.execute, name="fanout-tree", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
        return run.finish()


class _TreeRun:
    """One fan-out through ClusterShell: its event handler gathers each node's output and status."""

    def __init__(self, transport: ClushTransport, nodes, command, timeout, stdin, on_result, setup):
        self.transport, self.nodes, self.command, self.setup = transport, nodes, command, setup
        self.timeout, self.stdin, self.on_result = timeout, stdin, on_result
        self.out: dict[str, dict[str, bytearray]] = {n: {"stdout": bytearray(), "stderr": bytearray()}
                                                     for n in nodes}
        self.dropped: dict[str, int] = {}
        self.gateway_said: dict[str, list[str]] = {}  # a gateway's own ssh/ClusterShell messages
        self.results: dict[str, HostResult] = {}
        self.failure, self.failure_status = "", ERROR
        self.start = time.monotonic()

    def execute(self) -> None:
        from ClusterShell.Propagation import RouteResolvingError
        from ClusterShell.Task import task_terminate

        try:
            self._execute()
        except RouteResolvingError:  # every gateway for some nodes failed
            self.failure, self.failure_status = "no gateway on its route could be reached", UNREACHABLE
        except Exception as exc:  # noqa: BLE001 - any other ClusterShell error ends the run, not fleetctl
            self.failure = f"ClusterShell failed: {type(exc).__name__}: {exc}"
        finally:
            task_terminate()  # ClusterShell keeps a task per thread until told: a daemon must not grow

    def _execute(self) -> None:
        from ClusterShell.Event import EventHandler
        from ClusterShell.Task import task_self

        o = self.transport.options
        task = task_self()
        tree = self.setup["topology"] is not None
        if tree:
            task.topology = self.setup["topology"]
            os.environ["CLUSTERSHELL_GW_PYTHON_EXECUTABLE"] = o.clush_python  # ClusterShell reads only this
        task.set_info("ssh_options", self.setup["ssh_options"])
        # -S: the wrapper needs only the standard library; skipping site-packages saves ~10 ms a node
        python = o.clush_python if tree else sys.executable  # the wrapper runs where ssh runs
        task.set_info("ssh_path", shlex.join([python, "-S", "-c", _SSH_WRAPPER]))
        if o.ssh_user:
            task.set_info("ssh_user", o.ssh_user)
        task.set_info("connect_timeout", max(1, round(o.connect_timeout)))
        task.set_info("fanout", o.concurrency)
        run = self

        class Handler(EventHandler):
            def ev_read(self, worker, node, sname, msg):
                run.read(node, sname, msg)

            def ev_hup(self, worker, node, rc):
                run.hup(node, rc)

            def ev_close(self, worker, timedout):
                if timedout:
                    for node in worker.iter_keys_timeout():
                        run.timed_out(node)

        # The whole run (connection and command) gets the command's timeout plus the connect timeout.
        worker = task.shell(self.command.as_shell(), nodes=fold(self.nodes), handler=Handler(), tree=tree,
                            stderr=True, stdin=self.stdin is not None, timeout=self.timeout + o.connect_timeout)
        if self.stdin is not None:
            worker.write(self.stdin)
            worker.set_write_eof()
        task.run()

    def read(self, node: str, sname: str, msg: bytes) -> None:
        streams = self.out.get(node)
        if streams is None:  # a gateway's own message
            said = self.gateway_said.setdefault(str(node), [])
            if len(said) < 20:
                said.append(decode(bytes(msg))[:300])
            return
        buf = streams["stderr" if sname == "stderr" else "stdout"]
        if len(buf) + len(msg) + 1 > MAX_OUTPUT:
            self.dropped[node] = self.dropped.get(node, 0) + len(msg) + 1
            return
        buf += msg + b"\n"

    def hup(self, node: str, rc: int) -> None:
        if node not in self.out or node in self.results:
            return
        out, err = self._text(node)
        failure = ssh_failure(err) if rc == 255 else None
        if failure is not None:
            # ssh's stderr is all ssh's own words, its line in `error`: no command output to keep
            result = HostResult(node, failure[0], None, out, "", self._took(), failure[1])
        else:
            result = HostResult(node, OK if rc == 0 else FAILED, rc, out, err, self._took(), self._note(node))
        self._report(result)

    def timed_out(self, node: str) -> None:
        if node in self.out and node not in self.results:
            out, err = self._text(node)
            self._report(HostResult(node, TIMEOUT, None, out, err, self._took(),
                                    f"no exit status within {self.timeout:g} s (command timeout) + "
                                    f"{self.transport.options.connect_timeout:g} s (connect)"))

    def finish(self) -> list[HostResult]:
        """Every node's result; those the tree never answered for say why."""
        why = self.failure or "the tree ended without an exit status for this node"
        gateways = "; ".join(f"{gw}: {' / '.join(lines[-2:])}" for gw, lines in sorted(self.gateway_said.items()))
        if gateways:
            why += f" (gateways said: {gateways})"
        for node in self.nodes:
            if node not in self.results:
                out, err = self._text(node)
                status = self.failure_status if self.failure else ERROR
                self._report(HostResult(node, status, None, out, err, self._took(), why[:1000]))
        return [self.results[n] for n in self.nodes]

    def _report(self, result: HostResult) -> None:
        self.results[result.node] = result
        self.on_result(result)

    def _text(self, node: str) -> tuple[str, str]:
        streams = self.out[node]
        return decode(bytes(streams["stdout"])), decode(bytes(streams["stderr"]))

    def _note(self, node: str) -> str:
        dropped = self.dropped.get(node)
        return f"output past {MAX_OUTPUT} bytes per stream dropped ({dropped} bytes)" if dropped else ""

    def _took(self) -> float:
        return time.monotonic() - self.start
