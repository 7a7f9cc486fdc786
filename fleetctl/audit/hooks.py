"""Slurm Prolog, Epilog and HealthCheckProgram logic, run on the node itself (as root, by slurmd).

The wrapper script (fleetctl/audit/hook.sh, installed by hook_install.install_hooks) bounds the time and
turns anything but a definite verdict into "let the job run" unless the site asks to fail closed:
a broken fleetctl must never drain a healthy node.

Verdicts (the `fleetctl hook` exit codes the wrapper reads):
  0 PASS     the node may run jobs (also: checks could not decide)
  2 FAILED   a definite hardware failure; the node has been drained with a fleetctl reason
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.audit.runner import NodeOutcome, collect_local
from fleetctl.checks import changes, hardware_failures
from fleetctl.errors import EXIT_FAILURES, EXIT_OK, FleetctlError
from fleetctl.nodeset import check_node_name, is_node_name

HOOKS = ("prolog", "epilog", "healthcheck")
DEFAULT_LEVEL = {"prolog": "quick", "epilog": "quick", "healthcheck": "quick"}
MAX_HOOK_BUDGET_S = 600.0  # same bound as the wrapper (hook.sh) and thresholds.prolog_budget_s
DEFAULT_STATE_DIR = "/run/fleetctl"
_JOB_ID = re.compile(r"[0-9]{1,20}(_[0-9]{1,20})?\Z")


@dataclass
class HookVerdict:
    hook: str
    node: str
    exit_code: int
    summary: str
    failed: bool = False  # a definite hardware failure was found (the exit code may still be 0)
    drained: bool = False
    resumed: bool = False
    outcome: NodeOutcome | None = None
    new_findings: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"hook": self.hook, "node": self.node, "exit_code": self.exit_code, "summary": self.summary,
                "failed": self.failed, "drained": self.drained, "resumed": self.resumed, "new_findings": self.new_findings,
                "check": self.outcome.to_dict() if self.outcome else None}


def hook_node() -> str:
    """This node's name; it becomes part of file names, so it must follow the node-name grammar."""
    name = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    return check_node_name(name, what="node name (SLURMD_NODENAME or host name)")


def hook_job_id() -> str:
    """SLURM_JOB_ID when it looks like one (it becomes part of a file name), else ''."""
    job_id = os.environ.get("SLURM_JOB_ID", "")
    return job_id if _JOB_ID.match(job_id) else ""


def state_dir() -> Path:
    return Path(os.environ.get("FLEETCTL_HOOK_STATE_DIR") or DEFAULT_STATE_DIR)


def _job_mark(node: str, job_id: str) -> Path:
    return state_dir() / f"job-{node}-{job_id}.json"


def run_hook(cluster, hook: str, *, level: str = "quick", budget_s: float | None = None,
             backend=None) -> HookVerdict:
    node = hook_node()
    job_id = hook_job_id()
    started = time.time()
    since, before = None, None
    if hook == "epilog":
        # Judge what happened during the job: kernel-log lines since the Prolog, and what got worse
        # since the Prolog's own check document (ECC counters, carrier flaps, new failures).
        mark = _read_mark(_job_mark(node, job_id)) if job_id else None
        since = mark["start"] if mark else started - 86400  # no record of the job's start: a day
        before = mark.get("doc") if mark else None
    outcome = collect_local(cluster, node, level, since=since, budget_s=budget_s)
    if outcome.doc is None:
        return HookVerdict(hook, node, EXIT_OK, f"checks could not run: {outcome.error}", outcome=outcome)
    if hook == "prolog" and job_id:
        _write_mark(_job_mark(node, job_id), {"start": started, "doc": outcome.doc})
    if hook == "epilog" and job_id:
        _job_mark(node, job_id).unlink(missing_ok=True)
    changed = changes(before, outcome.doc) if before else []
    failures = hardware_failures(outcome.doc) + hardware_failures({"results": changed})
    if backend is None:
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(cluster)
    if failures:
        first = failures[0]
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        text = f"{first.get('message', '')}{more} [{hook}]"
        result = backend.drain([node], first["code"], text)
        verdict = HookVerdict(hook, node, EXIT_FAILURES, f"{first['code']}: {first.get('message', '')}{more}",
                              failed=True, drained=node in result.drained, outcome=outcome,
                              new_findings=failures + [c for c in changed if c not in failures])
        # The epilog leaves the verdict to its own drain: a failing Epilog would make Slurm drain the
        # node again with "Epilog error", hiding the machine-readable reason.
        if hook == "epilog":
            verdict.exit_code = EXIT_OK
        return verdict
    resumed = False
    if hook == "healthcheck" and outcome.doc.get("complete") and outcome.status != "error":
        state = backend.nodes([node])
        if state and state[0].drained:
            resumed = node in backend.resume([node], wait_s=0).resumed  # slurmctld pings us next
    status = outcome.status
    return HookVerdict(hook, node, EXIT_OK, f"checks {status}" + (", resumed" if resumed else ""),
                       resumed=resumed, outcome=outcome,
                       new_findings=changed or [r for r in outcome.doc.get("results", [])
                                                if r.get("status") in ("warn", "fail")])


def _write_mark(path: Path, mark: dict) -> None:
    try:
        write_atomic(path, json.dumps(mark, default=str))
    except (OSError, FleetctlError):
        pass  # without the mark the epilog looks back a day instead: not worth failing a job for


def _read_mark(path: Path) -> dict | None:
    try:
        mark = json.loads(path.read_text())
        return mark if isinstance(mark, dict) and isinstance(mark.get("start"), (int, float)) else None
    except (OSError, ValueError):
        return None


def judge_and_record(load_site, hook: str, level: str, budget_s: float | None, warn):
    """The hook's verdict on the site `load_site()` returns, saved as the node's last, and its log line:
    (verdict, line). A FleetctlError (the site file included) is logged through `warn` and raised.
    Both ways into a hook share it: the CLI and the wrapper's fast path (hook_entry)."""
    try:
        verdict = run_hook(load_site(), hook, level=level, budget_s=budget_s)
    except FleetctlError as exc:
        warn(log_verdict(None, hook, exc))
        raise
    save_last(verdict)
    return verdict, log_verdict(verdict, hook)


def log_verdict(verdict: HookVerdict | None, hook: str, error: FleetctlError | Exception | None = None) -> str:
    """One line for the hook log (and slurmd's log): what was decided and why."""
    raw = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    node = verdict.node if verdict else (raw if is_node_name(raw) else repr(raw[:80]))
    job = hook_job_id() or "-"
    if verdict is None:
        line = f"fleetctl {hook} node={node} job={job} verdict=error error={error}"
    else:
        line = (f"fleetctl {hook} node={node} job={job} verdict="
                f"{'fail' if verdict.failed else 'pass'} drained={int(verdict.drained)} "
                f"resumed={int(verdict.resumed)} {verdict.summary}")
    path = os.environ.get("FLEETCTL_HOOK_LOG")
    if path:
        try:
            with open(path, "a") as fh:
                fh.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + line + "\n")
        except OSError:
            pass
    return line


def save_last(verdict: HookVerdict) -> None:
    """Keep the last verdict per hook and node as JSON, for `cat` by an operator."""
    try:
        path = state_dir() / f"last-{verdict.hook}-{verdict.node}.json"
        write_atomic(path, json.dumps(verdict.to_dict(), indent=1, default=str))
    except (OSError, FleetctlError):
        pass
