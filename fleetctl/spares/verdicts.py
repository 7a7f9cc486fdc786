"""Audit verdicts of nodes, kept so that only nodes that passed a recent audit join the spare pool.

One JSON file, `<state_dir>/audits.json`: {node: {"status", "time", "fail_codes", "level"}}. Written
atomically under the pool lock; read as hostile input (bounded size, bad entries ignored).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import DataError
from fleetctl.nodeset import is_node_name

MAX_FILE_BYTES = 8 << 20
MAX_CODES = 16
PASSING = ("ok", "warn")


class VerdictStore:
    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / "audits.json"

    def load(self) -> dict[str, dict]:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise DataError(f"cannot read {self.path}: {exc.strerror}") from None
        if len(data) > MAX_FILE_BYTES:
            raise DataError(f"{self.path}: larger than {MAX_FILE_BYTES >> 20} MiB")
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise DataError(f"{self.path}: not JSON (remove it; the next audit rewrites it)") from None
        if not isinstance(raw, dict):
            raise DataError(f"{self.path}: not a JSON object")
        out = {}
        for node, entry in raw.items():
            if (is_node_name(node) and isinstance(entry, dict) and isinstance(entry.get("status"), str)
                    and isinstance(entry.get("time"), (int, float))):
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
