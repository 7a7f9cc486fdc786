"""Path discovery through registered agents: while lens plans, the coordinator listens on
`lens.listen`, hands each node that registers its part of the trace (lens/register.py, "task":
"trace"), and collects the answers, so a coordinator with registered agents needs no ssh or srun
to the nodes at all (docs/lens.md, "Agents as services").

    docs = trace_through_agents(("0.0.0.0", 61250), key, trace_cfg, hosts, timeout_s=90, log=print)

`trace_cfg` is mesh/discovery.trace_config's document; the result has the same shape as the
transport's fan-out of mesh/trace_agent.py (node -> {"node", "paths", "arrived", "errors"}), so
discovery.resolve reads either. A node that does not answer within `timeout_s` keeps the
topology's candidate rows for its flows (as when its trace fails over ssh) and is named in the
warnings; so is every node still missing when, with some answers in, no agent at all has
registered for QUIET_S (a node that is down does not hold every plan for the whole timeout). A
node already traced that registers again is told to come back in RETRY_S: its probe
configuration comes once the plan is made and the listener proper takes over the port.
"""

from __future__ import annotations

import json
import socket
import threading
import time

from fleetctl.errors import FleetctlError
from fleetctl.lens import register as proto
from fleetctl.lens.listener import MAX_HANDSHAKES, handshake, listen_socket

RETRY_S = 2.0
# Once some nodes answered, this long with no registration at all ends the round early: a node
# that is down must not hold every plan for the whole timeout. Longer than an agent's longest
# back-off (30 s, +25 % jitter), so an agent still backing off from the last plan is waited for.
QUIET_S = 40.0
TRACE_LIMIT_S = 60.0  # a node's own bound on its trace (flows x TTLs x timeout stay well under)


class _Round:
    def __init__(self, hosts: list[str]):
        self.wanted = set(hosts)
        self.docs: dict[str, dict] = {}
        self.busy: set[str] = set()  # nodes whose trace is under way
        self.failed: dict[str, str] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.last_contact = time.monotonic()  # the last registration of any node


def trace_through_agents(address: tuple[str, int], key: bytes, trace_cfg: dict, hosts: list[str],
                         timeout_s: float, log=lambda _m: None,
                         warnings: list[str] | None = None) -> dict[str, dict]:
    """Every answering host's trace document, by node (see the module's docstring)."""
    rnd = _Round(hosts)
    per_node = trace_cfg.get("nodes", {})
    srv = listen_socket(address)
    slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
    log(f"tracing {sum(len(per_node.get(h, [])) for h in hosts)} flows through the registered "
        f"agents of {len(hosts)} nodes on {address[0]}:{address[1]}")
    began = time.monotonic()
    deadline = began + timeout_s
    try:
        while not rnd.done.is_set() and time.monotonic() < deadline:
            with rnd.lock:
                if rnd.docs and not rnd.busy and time.monotonic() - rnd.last_contact > QUIET_S:
                    break
            try:
                sock, addr = srv.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                time.sleep(0.1)
                continue
            if not slots.acquire(blocking=False):
                sock.close()  # the agent backs off and comes again
                continue
            threading.Thread(target=_serve, name="lens-trace", daemon=True,
                             args=(sock, f"{addr[0]}:{addr[1]}", key, rnd, per_node, trace_cfg,
                                   deadline, slots, log)).start()
    finally:
        srv.close()
    with rnd.lock:
        docs = dict(rnd.docs)
        missing = sorted(rnd.wanted - set(docs))
        failed = dict(rnd.failed)
    log(f"traced through {len(docs)} of {len(hosts)} agents in {time.monotonic() - began:.1f} s")
    if warnings is not None:
        for node in missing:
            why = failed.get(node) or f"no registered agent answered within {timeout_s:g} s"
            warnings.append(f"{node}: path tracing failed: {why[:200]}")
    return docs


def _serve(sock: socket.socket, peer: str, key: bytes, rnd: _Round, per_node: dict, cfg: dict,
           deadline: float, slots, log) -> None:
    node = None

    def admit(name: str) -> None:
        with rnd.lock:
            rnd.last_contact = time.monotonic()
            if name not in rnd.wanted:
                raise proto.RegistrationError(f"{peer}: {name} is not one of this coordinator's nodes")
            if name in rnd.docs or name in rnd.busy:
                raise proto.RegistrationError(f"{name}: paths traced; the plan follows",
                                              retry_s=RETRY_S)
            rnd.busy.add(name)

    def task(name: str) -> dict:
        return proto.trace_task(name, per_node.get(name, []), float(cfg.get("timeout", 0.3)),
                                int(cfg.get("retries", 1)), TRACE_LIMIT_S)

    try:
        try:
            node = handshake(sock, key, peer, admit, task)
        except proto.RegistrationError:
            return
        sock.settimeout(max(1.0, min(TRACE_LIMIT_S + 10, deadline - time.monotonic())))
        doc = _read_answer(sock)
        if doc.get("node") != node:
            raise proto.RegistrationError(f"{node}: trace answer names {str(doc.get('node'))[:64]!r}")
        if "failed" not in doc:
            doc = _only_asked(doc, node, per_node.get(node, []))
        with rnd.lock:
            if "failed" in doc:
                rnd.failed[node] = str(doc["failed"])[:200]
            else:
                rnd.docs[node] = doc
            if set(rnd.docs) >= rnd.wanted:
                rnd.done.set()
    except (OSError, FleetctlError, ValueError) as exc:
        if node is not None:
            with rnd.lock:
                rnd.failed[node] = f"trace answer lost: {getattr(exc, 'message', exc)}"[:200]
            log(f"agent on {node} ({peer}): trace answer lost: {getattr(exc, 'message', exc)}")
    finally:
        if node is not None:
            with rnd.lock:
                rnd.busy.discard(node)
        sock.close()
        slots.release()


def _read_answer(sock: socket.socket) -> dict:
    """The agent's one-line answer (at most MAX_TRACE_DOC bytes), checked for shape."""
    chunks, size = [], 0
    while True:
        data = sock.recv(1 << 20)
        if not data:
            raise proto.RegistrationError("the agent closed before its trace answer ended")
        chunks.append(data)
        size += len(data)
        if size > proto.MAX_TRACE_DOC:
            raise proto.RegistrationError(f"trace answer over {proto.MAX_TRACE_DOC} bytes")
        if data.endswith(b"\n"):
            break
    doc = json.loads(b"".join(chunks))
    if not isinstance(doc, dict):
        raise proto.RegistrationError("the trace answer is not an object")
    if "failed" not in doc and not (isinstance(doc.get("paths"), dict)
                                    and isinstance(doc.get("arrived"), list)):
        raise proto.RegistrationError("the trace answer has no paths")
    return doc


def _only_asked(doc: dict, node: str, flows: list) -> dict:
    """The answer cut to the flows this node was asked to trace (a node speaks for its own flows
    only), each hop an address string or null, at most the flow's hop count."""
    asked = {f[0]: int(f[5]) for f in flows}
    paths = {k: [h if isinstance(h, str) and len(h) <= 64 else None for h in v[:asked[k]]]
             for k, v in doc["paths"].items() if k in asked and isinstance(v, list)}
    arrived = [k for k in doc["arrived"] if isinstance(k, str) and k in asked]
    errors = doc.get("errors") if isinstance(doc.get("errors"), list) else []
    return {"node": node, "paths": paths, "arrived": arrived, "errors": [str(e)[:200] for e in errors[:20]]}
