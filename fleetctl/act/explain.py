"""`fleetctl explain`: a short plain-language account built from the evidence, no language model.

For a FINDING (`NODE:CODE`, from the last audit report act consumed, or one given), an EVENT (a lens
event id `ev-...`), a NODE or a JOBID: what is wrong, where, since when, how sure and why (the
evidence: paths, counters, log lines), which jobs it touches, what fleetctl did or would do (from the
action log) and what a person should do next. Every sentence comes from a field of the inputs; a
field that is missing is said to be unknown, never guessed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from fleetctl.act import eventlog
from fleetctl.act.actionlog import ActionLog
from fleetctl.errors import FleetctlError, SlurmError, UsageError
from fleetctl.nodeset import is_node_name
from fleetctl.slurm.reasons import parse_reason

MAX_EVIDENCE_LINES = 6

NEXT_FOR_ACTION = {
    "reboot": "reboot the node; if the same Xid returns after the reboot, send the GPU for repair (RMA)",
    "reset-gpu": "reset the GPU (nvidia-smi -r) or reboot; if it returns, have the GPU inspected",
    "inspect-hardware": "have the hardware inspected (seating, power, cabling)",
    "restart-app": "restart the application; the node itself is fine unless this repeats",
    "drain": "repair the node, then `fleetctl spares replenish` (or `fleetctl audit NODE --resume`)",
}
NEXT_FOR_METRIC = {
    "loss": "check the cable and transceivers of {el} (counters on both ports; reseat or replace the optic)",
    "down": "check the port state and the cable of {el}; replace the cable or optic if the port stays down",
    "delay": "look for congestion or a degraded (lower-rate) port on {el}",
    "flapping": "replace the optic or cable of {el}: marginal optics flap",
    "clock": "check the time service (PTP/chrony) of {el}",
}


@dataclass
class Context:
    backend: object = None  # a SlurmBackend, or None (explanations then skip live Slurm state)
    log: ActionLog | None = None
    events_path: str = ""
    audit: dict | None = None  # an audit report (fleetctl.audit/1)
    incidents: object = None  # an act.incidents.IncidentLog: the node's remediation history


def explain(target: str, ctx: Context) -> dict:
    target = target.strip()
    if re.fullmatch(r"ev-[A-Za-z0-9T\-]{1,60}", target):
        return explain_event(target, ctx)
    if re.fullmatch(r"[0-9]{1,20}(_[0-9]{1,20})?", target):
        return explain_job(target, ctx)
    if ":" in target:
        node, _, code = target.partition(":")
        if is_node_name(node) and re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", code):
            return explain_finding(node, code, ctx)
    if is_node_name(target):
        return explain_node(target, ctx)
    raise UsageError(f"explain: {target[:60]!r} is neither a finding (NODE:CODE), a lens event (ev-...), "
                     "a node nor a job id")


# ---------------------------------------------------------------- findings
def explain_finding(node: str, code: str, ctx: Context) -> dict:
    if ctx.audit is None:
        raise UsageError("explain: no audit report to find the finding in: give --report FILE (or let "
                         "`fleetctl act run` consume one)")
    entry = next((n for n in ctx.audit.get("nodes", []) if n.get("node") == node), None)
    results = [r for r in (entry or {}).get("results", []) if r.get("code") == code]
    if not results:
        raise UsageError(f"explain: the audit report has no finding {code} on {node}")
    res = results[0]
    when = ctx.audit.get("finished") or ctx.audit.get("started")
    out = _base("finding", f"{node}:{code}")
    out["where"] = f"{node}" + (f", {res['subject']}" if res.get("subject") else "")
    out["what"] = _finding_what(code, res)
    out["since"] = _since_evidence(res) or (f"seen by the audit of {_iso(when)}" if when else "unknown")
    status = res.get("status")
    out["how_sure"] = ("certain: the check failed on a definite reading" if status == "fail" else
                       "a warning: the reading is off but not a definite failure" if status == "warn" else
                       "not at all: the check could not run (fleetctl's own trouble, never acted on)")
    out["why"] = _evidence_lines(res)
    out["jobs"] = _jobs_on(ctx, [node])
    out["fleetctl"] = _actions_for(ctx, lambda r: (r.get("detection") or {}).get("id", "").startswith(
        f"audit/{node}/{code}"))
    action = res.get("action") or ""
    out["next"] = NEXT_FOR_ACTION.get(action, "look at the evidence below on the node")
    return _finish(out)


def _finding_what(code: str, res: dict) -> str:
    m = re.fullmatch(r"xid\.(\d+)", code)
    if m:
        from fleetctl.checks.payload.xid import UNKNOWN_XID, XID_POLICY

        xid = int(m.group(1))
        what = XID_POLICY.get(xid, UNKNOWN_XID)[3]
        return f"GPU error Xid {xid}: {what}" + (f" ({res.get('message')})" if res.get("message") else "")
    return res.get("message") or code


def _since_evidence(res: dict) -> str:
    ev = res.get("evidence") or {}
    for key in ("first_seen", "since", "time", "first"):
        value = ev.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 1e9 <= value < 1e11:
            return f"since {_iso(value)}"  # an epoch: the docs and every other line speak ISO
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return f"since {value}"
    return ""


def _evidence_lines(item: dict) -> list[str]:
    ev = item.get("evidence") or {}
    lines = []
    for key, value in list(ev.items())[:MAX_EVIDENCE_LINES]:
        text = value if isinstance(value, str) else repr(value)
        lines.append(f"{key}: {text[:200]}")
    return lines or ["(no evidence recorded beyond the message)"]


# ---------------------------------------------------------------- lens events
def explain_event(event_id: str, ctx: Context) -> dict:
    if not ctx.events_path:
        raise UsageError("explain: no lens event log: give --events PATH or set act.lens_events")
    view, _ = eventlog.current(ctx.events_path)
    rec = view.get(event_id)
    if rec is None:
        raise UsageError(f"explain: no event {event_id} in {ctx.events_path}")
    el = rec["element"]
    name = f"{el['type']} {el['id']}" + (f" (direction {el['direction']})" if el.get("direction") else "")
    out = _base("event", event_id)
    metric = rec.get("metric", "?")
    out["what"] = f"{_metric_words(metric, rec.get('evidence') or {})} on {name}"
    out["where"] = name
    out["since"] = (f"since {rec.get('first_seen')}, last seen {rec.get('last_seen')}"
                    + ("; closed" if rec.get("state") == "closed" else "; still open"))
    flap = rec.get("flap")
    if isinstance(flap, dict) and flap.get("count"):
        out["since"] += f"; flapped {flap['count']} times (period {flap.get('period_s')} s)"
    out["how_sure"] = f"{rec['severity']}, confidence {float(rec['confidence']):.2f}"
    out["why"] = _evidence_lines(rec)
    out["jobs"] = [{"job_id": j.get("job_id"), "user": j.get("user", ""), "nodes": j.get("nodes", "")}
                   for j in rec.get("jobs", [])][:50]
    out["fleetctl"] = _actions_for(ctx, lambda r: (r.get("detection") or {}).get("id") == event_id)
    out["next"] = NEXT_FOR_METRIC.get(metric, "look at the element's counters").format(el=el["id"])
    return _finish(out)


def _metric_words(metric: str, ev: dict) -> str:
    if metric == "loss":
        pct = ev.get("loss_pct")
        return f"packet loss{f' of {pct} %' if isinstance(pct, (int, float)) else ''}"
    if metric == "delay":
        return "added delay" + (f" of {ev['excess_us']} us" if isinstance(ev.get("excess_us"), (int, float)) else "")
    return {"down": "the element is down", "flapping": "the element goes down and up repeatedly",
            "clock": "clock offset beyond its limit",
            "rank_lost": "a training rank on the node was lost with no standby left (fleetctl run)"}.get(metric, metric)


# ---------------------------------------------------------------- nodes and jobs
def explain_node(node: str, ctx: Context) -> dict:
    out = _base("node", node)
    out["where"] = node
    state = None
    if ctx.backend is not None:
        try:
            state = ctx.backend.lookup([node]).found.get(node)
        except SlurmError as exc:
            out["why"].append(f"Slurm could not be asked: {exc.message}")
    if state is None and ctx.backend is not None and not out["why"]:
        raise UsageError(f"explain: Slurm does not know node {node}")
    if state is not None:
        mine = parse_reason(state.reason, ctx.backend.drain_prefix) if state.reason else None
        if state.drained and mine is not None:
            aid = re.search(r"act-\d{8}T\d{6}-[0-9a-f]{6}", mine.text)
            out["what"] = f"{node} is drained by fleetctl for {mine.code}" + (
                f" (action {aid.group(0)})" if aid else "")
            out["how_sure"] = "the drain reason carries fleetctl's prefix"
            out["next"] = NEXT_FOR_ACTION["drain"].replace("NODE", node)
        elif state.drained:
            out["what"] = f"{node} is drained by someone else: {state.reason!r}"
            out["how_sure"] = "its reason has no fleetctl prefix: fleetctl never touches it"
            out["next"] = f"ask {state.reason_user or 'whoever drained it'}; fleetctl leaves it alone"
        else:
            out["what"] = f"{node} is {state.state_text.lower()}: in service"
            out["how_sure"] = "Slurm's own state"
            out["next"] = "nothing"
        out["since"] = f"since {state.reason_time}" if state.reason_time else "unknown"
        out["why"].append(f"Slurm state {state.state_text}" + (f", reason {state.reason!r}" if state.reason else ""))
    audit_node = next((n for n in (ctx.audit or {}).get("nodes", []) if n.get("node") == node), None)
    if audit_node is not None:
        fails = [f"{r['code']}: {r.get('message', '')[:120]}" for r in audit_node.get("results", [])
                 if r.get("status") in ("fail", "warn")]
        out["why"] += [f"last audit: {audit_node.get('status')}"] + fails[:MAX_EVIDENCE_LINES]
    out["jobs"] = _jobs_on(ctx, [node])
    out["fleetctl"] = _actions_for(ctx, lambda r: node in (r.get("targets") or {}).get("nodes", []))
    if ctx.incidents is not None:
        _history(out, node, ctx.incidents)
    if not out["what"]:
        out["what"], out["next"] = f"{node}: no live Slurm state (no site file backend)", "look at the log"
    return _finish(out)


def _history(out: dict, node: str, incidents) -> None:
    """The node's incidents (remediations), its mean time between them, and whether it is suspect."""
    try:
        history = incidents.history(node, time.time())
    except FleetctlError as exc:
        out["why"].append(f"incident history not read: {exc.message}")
        return
    out["history"] = history.to_dict()
    if history.incidents:
        mtbi = history.mtbi_s
        out["why"].append(f"{len(history.incidents)} incident(s), the last {_iso(history.incidents[-1]['time'])} "
                          f"({history.incidents[-1]['code']}, {history.incidents[-1]['action']})"
                          + (f"; mean time between incidents {mtbi / 3600:.1f} h" if mtbi is not None else ""))
    if history.suspect:
        out["why"].append(f"suspect: {history.in_window} incidents within act.suspect_window_s; fleetctl "
                          "files a service request and never puts it back itself")
        if out["next"] in ("", "nothing"):
            out["next"] = "the node is suspect: follow its service request (state_dir/tickets)"


