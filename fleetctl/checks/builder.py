"""Build the node payload and its arguments; run it locally.

The control side ships `build_payload()` to each node as the stdin of `python3 - '<args json>'` and
reads one JSON document back (docs/checks.md). `fleetctl audit --local` and the tests run the same
modules in-process with `run_payload_locally()`.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

from fleetctl.checks.payload.common import ACTIONS
from fleetctl.errors import ConfigError, DataError, UsageError
from fleetctl.filekit import clean_text
from fleetctl.model.cluster import Cluster, NodeClass
from fleetctl.nodeset import check_node_name, empty

# Concatenation order: a module only uses names of the modules before it (runner last: it calls main()).
PAYLOAD_MODULES = ("common", "fabric", "gpu_collect", "gpu_judge", "xid", "netdev", "nic_counters", "nics", "host", "deep", "runner")
LEVELS = ("quick", "standard", "deep")
POLICY_STATUSES = ("ok", "warn", "fail")  # what checks.xid_policy may set an Xid to
DEEP_BUDGET_S = 3600.0


@lru_cache(maxsize=1)
def build_payload() -> str:
    """One self-contained script (standard library only) made of the payload modules."""
    from fleetctl.fanout.payload import bundle

    return bundle("fleetctl.checks.payload", PAYLOAD_MODULES, "node-check payload")


def _fill(template: str, node: str) -> str:
    # The node name becomes a path component: `../../tmp/x` must never get that far.
    return template.replace("{node}", check_node_name(node)) if template else ""


def parse_xid_policy(cluster: Cluster) -> dict:
    """checks.xid_policy {"63": "fail:reset-gpu"} -> {"63": {"status", "action"}}, or ConfigError."""
    out = {}
    for key, rule in cluster.checks.get("xid_policy", {}).items():
        status, _, action = rule.partition(":")
        if not key.isdigit():
            raise ConfigError(f"Xid {key!r} is not a number", path=cluster.source, key="checks.xid_policy")
        if status not in POLICY_STATUSES or action not in ACTIONS:
            raise ConfigError(f"Xid {key}: {rule!r} is not status:action (status {'/'.join(POLICY_STATUSES)}, "
                              f"action {'/'.join(ACTIONS)})", path=cluster.source, key="checks.xid_policy")
        out[key] = {"status": status, "action": action}
    return out


@dataclass(frozen=True)
class PayloadOptions:
    """What a caller may set in the payload's argument beyond the site file's (payload_args's
    keyword options)."""

    budget_s: float | None = None  # None: by level (payload_args)
    counter_interval_s: float | None = None
    boot_id: str | None = None
    dcgm_level: int = 1
    ack_kernel_log: dict | None = None  # {"by": who, "nodes": [names]}


def payload_args(cluster: Cluster, node: str, level: str = "quick", since: float | str | None = None, *,
                 alone: bool = False, **options) -> dict:
    """The JSON argument of the payload for `node`: its class's expectations, thresholds and paths.

    since: epoch seconds, ISO time or 15m/2h/1d; only kernel-log lines from then on are judged
    (None: the whole log).
    alone: a node in no node class is checked by itself (no expectations) instead of refused.
    options: the fields of PayloadOptions by name.
    budget_s: hard budget; defaults to thresholds.prolog_budget_s (quick), access.command_timeout less
    one second (standard), an hour (deep).
    ack_kernel_log: {"by": who, "nodes": [names]}: those nodes acknowledge their kernel log up to now
    (docs/checks.md, "Acknowledging the kernel log").
    """
    opts = PayloadOptions(**options)
    if level not in LEVELS:
        raise UsageError(f"unknown check level {level!r} (choose {', '.join(LEVELS)})")
    cls = cluster.node_class(node)
    if cls is None and not alone:
        raise ConfigError(f"node {node!r} is in no node class", path=cluster.source, key="node_classes")
    if cls is None:  # alone: the node's own checks, with no class expectations (audit --local)
        cls = NodeClass(name="", nodes=empty())
    budget_s = opts.budget_s
    if budget_s is None:
        budget_s = {"quick": cluster.thresholds["prolog_budget_s"],
                    "standard": max(1.0, cluster.access["command_timeout"] - 1.0), "deep": DEEP_BUDGET_S}[level]
    checks = cluster.checks
    return {
        "node": node, "level": level, "since": since_epoch(since), "budget_s": float(budget_s),
        "gpus": asdict(cls.gpus), "nics": [asdict(n) for n in cls.nics], "mounts": list(cls.mounts),
        "host": {"cpus": cls.cpus, "memory_gb": cls.memory_gb, "kernel_version": cls.kernel_version},
        "thresholds": dict(cluster.thresholds),
        "kernel_log": _fill(checks.get("kernel_log", ""), node),
        "simulated_gpus": _fill(checks.get("simulated_gpus", ""), node),
        "simulated_nic_stats": _fill(checks.get("simulated_nic_stats", ""), node),
        "state_file": _fill(checks.get("state_file", ""), node),
        "xid_policy": parse_xid_policy(cluster),
        "counter_interval_s": opts.counter_interval_s, "boot_id": opts.boot_id, "dcgm_level": opts.dcgm_level,
        "ack_kernel_log": opts.ack_kernel_log,
    }


def run_payload_locally(args: dict) -> dict:
    """Run the checks in this process (fleetctl audit --local, tests); returns the result document."""
    from fleetctl.checks.payload.runner import run_checks

    try:
        return run_checks(args)
    except ValueError as exc:
        raise UsageError(f"bad payload arguments: {exc}") from None


def run_payload_subprocess(args: dict, python: str | list[str] = "python3", timeout: float | None = None,
                           env: dict | None = None) -> dict:
    """Pipe the built payload to `python3 -` in a child process, exactly as a transport does on a node.

    python: the interpreter command, e.g. ["python3", "-I", "-S"] for a bare standard library."""
    cmd = ([python] if isinstance(python, str) else list(python)) + ["-", json.dumps(args)]
    limit = timeout if timeout is not None else (args.get("budget_s") or 60) + 5
    try:
        proc = subprocess.run(cmd, input=build_payload().encode(), capture_output=True, timeout=limit,
                              env=env)
    except subprocess.TimeoutExpired:
        raise DataError(f"node payload killed after {limit:g} s without answering") from None
    return parse_payload_output(proc.stdout.decode("utf-8", "replace"), proc.returncode,
                                proc.stderr.decode("utf-8", "replace"))


MAX_ERROR_TEXT = 500  # characters of a node's own error message kept (it was taken whole: 16 MiB)


def parse_payload_output(stdout: str, rc: int | None = 0, stderr: str = "") -> dict:
    """The one JSON document a payload printed, or DataError naming what came back instead."""
    from fleetctl.fanout.payload import last_json_document

    text = stdout.strip()
    try:
        doc = last_json_document(text) if text else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        tail = (stderr.strip() or text)[-200:] or "no output"
        raise DataError(f"node payload (exit {rc}) did not print a result document: {tail}")
    if "error" in doc:  # the payload's own failure, in its words: any JSON value, bounded, one line
        what = clean_text(doc["error"], MAX_ERROR_TEXT).strip() if doc["error"] not in (None, "") else ""
        raise DataError(f"node payload failed: {what or 'no message'}")
    return doc


def since_epoch(value: float | str | None) -> float | None:
    """Accept epoch seconds, an ISO time or a relative '15m' / '2h' / '1d'."""
    if value is None or isinstance(value, (int, float)):
        return value
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = value.strip()
    try:
        if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
            return time.time() - float(text[:-1]) * units[text[-1]]
        if text.replace(".", "", 1).isdigit():
            return float(text)
        from datetime import datetime

        dt = datetime.fromisoformat(text)
        return dt.timestamp()
    except ValueError:
        raise UsageError(f"--since {value!r}: expected epoch seconds, an ISO time or 15m/2h/1d") from None
