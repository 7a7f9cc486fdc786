"""The node-resident probe agent (`fleetctl lens agent`, run by fleetctl-lens-agent.service):
register with the coordinator (lens/register.py), probe per the configuration it sends, stream
the summaries back over the same connection, and register again when the connection ends (the
coordinator stopped, re-planned or restarted). Between attempts it waits 1 s doubling to 30 s,
jittered by 25 %, reset after a minute of good service: a restarted coordinator is not stormed by
a thousand agents at once. systemd restarts the process itself if it dies.

The probing is the installed fleetctl.mesh.agent (not a script shipped by the coordinator): a
coordinator sends settings only, authenticated, and bounded again here.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
from dataclasses import dataclass

from fleetctl.lens import register as proto

SEND_TIMEOUT_S = 5.0  # a coordinator that takes nothing for this long has ended the incarnation


@dataclass
class NodeAgentOptions:
    coordinator: tuple[str, int]
    key: bytes
    node: str
    max_backoff_s: float = 30.0
    once: bool = False  # one registration and run, then return (tests)


def node_name(given: str | None) -> str:
    name = given or os.environ.get("FLEETCTL_NODE") or socket.gethostname().split(".")[0]
    if not proto.NODE_RE.match(name):
        from fleetctl.errors import UsageError

        raise UsageError(f"node name {name[:64]!r} is not a valid node name")
    return name


def register(sock: socket.socket, key: bytes, node: str) -> dict:
    """The handshake on a connected socket: the authenticated, bounded configuration."""
    deadline = time.monotonic() + proto.HANDSHAKE_S
    sock.settimeout(proto.HANDSHAKE_S)
    reader = sock.makefile("rb")
    try:
        c_hello = proto.decode_line(reader.readline(proto.MAX_LINE + 1), "coordinator")
        a_nonce = proto.nonce()
        sock.sendall(proto.agent_hello(key, c_hello, node, a_nonce,
                                       {"pid": os.getpid(), "boot_id": _boot_id()}))
        head = proto.decode_line(reader.readline(proto.MAX_LINE + 1), "coordinator")
        n = proto.config_length(key, head)
        body = reader.read(n)
        if len(body) != n or time.monotonic() > deadline:
            raise proto.RegistrationError("coordinator's configuration cut short")
    finally:
        reader.close()
    return proto.check_config(key, head, body, c_hello["nonce"], a_nonce, node)


def run_once(opts: NodeAgentOptions, stop: threading.Event, log) -> float | None:
    """One registration and probing run; how long it served (s), or None after a trace task (the
    agent registers again at once for its probe configuration). OSError and RegistrationError
    from the connection or the handshake propagate."""
    from fleetctl.mesh import agent as mesh_agent

    sock = socket.create_connection(opts.coordinator, timeout=proto.HANDSHAKE_S)
    began = time.monotonic()
    watcher = None
    try:
        config = register(sock, opts.key, opts.node)
        if config.get("task") == "trace":
            _trace(sock, config, opts.node, log)
            return None
        log(f"registered with {opts.coordinator[0]}:{opts.coordinator[1]} (run "
            f"{str(config['run_id'])[:16]}, {len(config['pairs'])} pairs)")
        sock.settimeout(SEND_TIMEOUT_S)
        out = sock.makefile("w", encoding="utf-8", newline="\n")
        # stop (SIGTERM) ends the run: the next write fails, the agent closes its sockets
        done = threading.Event()
        watcher = threading.Thread(target=_shutdown_on, args=(stop, done, sock), daemon=True)
        watcher.start()
        try:
            mesh_agent.run(config, opts.node, out)
        except (OSError, ValueError) as exc:
            if not stop.is_set():
                log(f"run ended: {exc}")
        finally:
            done.set()
            try:
                out.close()
            except OSError:
                pass
    finally:
        sock.close()
    return time.monotonic() - began


def serve(opts: NodeAgentOptions, stop: threading.Event, log) -> None:
    """Register, run, register again, until `stop` is set."""
    backoff = 1.0
    while not stop.is_set():
        served: float | None = 0.0
        retry: float | None = None
        try:
            served = run_once(opts, stop, log)
        except proto.RegistrationError as exc:
            log(f"registration failed: {exc.message}")
            retry = exc.retry_s  # the coordinator is planning: come back then, no further back-off
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log(f"cannot reach the coordinator {opts.coordinator[0]}:{opts.coordinator[1]}: {exc}")
        if opts.once or stop.is_set():
            return
        if served is None:  # a trace task done: the probe configuration comes next
            backoff, retry = 1.0, 0.5
        elif retry is None:
            backoff = 1.0 if served > 60 else min(opts.max_backoff_s, backoff * 2)
        stop.wait((retry or backoff) * random.uniform(0.75, 1.25))


def _trace(sock: socket.socket, task: dict, node: str, log) -> None:
    """The node's part of path discovery (the installed mesh/trace_agent.py), answered as one
    JSON line."""
    from fleetctl.mesh import trace_agent

    began = time.monotonic()
    try:
        paths, arrived, errors = trace_agent.trace(task["flows"], task["timeout"], task["retries"])
        doc = {"node": node, "paths": paths, "arrived": arrived, "errors": errors}
    except PermissionError:
        doc = {"node": node, "failed": "a raw ICMP socket needs root or CAP_NET_RAW"}
    except OSError as exc:
        doc = {"node": node, "failed": f"path tracing failed: {exc.strerror or exc}"}
    line = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    if len(line) > proto.MAX_TRACE_DOC:
        line = json.dumps({"node": node, "failed": "trace answer too large"}).encode() + b"\n"
    sock.settimeout(max(5.0, task["limit"]))
    sock.sendall(line)
    log(f"traced {len(task['flows'])} flows in {time.monotonic() - began:.1f} s"
        + (f" ({doc['failed']})" if "failed" in doc else ""))


def _shutdown_on(stop: threading.Event, done: threading.Event, sock: socket.socket) -> None:
    while not done.is_set():
        if stop.wait(0.2):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip()
    except OSError:
        return ""