def explain_job(job_id: str, ctx: Context) -> dict:
    out = _base("job", job_id)
    nodes: list[str] = []
    if ctx.backend is not None:
        try:
            jobs = ctx.backend.jobs(job_ids=[job_id])
        except SlurmError:
            jobs = []
        if jobs:
            nodes = jobs[0].nodes
            out["where"] = jobs[0].nodelist or "not running (pending)"
            out["jobs"] = [{"job_id": job_id, "state": jobs[0].state, "user": jobs[0].user,
                            "nodes": jobs[0].nodelist}]
    acts = _actions_for(ctx, lambda r: job_id in (r.get("targets") or {}).get("jobs", []) or
                        bool(set(nodes) & set((r.get("targets") or {}).get("nodes", []))))
    out["fleetctl"] = acts
    touching = [a for a in acts if a["phase"] in ("done", "dry-run")]
    if touching:
        det = touching[0].get("detection", "")
        out["what"] = f"job {job_id} is affected by {det}"
        out["how_sure"] = "from fleetctl's action log"
    else:
        out["what"] = f"job {job_id}: fleetctl has taken no action on it"
        out["how_sure"] = "no record in the action log"
    if ctx.audit:
        bad = [n["node"] for n in ctx.audit.get("nodes", []) if n.get("node") in nodes and n.get("status") == "fail"]
        if bad:
            out["why"].append(f"its node(s) {','.join(bad)} failed the last audit")
    out["since"] = f"first action {touching[0]['time_iso']}" if touching else "unknown"
    out["next"] = ("nothing: the job was moved and restores from its snapshot" if any(
        a["action"] == "swap" and a["phase"] == "done" for a in acts) else "watch the job")
    return _finish(out)


