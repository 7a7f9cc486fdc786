"""What `fleetctl lens status` reports: the coordinator's status file (hostile input: bounded, a
regular file only, nesting bounded), whether it runs, the open events, and the exit code."""

from __future__ import annotations

from pathlib import Path

from fleetctl.errors import EXIT_ERROR, EXIT_FAILURES, EXIT_OK, EXIT_WARNINGS, DataError
from fleetctl.filekit import read_json
from fleetctl.lens import daemon
from fleetctl.lens.eventlog import read_events

MAX_STATUS_BYTES = 16 << 20  # status.json: 200 elements and an entry per agent and clock


def read_status(directory: Path) -> dict:
    pid = daemon.running_pid(directory / "lens.pid")
    try:
        doc = read_json(directory / "status.json", "lens status file", max_bytes=MAX_STATUS_BYTES,
                        missing_ok=True, kind=dict, error=DataError) or {}
    except DataError as exc:
        doc = {"error": exc.message}
    doc["running"] = bool(pid)
    doc["pid"] = pid
    doc["state_dir"] = str(directory)
    doc["open_events"] = read_events(directory / "events.jsonl", open_only=True)
    doc["exit_code"] = status_code(doc)
    return doc


def dicts(value) -> list[dict]:
    """The objects of a list read from a file (anything else: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def status_code(doc: dict) -> int:
    """3 no coordinator, 2 a critical event open, 1 a warning (an event, an agent down or
    overloaded), 0 healthy."""
    if not doc.get("running"):
        return EXIT_ERROR
    events = doc.get("open_events") or []
    if any(e.get("severity") == "critical" for e in events):
        return EXIT_FAILURES
    if events or any(not a.get("alive") or a.get("overloaded") for a in dicts(doc.get("agents"))):
        return EXIT_WARNINGS
    return EXIT_OK
