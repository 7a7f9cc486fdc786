"""Audit verdicts of nodes, kept so that only nodes that passed a recent audit join the spare pool.

One JSON file, `<state_dir>/audits.json`: {node: {"status", "time", "fail_codes", "level"}}. Written
atomically under the pool lock; read as hostile input (bounded size, bad entries ignored).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.filekit import read_json
from fleetctl.nodeset import is_node_name

MAX_FILE_BYTES = 8 << 20
MAX_CODES = 16
PASSING = ("ok", "warn")


class VerdictStore:
    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / "audits.json"

    def load(self) -> dict[str, dict]:
        raw = read_json(self.path, "audit verdicts file", max_bytes=MAX_FILE_BYTES, missing_ok=True,
                        kind=dict)
        if raw is None:
            return {}
        out = {}
        for node, entry in raw.items():
            if (is_node_name(node) and isinstance(entry, dict) and isinstance(entry.get("status"), str)
                    and isinstance(entry.get("time"), (int, float)) and math.isfinite(entry["time"])):
                out[node] = entry
        return out

    def save(self, verdicts: dict[str, dict]) -> None:
        write_atomic(self.path, json.dumps(verdicts, indent=1, sort_keys=True) + "\n")

    def record_report(self, report: dict) -> dict[str, dict]:
        """Record the verdict of every node of an audit report (`fleetctl.audit/1` JSON); returns them.

        A node whose checks did not complete gets status `error`: it never counts as passed."""
        verdicts = self.load()
        now = float(report.get("finished") or time.time())
        new = {}
        for node in report.get("nodes", []):
            name = node.get("node")
            if not isinstance(name, str) or not is_node_name(name):
                continue
            status = node.get("status", "error")
            if not node.get("complete", False) or node.get("transport", "ok") != "ok":
                status = "error"
            fails = [r.get("code", "?") for r in node.get("results", []) if r.get("status") == "fail"]
            new[name] = {"status": status, "time": now, "level": report.get("level", ""),
                         "fail_codes": fails[:MAX_CODES]}
        verdicts.update(new)
        self.save(verdicts)
        return new


def passed_within(entry: dict | None, max_age_s: float, now: float | None = None) -> tuple[bool, str]:
    """Whether a verdict lets a node join the pool, and why not."""
    if entry is None:
        return False, "no audit recorded"
    age = (now or time.time()) - float(entry["time"])
    if entry["status"] not in PASSING:
        codes = ", ".join(entry.get("fail_codes") or []) or entry["status"]
        return False, f"last audit {entry['status']} ({codes}) {age:.0f} s ago"
    if age > max_age_s:
        return False, f"last passing audit is {age:.0f} s old (limit {max_age_s:.0f} s)"
    return True, f"passed {age:.0f} s ago"