# ---------------------------------------------------------------- helpers
def _base(kind: str, subject: str) -> dict:
    return {"kind": kind, "subject": subject, "what": "", "where": "", "since": "", "how_sure": "",
            "why": [], "jobs": [], "fleetctl": [], "next": ""}


def _jobs_on(ctx: Context, nodes: list[str]) -> list[dict]:
    if ctx.backend is None:
        return []
    try:
        return [{"job_id": j.job_id, "user": j.user, "nodes": j.nodelist, "state": j.state}
                for j in ctx.backend.jobs(nodes=nodes, states=["RUNNING"])]
    except SlurmError:
        return []


def _actions_for(ctx: Context, keep) -> list[dict]:
    if ctx.log is None:
        return []
    out = []
    for rec in sorted(ctx.log.current().values(), key=lambda r: r["time"]):
        if keep(rec):
            det = rec.get("detection") or {}
            out.append({"id": rec["id"], "action": rec["action"], "phase": rec["phase"], "why": rec.get("why", ""),
                        "policy": rec.get("policy"), "time_iso": _iso(rec["time"]),
                        "detection": f"{det.get('code')} ({det.get('id')})"})
    return out[-20:]


def _iso(t) -> str:
    if isinstance(t, (int, float)):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    return str(t)


def _finish(out: dict) -> dict:
    """The plain-language paragraph, from the fields only."""
    did = [f"{a['action']} {a['phase']} ({a['why']})" for a in out["fleetctl"]]
    parts = [f"What: {out['what']}.", f"Where: {out['where'] or 'unknown'}.", f"Since: {out['since'] or 'unknown'}.",
             f"How sure: {out['how_sure'] or 'unknown'}."]
    if out["why"]:
        parts.append("Evidence: " + "; ".join(out["why"]) + ".")
    parts.append("Jobs touched: " + (", ".join(str(j.get("job_id")) for j in out["jobs"]) or "none") + ".")
    parts.append("fleetctl: " + ("; ".join(did) if did else "took no action") + ".")
    parts.append(f"Next: {out['next'] or 'nothing'}.")
    out["text"] = " ".join(parts)
    return out
