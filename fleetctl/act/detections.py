"""Every input of act as one shape, `Detection`: an audit finding, a lens event or a hook's drain.

`trouble` marks what must never lead to an action: fleetctl's own failure (a node whose checks could
not run or did not answer, a check whose status is `error`) or measurement trouble (a lens event whose
evidence says the probes themselves were unreliable). Such detections are logged as refused.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from fleetctl.errors import DataError
from fleetctl.model.severity import EVENT_SEVERITY_OF_STATUS
from fleetctl.nodeset import is_node_name

MAX_DETECTIONS = 10_000
_HOOK_REASON = re.compile(r"\((prolog|epilog|healthcheck)\)$")


@dataclass
class Detection:
    id: str
    source: str  # audit, lens, hook
    code: str  # audit/hook check code (xid.79), or lens `<element type>.<metric>` (link.loss)
    severity: str  # critical, warning, info
    confidence: float
    time: float | str
    nodes: list[str] = field(default_factory=list)
    element: dict | None = None  # lens: {"type", "id", "direction"?}
    metric: str = ""
    message: str = ""
    subject: str = ""
    evidence: dict = field(default_factory=dict)
    jobs: list[dict] = field(default_factory=list)  # lens: the jobs crossing the element
    trouble: str = ""  # non-empty: fleetctl's own failure or measurement trouble: never acted on
    remedy: str = ""  # the check catalogue's action (reset-gpu, reboot, inspect-hardware, ...): where the ladder starts

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> dict:
        return {"id": self.id, "source": self.source, "code": self.code, "severity": self.severity,
                "confidence": self.confidence, "nodes": self.nodes,
                "element": self.element, "message": self.message[:300]}


def check_report(report) -> None:
    """DataError naming the first field of an audit report (`fleetctl.audit/1`) that is not of the
    documented shape, for every field the detections read: a report is input like any other file."""
    if not isinstance(report, dict):
        raise DataError("audit report: not a JSON object")
    for when in ("started", "finished"):
        value = report.get(when)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
            raise DataError(f"audit report: {when} is not a time")
    for section in ("nodes", "fleet"):
        if not isinstance(report.get(section, []), list):
            raise DataError(f"audit report: {section} is not a list")
    for i, node in enumerate(report.get("nodes", [])):
        where = f"nodes[{i}]"
        if not isinstance(node, dict):
            raise DataError(f"audit report: {where} is not an object")
        _check_fields(node, where, ("node", "transport", "error", "status"))
        if not isinstance(node.get("results", []), list):
            raise DataError(f"audit report: {where}.results is not a list")
        for j, res in enumerate(node.get("results", [])):
            if not isinstance(res, dict):
                raise DataError(f"audit report: {where}.results[{j}] is not an object")
            _check_fields(res, f"{where}.results[{j}]", ("code", "status", "subject", "message"))
    for i, finding in enumerate(report.get("fleet", [])):
        if not isinstance(finding, dict):
            raise DataError(f"audit report: fleet[{i}] is not an object")
        _check_fields(finding, f"fleet[{i}]", ("code", "status", "subject", "message", "nodes"))


def _check_fields(obj: dict, where: str, names: tuple[str, ...]) -> None:
    for name in names:
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            raise DataError(f"audit report: {where}.{name} is not a string")


REMEDIES = ("none", "restart-app", "reset-gpu", "reboot", "drain", "inspect-hardware")  # checks' actions


def _remedy(action) -> str:
    return action if action in REMEDIES else ""


def from_audit_report(report: dict) -> list[Detection]:
    """Detections of an audit report (`fleetctl.audit/1`): every failing or warning check result, every
    fleet finding, and one `trouble` detection per node that could not be checked."""
    out: list[Detection] = []
    when = report.get("finished") or report.get("started") or 0.0
    for node in report.get("nodes", []) or []:
        name = node.get("node")
        if not isinstance(name, str) or not is_node_name(name):
            continue
        if node.get("transport", "ok") != "ok" or node.get("error"):
            out.append(Detection(f"audit/{name}/unreachable", "audit", "audit.unreachable", "info", 0.0,
                                 when, [name], message=str(node.get("error", ""))[:300],
                                 trouble=f"fleetctl could not check {name} "
                                         f"({node.get('transport')}): its own failure, not the node's"))
            continue
        for res in node.get("results", []) or []:
            status = res.get("status")
            if status not in ("fail", "warn", "error"):
                continue
            code = str(res.get("code", "?"))[:64]
            subject = str(res.get("subject", ""))[:64]
            trouble = "" if status != "error" else f"check {code} could not run on {name}: measurement trouble"
            out.append(Detection(
                f"audit/{name}/{code}" + (f"/{subject}" if subject else ""), "audit", code,
                EVENT_SEVERITY_OF_STATUS[status], 1.0 if status == "fail" else 0.5, when, [name],
                message=str(res.get("message", ""))[:500], subject=subject,
                evidence=_bounded(res.get("evidence")), trouble=trouble, remedy=_remedy(res.get("action"))))
    for finding in report.get("fleet", []) or []:
        if finding.get("status") not in ("fail", "warn"):
            continue
        from fleetctl.nodeset import expand

        try:
            nodes = expand(finding.get("nodes", ""))
        except Exception:  # a hostile node list: no target, still explained
            nodes = []
        code = str(finding.get("code", "?"))[:64]
        out.append(Detection(f"audit/fleet/{code}/{finding.get('subject', '')}"[:200], "audit", code,
                             EVENT_SEVERITY_OF_STATUS[finding["status"]], 1.0 if finding["status"] == "fail"
                             else 0.5, when, nodes[:1024], message=str(finding.get("message", ""))[:500],
                             subject=str(finding.get("subject", ""))[:64],
                             evidence=_bounded(finding.get("evidence"))))
    return out[:MAX_DETECTIONS]


def from_lens_event(rec: dict) -> Detection:
    """A lens event (eventlog.valid(rec) holds). A host or NIC element names its node; a link names
    its host end when it has one (`node1:eth0--leaf1`), else no node (only its jobs)."""
    el = rec["element"]
    metric = str(rec.get("metric", ""))
    nodes = _element_nodes(el)
    evidence = _bounded(rec.get("evidence"))
    trouble = ""
    if evidence.get("measurement_trouble") or evidence.get("suspect_agents"):
        trouble = "lens says its own probes were unreliable (measurement trouble)"
    jobs = [j for j in rec.get("jobs", []) if isinstance(j.get("job_id"), str)][:256]
    return Detection(rec["id"], "lens", f"{el['type']}.{metric}", rec["severity"],
                     float(rec["confidence"]), rec.get("first_seen") or rec.get("time", ""), nodes,
                     element={k: str(el[k])[:128] for k in ("type", "id", "direction") if k in el},
                     metric=metric, message=f"{metric} on {el['type']} {el['id']}", evidence=evidence,
                     jobs=jobs, trouble=trouble)


def _element_nodes(el: dict) -> list[str]:
    ident = str(el.get("id", ""))
    if el.get("type") in ("host", "nic", "port"):
        host = ident.split(":")[0]
        return [host] if is_node_name(host) else []
    if el.get("type") == "link":  # only an end written `node:nic` is a host (switch ends have no ':')
        hosts = [end.split(":")[0] for end in ident.split("--") if ":" in end]
        return [h for h in hosts if is_node_name(h)]
    return []


def from_hook_drains(nodes, prefix: str) -> list[Detection]:
    """Nodes a fleetctl hook (Prolog, Epilog, HealthCheckProgram) drained: the hook already drained
    them; act moves their jobs. `nodes`: SlurmNode records."""
    from fleetctl.slurm.reasons import parse_reason

    out = []
    for node in nodes:
        reason = parse_reason(node.reason, prefix) if node.drained else None
        if reason is None or not _HOOK_REASON.search(reason.text):
            continue
        out.append(Detection(f"hook/{node.name}/{reason.code}/{node.reason_time}", "hook", reason.code,
                             "critical", 1.0, node.reason_time, [node.name], message=reason.text[:300]))
    return out


def _bounded(value, limit: int = 4096) -> dict:
    """A free-form evidence object, kept only when small (it goes into the action log)."""
    import json

    if not isinstance(value, dict):
        return {}
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        return {}
    return value if len(text) <= limit else {"truncated": text[:limit]}
