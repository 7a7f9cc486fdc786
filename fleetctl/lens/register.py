"""How a node-resident probe agent registers with its lens coordinator (docs/lens.md, "Agents as
services"). Both sides of the handshake live here; the sockets are the callers'.

On a real cluster the agents are services on the nodes (the systemd unit
fleetctl-lens-agent.service runs `fleetctl lens agent`) that connect to the coordinator, instead
of being started by it over ssh. The protocol, over one TCP connection per agent incarnation:

    coordinator -> agent   {"proto": PROTOCOL, "nonce": C}                              one line
    agent -> coordinator   {"proto": PROTOCOL, "node": N, "nonce": A, "mac": M_agent, ...} one line
    coordinator -> agent   {"error": "..."}  and the connection closes                 one line
                      or   {"config_bytes": L, "mac": M_coord}, then L bytes of config JSON
    agent -> coordinator   the probe agent's FLS1 lines (mesh/agent.py, output "summary"), until
                           either side closes; the coordinator closes to stop or re-plan, and the
                           agent then registers again for the new plan.

A configuration with `"task": "trace"` asks for the node's part of path discovery instead (while
the coordinator plans; lens/tracer.py): the agent runs the installed mesh/trace_agent.py over the
flows it is given, answers with one JSON line of at most MAX_TRACE_DOC bytes, and registers again
for its probe configuration. A refusal may carry `retry_s` (0.5-30 s): "come back then", sent
while the coordinator is still tracing the other nodes, so the agent does not back off further.

Both sides hold the same site key (lens.key_file, 32+ random bytes, readable by root only, copied
to every node like munge.key). M_agent = HMAC-SHA256(key, "agent" C A N) proves the agent holds it;
M_coord = HMAC-SHA256(key, "coordinator" A C N SHA256(config)) proves the coordinator does, so a
host without the key can neither feed lens (false events) nor aim the agents' probes. The probe
packets' own MAC key never crosses the wire: both ends derive it, HMAC(key, "probe" run_id). The key
authenticates a node of the cluster, not which one: a root on one node could claim another's name
(as with munge's one key). Every message and number is bounded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat

from fleetctl.errors import ConfigError, DataError

PROTOCOL = "fleetctl-lens-agent/1"
MAX_LINE = 4096  # a handshake line
MAX_CONFIG = 32 << 20  # one agent's configuration (its pairs only: ~100 KB at 8 NICs)
HANDSHAKE_S = 10.0
KEY_MIN, KEY_MAX = 32, 4096
NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
NONCE_RE = re.compile(r"[0-9a-f]{32}\Z")

# bounds a node applies to what even an authenticated coordinator asks of it
MAX_RATE = 10_000.0  # probes/s per pair
MAX_SEND_PPS = 200_000.0  # probes/s a node sends in all
MAX_PAIRS = 1_000_000
MAX_DURATION_S = 7 * 86400.0
MAX_TRACE_FLOWS = 200_000  # flows a node traces (its sends and its echoes: ~3,000 at 8 NICs)
MAX_TRACE_HOPS = 64
MAX_TRACE_DOC = 64 << 20  # the trace answer, one line
MAX_DEBUG_SHARE = 1.0  # share of flows sampled for debug records (records per batch are capped)


class RegistrationError(DataError):
    """A handshake that failed: the peer's message was malformed, unauthenticated or refused.
    `retry_s`: the coordinator asked to come back after that long (it is busy planning)."""

    def __init__(self, message: str, retry_s: float | None = None, **kw):
        super().__init__(message, **kw)
        self.retry_s = retry_s


def read_key(path: str) -> bytes:
    """The site key: a regular file of 32-4096 bytes that no one but its owner can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"cannot read the lens key: {exc.strerror}", path=path,
                          hint="create it with `fleetctl lens keygen PATH` and copy it to every "
                               "node (docs/lens.md)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError("the lens key is not a regular file", path=path)
        if st.st_mode & 0o077:
            raise ConfigError(f"the lens key is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                              "it must be 600", path=path, hint=f"chmod 600 {path}")
        data = os.read(fd, KEY_MAX + 1)
    finally:
        os.close(fd)
    if not KEY_MIN <= len(data) <= KEY_MAX:
        raise ConfigError(f"the lens key has {len(data)} bytes; {KEY_MIN}-{KEY_MAX} are needed",
                          path=path)
    return data


def write_key(path: str) -> None:
    """A new random site key at `path` (mode 600), never over an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot create the lens key: {exc.strerror}", path=path) from None
    try:
        os.write(fd, secrets.token_bytes(KEY_MIN))
        os.fsync(fd)
    finally:
        os.close(fd)


def _mac(key: bytes, *parts: str | bytes) -> str:
    msg = b"\0".join(p.encode() if isinstance(p, str) else p for p in parts)
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def probe_key(key: bytes, run_id: str) -> str:
    """The probe packets' MAC key for a run, derived on both ends (never sent)."""
    return _mac(key, "probe", run_id)


def nonce() -> str:
    return secrets.token_hex(16)


def encode(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def decode_line(line: bytes, who: str) -> dict:
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise RegistrationError(f"{who}: handshake line missing or over {MAX_LINE} bytes")
    try:
        obj = json.loads(line)
    except ValueError:
        raise RegistrationError(f"{who}: handshake line is not JSON") from None
    if not isinstance(obj, dict):
        raise RegistrationError(f"{who}: handshake line is not an object")
    return obj


# ---------------------------------------------------------------- coordinator's side
def coordinator_hello(c_nonce: str) -> bytes:
    return encode({"proto": PROTOCOL, "nonce": c_nonce})


def check_agent_hello(key: bytes, c_nonce: str, obj: dict, peer: str) -> tuple[str, str]:
    """(node, agent nonce) of an authenticated agent hello; RegistrationError otherwise."""
    if obj.get("proto") != PROTOCOL:
        raise RegistrationError(f"{peer}: not a {PROTOCOL} agent ({str(obj.get('proto'))[:40]!r})")
    node, a_nonce, mac = obj.get("node"), obj.get("nonce"), obj.get("mac")
    if not isinstance(node, str) or not NODE_RE.match(node):
        raise RegistrationError(f"{peer}: invalid node name {str(node)[:64]!r}")
    if not isinstance(a_nonce, str) or not NONCE_RE.match(a_nonce) or not isinstance(mac, str):
        raise RegistrationError(f"{peer} ({node}): malformed hello")
    if not hmac.compare_digest(mac, _mac(key, "agent", c_nonce, a_nonce, node)):
        raise RegistrationError(f"{peer} ({node}): wrong key (the agent's lens key differs)")
    return node, a_nonce


def config_message(key: bytes, c_nonce: str, a_nonce: str, node: str, config: dict) -> bytes:
    """The header line and the configuration, authenticated for this handshake."""
    body = json.dumps(config, separators=(",", ":")).encode()
    if len(body) > MAX_CONFIG:
        raise RegistrationError(f"{node}: configuration of {len(body)} bytes is over {MAX_CONFIG}")
    digest = hashlib.sha256(body).hexdigest()
    head = {"config_bytes": len(body), "mac": _mac(key, "coordinator", a_nonce, c_nonce, node, digest)}
    return encode(head) + body


def refusal(message: str, retry_s: float | None = None) -> bytes:
    return encode({"error": message[:300], **({"retry_s": retry_s} if retry_s else {})})


def trace_task(node: str, flows: list, timeout: float, retries: int, limit: float) -> dict:
    """The configuration that asks a registered agent to trace its flows (mesh/discovery.py's
    trace_config, this node's part)."""
    return {"task": "trace", "nodes": {node: flows}, "timeout": timeout, "retries": retries,
            "limit": limit}


# ---------------------------------------------------------------- agent's side
def agent_hello(key: bytes, c_obj: dict, node: str, a_nonce: str, extra: dict | None = None) -> bytes:
    if c_obj.get("proto") != PROTOCOL:
        raise RegistrationError(f"coordinator speaks {str(c_obj.get('proto'))[:40]!r}, not {PROTOCOL}")
    c_nonce = c_obj.get("nonce")
    if not isinstance(c_nonce, str) or not NONCE_RE.match(c_nonce):
        raise RegistrationError("coordinator hello without a valid nonce")
    return encode({"proto": PROTOCOL, "node": node, "nonce": a_nonce,
                   "mac": _mac(key, "agent", c_nonce, a_nonce, node), **(extra or {})})


def config_length(key: bytes, head: dict) -> int:
    """The length the header announces (RegistrationError for a refusal or a bad header)."""
    if "error" in head:
        retry = head.get("retry_s")
        retry = float(retry) if isinstance(retry, (int, float)) and 0.5 <= retry <= 30 else None
        raise RegistrationError(f"coordinator refused: {str(head['error'])[:300]}", retry_s=retry)
    n = head.get("config_bytes")
    if not isinstance(n, int) or not 0 < n <= MAX_CONFIG or not isinstance(head.get("mac"), str):
        raise RegistrationError("coordinator's configuration header is malformed")
    return n


def check_config(key: bytes, head: dict, body: bytes, c_nonce: str, a_nonce: str,
                 node: str) -> dict:
    """The authenticated configuration, bounded, with the run's probe key filled in."""
    digest = hashlib.sha256(body).hexdigest()
    if not hmac.compare_digest(head["mac"], _mac(key, "coordinator", a_nonce, c_nonce, node, digest)):
        raise RegistrationError("the coordinator's configuration is not signed with this node's "
                                "lens key")
    try:
        cfg = json.loads(body)
    except ValueError:
        raise RegistrationError("the coordinator's configuration is not JSON") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("nodes"), dict) or node not in cfg["nodes"]:
        raise RegistrationError(f"the coordinator's configuration has no entry for {node}")
    if cfg.get("task") == "trace":
        return _check_trace(cfg, node)
    try:
        rate = float(cfg["rate"])
        pairs, loops = cfg["pairs"], cfg.get("loops", [])
        duration = float(cfg["duration"])
        run_id = str(cfg["run_id"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RegistrationError(f"the coordinator's configuration is incomplete: {exc}") from None
    if not isinstance(pairs, list) or not isinstance(loops, list):
        raise RegistrationError("the coordinator's configuration: pairs and loops must be lists")
    if not (0 < rate <= MAX_RATE) or not (0 < duration <= MAX_DURATION_S) \
            or len(pairs) + len(loops) > MAX_PAIRS or not 0 < len(run_id) <= 64:
        raise RegistrationError("the coordinator's configuration is out of bounds "
                                f"(rate {rate:g}/s, duration {duration:g} s, {len(pairs)} pairs)")
    if cfg.get("output") not in ("summary", "stream"):
        raise RegistrationError(f"output {str(cfg.get('output'))[:20]!r}: a registered agent streams")
    share = cfg.get("debug_records", 0.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) \
            or not 0 <= share <= MAX_DEBUG_SHARE:
        raise RegistrationError(f"debug_records {str(share)[:20]!r}: a share of flows between 0 "
                                f"and {MAX_DEBUG_SHARE:g}")
    entry = cfg["nodes"][node]
    nics = entry.get("nics") if isinstance(entry, dict) else None
    if not isinstance(nics, list) or not all(isinstance(n, list) and n for n in nics):
        raise RegistrationError(f"the coordinator's configuration: {node}'s NICs are malformed")
    mine = {n[0] for n in nics if isinstance(n[0], int)}
    sends = sum(1 for p in pairs if isinstance(p, list) and len(p) == 4 and p[1] in mine) + \
        sum(1 for p in loops if isinstance(p, list) and len(p) == 3 and p[1] in mine)
    if rate * sends > MAX_SEND_PPS:  # the agent's own figure (mesh.agent.Agent._sizes)
        raise RegistrationError(f"the coordinator asks for {rate * sends:.0f} probes/s from this "
                                f"node; at most {MAX_SEND_PPS:.0f}")
    cfg["key"] = probe_key(key, run_id)
    return cfg


def _check_trace(cfg: dict, node: str) -> dict:
    """A trace task, bounded: at most MAX_TRACE_FLOWS flows of [key, src, sport, dst, dport,
    hops, device], short timeouts; what mesh/trace_agent.trace reads."""
    flows = cfg["nodes"][node]
    try:
        timeout, retries, limit = float(cfg["timeout"]), int(cfg["retries"]), float(cfg["limit"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RegistrationError(f"the coordinator's trace task is incomplete: {exc}") from None
    if not isinstance(flows, list) or len(flows) > MAX_TRACE_FLOWS or not 0 < timeout <= 5 \
            or not 0 <= retries <= 3 or not 0 < limit <= 600:
        raise RegistrationError("the coordinator's trace task is out of bounds")
    for f in flows:
        if not (isinstance(f, list) and len(f) == 7 and isinstance(f[0], str) and len(f[0]) <= 64
                and all(isinstance(f[i], str) and len(f[i]) <= 64 for i in (1, 3, 6))
                and all(isinstance(f[i], int) and 0 <= f[i] < 65536 for i in (2, 4))
                and isinstance(f[5], int) and 1 <= f[5] <= MAX_TRACE_HOPS):
            raise RegistrationError(f"the coordinator's trace task has a malformed flow: {str(f)[:120]}")
    return {"task": "trace", "flows": flows, "timeout": timeout, "retries": retries, "limit": limit}
