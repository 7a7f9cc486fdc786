"""Audit outputs beyond the terminal: a Prometheus textfile and a history directory of JSON reports.

Both are written atomically (fleetctl.atomic: private temporary file, fsync, rename): node_exporter's
textfile collector and a later `fleetctl audit` must never read half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from fleetctl.atomic import write_atomic as _write_atomic
from fleetctl.audit.report import AuditReport
from fleetctl.checks.followup import compare
from fleetctl.checks.payload.common import RANK
from fleetctl.errors import DataError, FleetctlError
from fleetctl.filekit.locks import lock_fd

STATUS_VALUE = {"ok": 0, "warn": 1, "fail": 2, "error": 3}
HISTORY_GLOB = "audit-*.json"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` all or nothing (DataError naming the file on failure)."""
    _write_atomic(path, text)


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(report: AuditReport) -> str:
    c = _label(report.cluster)
    lines = [
        "# HELP fleetctl_audit_node_status Worst check status of the node: 0 ok, 1 warn, 2 fail, 3 error.",
        "# TYPE fleetctl_audit_node_status gauge",
    ]
    for node in sorted(report.outcomes):
        lines.append(f'fleetctl_audit_node_status{{cluster="{c}",node="{_label(node)}"}} '
                     f"{STATUS_VALUE[report.node_status(node)]}")
    lines += ["# HELP fleetctl_audit_check_status Status of each check that did not pass: 1 warn, 2 fail, 3 error.",
              "# TYPE fleetctl_audit_check_status gauge"]
    for node in sorted(report.outcomes):
        doc = report.outcomes[node].doc or {}
        for r in doc.get("results", []):
            if r.get("status") in ("warn", "fail", "error"):
                lines.append(f'fleetctl_audit_check_status{{cluster="{c}",node="{_label(node)}",'
                             f'code="{_label(r["code"])}",subject="{_label(r.get("subject", ""))}"}} '
                             f"{STATUS_VALUE[r['status']]}")
    summary = report.summary()
    lines += ["# HELP fleetctl_audit_nodes Nodes audited by status.", "# TYPE fleetctl_audit_nodes gauge"]
    for status in ("ok", "warn", "fail", "error"):
        lines.append(f'fleetctl_audit_nodes{{cluster="{c}",status="{status}"}} {summary[status]}')
    lines += [
        "# HELP fleetctl_audit_duration_seconds Wall time of the last audit.",
        "# TYPE fleetctl_audit_duration_seconds gauge",
        f'fleetctl_audit_duration_seconds{{cluster="{c}",level="{report.level}"}} '
        f"{report.finished - report.started:.3f}",
        "# HELP fleetctl_audit_last_run_timestamp_seconds End of the last audit (Unix time).",
        "# TYPE fleetctl_audit_last_run_timestamp_seconds gauge",
        f'fleetctl_audit_last_run_timestamp_seconds{{cluster="{c}",level="{report.level}"}} {report.finished:.0f}',
    ]
    return "\n".join(lines) + "\n"


def _finding_name(r: dict) -> str:
    return r["code"] + (f"/{r['subject']}" if r.get("subject") else "")


def previous_report(history: Path) -> dict | None:
    """The newest readable report in the history directory, or None."""
    for path in sorted(Path(history).glob(HISTORY_GLOB), reverse=True):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a damaged old report must not stop today's audit
        if data.get("schema") == "fleetctl.audit/1":
            data["_path"] = str(path)
            return data
    return None


def changes_since(previous: dict | None, report: AuditReport) -> dict | None:
    """What changed per node since the previous report: status moves, new and resolved findings
    (checks.compare: new = did not pass now and passed then, resolved = the reverse)."""
    if previous is None:
        return None
    before = {n["node"]: n for n in previous.get("nodes", [])}
    nodes = {}
    for node, outcome in report.outcomes.items():
        old = before.get(node)
        now_status = report.node_status(node)
        worse, resolved_results = compare({"results": old.get("results", [])} if old else None, outcome.doc)
        new = sorted(_finding_name(r) for prev, r in worse if prev is None or RANK[prev["status"]] == 0)
        if old is None:
            nodes[node] = {"status": [None, now_status], "new": new, "resolved": []}
            continue
        resolved = sorted(_finding_name(r) for r in resolved_results)
        if new or resolved or old.get("status") != now_status:
            nodes[node] = {"status": [old.get("status"), now_status], "new": new, "resolved": resolved}
    return {"previous": previous.get("_path"), "previous_finished": previous.get("finished"),
            "nodes": nodes}


def write_history(history: Path, report_dict: dict, keep: int = 500) -> Path:
    """Add the report to the history directory and drop the oldest beyond `keep`.

    Concurrent audits (two cron jobs, a manual run) must each keep their report: choosing a free
    name, writing and trimming happen under an exclusive lock on `DIR/.lock`, and a name already
    taken in the same millisecond gets a `-N` suffix instead of being replaced."""
    history = Path(history)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(report_dict["finished"]))
    base = f"audit-{stamp}-{int(report_dict['finished'] * 1000) % 1000:03d}"
    text = json.dumps(report_dict, indent=1, default=str)
    with _locked(history):
        path, n = history / f"{base}.json", 0
        while path.exists() or path.is_symlink():
            n += 1
            path = history / f"{base}-{n}.json"
        write_atomic(path, text)
        old = sorted(history.glob(HISTORY_GLOB))
        for stale in old[:-keep]:
            stale.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def _locked(directory: Path):
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise DataError(f"cannot write {directory}: {exc.strerror or exc}") from None
    try:
        lock_fd(fd, wait_s=None)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_outputs(data: dict, report: AuditReport, history: str | None, prom: str | None) -> list[dict]:
    """Write the history report and the Prometheus file; each failure is returned, not raised
    (`{"step": "history"|"prom", "message": ...}`), so the report still shows what was done."""
    errors = []
    if history:
        try:
            write_history(Path(history), data)
        except FleetctlError as exc:
            errors.append({"step": "history", "message": exc.message})
    if prom:
        try:
            write_atomic(Path(prom), prometheus_text(report))
        except FleetctlError as exc:
            errors.append({"step": "prom", "message": exc.message})
    return errors
