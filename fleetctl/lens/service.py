"""`fleetctl lens run` as a service: options from the site and the command line, one coordinator
per state directory (its pid file), daemonised or in the foreground, its log lines, and its end.
The CLI parses and renders; this is where the coordinator's lifecycle lives."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleetctl.errors import EXIT_OK, UsageError
from fleetctl.lens.daemon import PidLock, daemonize, running_pid
from fleetctl.lens.options import LensOptions


@dataclass
class RunRequest:
    """`lens run`'s options."""

    nodeset: str | None = None
    foreground: bool = False
    rate: float | None = None
    window_s: float | None = None
    transport: str | None = None
    state_dir: str | None = None
    agents: str | None = None
    listen: str | None = None
    key_file: str | None = None
    trace_via: str | None = None
    shard: str | None = None  # one shard of the site's layout (lens.shard_max_hosts)


def options(cluster, req: RunRequest) -> LensOptions:
    opts = LensOptions.from_site(cluster)
    if req.shard and not req.state_dir:  # each shard its own state: <lens.state_dir>/<shard>
        opts.state_dir = str(Path(opts.state_dir) / req.shard)
    if req.state_dir:
        opts.state_dir = req.state_dir
    if req.rate is not None:
        opts.rate = req.rate
    if req.window_s is not None:
        opts.window_s = req.window_s
    if req.agents is not None:
        opts.agents = req.agents
    if req.listen is not None:
        opts.listen = req.listen
    if req.key_file is not None:
        opts.key_file = req.key_file
    if req.trace_via is not None:
        opts.trace_via = req.trace_via
    opts.validate()
    if opts.agents == "registered":  # refuse now, not in the daemon: the key and the address
        from fleetctl.lens.listener import parse_listen
        from fleetctl.lens.register import read_key

        parse_listen(opts.listen)
        read_key(opts.key_file)
    return opts


def start(cluster, req: RunRequest, stop) -> dict | None:
    """Start a coordinator. Daemonised (the default): returns {"started", "pid", ...} in the parent
    once the child holds its pid file. In the foreground (and in the daemon child): runs until
    `stop` (a threading.Event) is set and returns None."""

    opts = options(cluster, req)
    nodes = shard_nodes(cluster, req) if req.shard else cluster.select(req.nodeset)
    if len(nodes) < 2:
        raise UsageError("lens probes between nodes: give at least two")
    pid_file = opts.path("lens.pid")
    pid = running_pid(pid_file)
    if pid:
        raise UsageError(f"a lens coordinator already runs for {opts.state_dir} (pid {pid})",
                         hint="fleetctl lens stop")
    if not req.foreground and not daemonize(opts.path("lens.log")):
        return _started(opts)
    lock = PidLock(pid_file)
    lock.acquire()
    try:
        serve(cluster, nodes, req.transport, opts, stop)
    finally:
        lock.release()
    return None


def shard_nodes(cluster, req: RunRequest) -> list[str]:
    """The nodes of `--shard NAME` in the site's layout (`lens shards`)."""
    from fleetctl.lens.shard import site_layout

    if req.nodeset:
        raise UsageError("give a NODESET or --shard, not both")
    _, layout = site_layout(cluster, None)
    return list(layout.shard_of(req.shard).hosts)


def _started(opts: LensOptions, wait_s: float = 10.0) -> dict:
    """In the parent of a daemonised coordinator: wait until the child holds its pid file."""
    pid_file = opts.path("lens.pid")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not running_pid(pid_file):
        time.sleep(0.05)
    pid = running_pid(pid_file)
    if not pid:
        raise UsageError(f"the lens coordinator did not start; see {opts.path('lens.log')}")
    return {"started": True, "pid": pid, "state_dir": opts.state_dir, "log": str(opts.path("lens.log"))}


def log_line(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} lens: {message}", file=sys.stderr, flush=True)


def serve(cluster, nodes: list[str], transport_name: str | None, opts: LensOptions, stop, log=log_line) -> int:
    """The coordinator over `nodes` until `stop` is set, with its outputs and Slurm's jobs."""
    from fleetctl.fanout import get_transport
    from fleetctl.lens.coordinator import Coordinator
    from fleetctl.lens.outputs import Outputs

    slurm = None
    if shutil.which("squeue"):
        from fleetctl.slurm import backend_for_site

        slurm = backend_for_site(cluster)
    outputs = Outputs(opts, log, cluster=cluster)
    try:
        with get_transport(transport_name, cluster=cluster) as t:
            log(f"starting on {len(nodes)} nodes over {t.name}, window {opts.window_s:g} s, "
                f"state {opts.state_dir}")
            Coordinator(cluster, nodes, t, opts, outputs, log, slurm).run(stop)
    finally:
        outputs.close()
        log("stopped")
    return EXIT_OK
