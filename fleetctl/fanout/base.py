"""The abstract Transport, its options (taken from the site file's `access` section) and the bounded
thread pool every backend uses to contact nodes in parallel.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fleetctl.errors import UsageError
from fleetctl.fanout.result import ERROR, Command, HostResult

OnResult = Callable[[HostResult], None]


@dataclass
class FanoutOptions:
    """Everything a transport needs to know, with the schema's defaults (see schema.toml `access.*`)."""

    concurrency: int = 64
    connect_timeout: float = 10.0
    command_timeout: float = 60.0
    ssh_user: str = "root"
    ssh_port: int = 22
    identity_file: str = ""
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: str = "strict"
    jump_host: str = ""
    addresses: dict[str, str] = field(default_factory=dict)
    srun_partition: str = ""
    srun_extra_args: tuple[str, ...] = ()
    slurm_conf: str = ""
    local_netns: str = ""
    clush_gateways: str = ""
    clush_topology: str = ""
    clush_ssh_config: str = ""
    clush_python: str = "python3"

    @classmethod
    def from_site(cls, cluster=None) -> FanoutOptions:
        """Options from a loaded Cluster; without one, the schema's defaults."""
        from fleetctl.config.files import site_path

        if cluster is None:
            from fleetctl.config.schema import validate

            data, source = validate({"cluster": {"name": "default"}}, "<defaults>"), ""
        else:
            data, source = cluster.data, cluster.source
        access, slurm = data["access"], data["slurm"]
        ssh, srun, clush = access["ssh"], access["srun"], access["clush"]
        return cls(
            concurrency=access["concurrency"], connect_timeout=float(access["connect_timeout"]),
            command_timeout=float(access["command_timeout"]), ssh_user=ssh["user"], ssh_port=ssh["port"],
            identity_file=site_path(ssh["identity_file"], source),
            known_hosts=site_path(ssh["known_hosts"], source), host_key_policy=ssh["host_key_policy"],
            jump_host=ssh["jump_host"], addresses=dict(ssh["addresses"]),
            srun_partition=srun["partition"] or slurm["partition"],
            srun_extra_args=tuple(srun["extra_args"]), slurm_conf=site_path(slurm["conf"], source),
            local_netns=access["local"]["netns"], clush_gateways=clush["gateways"],
            clush_topology=site_path(clush["topology"], source),
            clush_ssh_config=site_path(clush["ssh_config"], source),
            clush_python=clush["python"])


class Transport(ABC):
    """Runs one command on many nodes and reports one HostResult per node, in the order given."""

    name: ClassVar[str]

    def __init__(self, options: FanoutOptions | None = None):
        self.options = options or FanoutOptions()

    def run(self, nodes: Iterable[str], command: Command | str | Sequence[str], *,
            timeout: float | None = None, stdin: bytes | str | None = None,
            on_result: OnResult | None = None) -> list[HostResult]:
        """Run `command` on every node. `timeout` bounds the command on each node (default: the
        site's command_timeout); `stdin` is fed to every node's command; `on_result` is called from
        worker threads as each node finishes (progress bars)."""
        names = list(dict.fromkeys(nodes))  # de-duplicated, order kept
        if not names:
            raise UsageError("no nodes to run on")
        cmd = Command.of(command)
        limit = self.options.command_timeout if timeout is None else float(timeout)
        if limit <= 0:
            raise UsageError(f"invalid timeout {timeout!r}: must be a positive number of seconds")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        by_node = {r.node: r for r in self._run(names, cmd, limit, data, on_result or _ignore)}
        return [by_node.get(n) or HostResult(n, ERROR, error=f"internal error: the {self.name} "
                                             "transport gave no result for this node") for n in names]

    @abstractmethod
    def _run(self, nodes: list[str], command: Command, timeout: float, stdin: bytes | None,
             on_result: OnResult) -> list[HostResult]:
        """Backend work: one result per node, any order; call on_result for each as it is known."""

    def close(self) -> None:
        """Release shared resources (connections to a jump host); the transport stays usable."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _ignore(_result: HostResult) -> None:
    pass


def run_parallel(nodes: list[str], work: Callable[[str], HostResult], concurrency: int,
                 on_result: OnResult) -> list[HostResult]:
    """Call work(node) for every node with at most `concurrency` running at once.

    Threads are sized to the node count (no idle pool of 64 for 4 nodes) and are daemons, so Ctrl-C
    in the main thread is not held up by a hung host. A bug in `work` becomes that node's error result
    instead of losing every other node's result.
    """
    pending = list(reversed(nodes))
    results: list[HostResult] = []
    callback_errors: list[BaseException] = []
    lock = threading.Lock()
    done = threading.Event()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                node = pending.pop()
            start = time.monotonic()
            try:
                result = work(node)
            except Exception as exc:  # noqa: BLE001 - one node's bug must not lose the others
                result = HostResult(node, ERROR, duration_s=time.monotonic() - start,
                                    error=f"internal error: {type(exc).__name__}: {exc}")
            try:
                on_result(result)
            except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread below
                callback_errors.append(exc)
            with lock:
                results.append(result)
                if len(results) == len(nodes):
                    done.set()

    threads = [threading.Thread(target=worker, name=f"fanout-{i}", daemon=True)
               for i in range(min(max(1, concurrency), len(nodes)))]
    for t in threads:
        t.start()
    while not done.wait(0.5):  # short waits keep the main thread responsive to Ctrl-C
        if not any(t.is_alive() for t in threads):
            break
    if callback_errors:
        raise callback_errors[0]
    return results
