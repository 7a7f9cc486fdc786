"""The remediation ladder's part of the act engine: the circuit breaker, the incident memory and
suspects, the rungs (GPU reset with its re-audit, reboot through Slurm) and the service request.
A mixin of `Engine` (act/engine.py), which owns the pending -> done frame (`_take`, `_refuse`) these
methods act through; docs/act.md, "The remediation ladder".
"""

from __future__ import annotations

import re

from fleetctl.act.budget import breaker_open
from fleetctl.act.detections import Detection
from fleetctl.act.policies import ACTIONS, REMEDIATION, RUNGS, Policy
from fleetctl.errors import FleetctlError, SlurmError, TransportError
from fleetctl.slurm.reasons import is_ours, make_reason

STOPPED = ("the ladder stopped: fleetctl could not run or judge the last step on the node (its own "
           "trouble, not the node's); the node stays drained for a person")


class Ladder:
    def _breaker_line(self) -> str:
        try:
            everyone = self.node_states()
        except SlurmError as exc:
            return f"cannot read node states from Slurm: {exc.message}"
        key = (self.node_reads, len(self._planned_drains))  # the same read and no new planned drain: same line
        if self._breaker_memo[0] == key:
            return self._breaker_memo[1]
        self._breaker_memo = (key, self._breaker_of(everyone))
        return self._breaker_memo[1]

    def _breaker_of(self, everyone: list) -> str:
        planned = set(self._planned_drains)
        if planned:  # a dry run's drains count as if Slurm showed them
            from dataclasses import replace

            prefix = self.backend.drain_prefix
            everyone = [replace(n, flags=[*n.flags, "DRAIN"], reason=make_reason(prefix, "planned")) if n.name in planned
                        else n for n in everyone]
        return breaker_open(everyone, self.config.breaker_pct,
                            lambda reason: is_ours(reason, self.backend.drain_prefix), self.config.breaker_min_nodes)

    def _suspects(self, det: Detection) -> dict:
        """The detection's nodes this fault makes suspect (too many incidents lately), with their histories."""
        if not det.nodes:
            return {}
        try:
            now, records = self.clock(), self.incidents.records()
        except FleetctlError as exc:  # unknown history: remediate, but put nothing back
            return {"": f"incident history not read ({exc.message}): nothing is resumed until it is"}
        # this fault is an incident too: the suspect_after-th within the window makes the node suspect
        return {n: h for n in det.nodes
                if (h := self.incidents.history(n, now, records)).in_window + 1 >= self.incidents.suspect_after}

    @staticmethod
    def _ladder(policy: Policy, suspects: dict, det: Detection) -> list[str]:
        """The policy's actions in order. A suspect node, or a finding the check catalogue sends to
        the hardware (inspect-hardware), skips the rungs and ends in a service request (added when
        the policy did not list it), and `resume` is refused for a suspect. A finding whose catalogue
        action is a reboot skips the GPU reset (it would not clear it)."""
        actions = policy.ordered_actions
        remediates = bool(set(actions) & set(REMEDIATION))
        if remediates and (any(suspects) or det.remedy == "inspect-hardware"):
            return [a for a in ACTIONS if (a in actions and a not in RUNGS) or a == "service-request"]
        if det.remedy in ("reboot", "drain"):
            skipped = ("reset-gpu", "reboot") if det.remedy == "drain" else ("reset-gpu",)
            return [a for a in actions if a not in skipped]
        return actions

    def _act_reset_gpu(self, policy, det, jobs, done) -> list[dict]:
        """The first rung: reset the finding's GPU on the drained, idle node, then re-audit it."""
        out = []
        for node in det.nodes:
            targets = {"nodes": [node], "gpu": det.subject}
            why = self._rung_refusal(node, "reset-gpu")
            if why:
                self._ladder_state[node] = "failed"
                out.append(self._refuse(policy, det, "reset-gpu", targets, why))
                continue

            def do(node=node):
                try:
                    result = self.remediator.reset_gpu(node, det.subject)
                    result["reaudit"] = self.remediator.reaudit(node, result["reset_at"])
                except TransportError:
                    self._ladder_state[node] = "stopped"  # fleetctl's trouble: no rung above this
                    raise
                return result

            recs = self._take(policy, det, "reset-gpu", targets, do, f"reset GPU {det.subject} of {node} and re-audit")
            rec = recs[-1]
            healed = rec["phase"] == "done" and rec["result"]["reaudit"]["status"] in ("ok", "warn")
            if self._ladder_state.get(node) != "stopped":
                self._ladder_state[node] = "healed" if healed else "failed"
            out += recs
        return [r for r in out if r]

    def _act_reboot(self, policy, det, jobs, done) -> list[dict]:
        """The second rung, for nodes no reset healed: Slurm reboots the node once idle and resumes
        it when it is back (`scontrol reboot ASAP nextstate=RESUME`); its health check judges it then."""
        out = []
        for node in det.nodes:
            if self._ladder_state.get(node) == "healed":
                continue
            targets = {"nodes": [node]}
            if self._ladder_state.get(node) == "stopped":
                out.append(self._refuse(policy, det, "reboot", targets, STOPPED))
                continue
            why = self._rung_refusal(node, "reboot", needs_remediator=False)
            if why:
                self._ladder_state[node] = "failed"
                out.append(self._refuse(policy, det, "reboot", targets, why))
                continue
            code = reason_code(det.code)
            recs = self._take(policy, det, "reboot", targets,
                              lambda aid, node=node: self._reboot(node, f"{self.backend.drain_prefix}:{code} {aid} "
                                                                        f"reboot: {det.message[:200]}"),
                              f"reboot {node} through Slurm", pass_id=True, undo={"cancel_reboot": [node]})
            self._ladder_state[node] = "rebooting" if recs[-1]["phase"] in ("done", "dry-run") else "failed"
            out += recs
        return [r for r in out if r]

    def _rung_refusal(self, node: str, action: str, *, needs_remediator: bool = True) -> str:
        if needs_remediator and self.remediator is None:
            return "no node access for the ladder (act runs without a transport)"
        try:
            state = self.backend.lookup([node]).found.get(node)
            busy = self.backend.jobs(nodes=[node], states=["RUNNING"])
        except SlurmError as exc:
            return f"cannot read {node} from Slurm: {exc.message}"
        if state is None:
            return f"{node} is not known to Slurm"
        if not (state.drained and is_ours(state.reason, self.backend.drain_prefix)) and not self._dry:
            return f"{node} is not drained by fleetctl: {action} only on a node taken out of service"
        if busy:
            return f"{node} still runs job(s) {', '.join(j.job_id for j in busy[:5])}: {action} waits for them"
        return ""

    def _reboot(self, node: str, reason: str) -> dict:
        self.backend.reboot([node], reason)
        return {"reboot": [node], "reason": reason, "next_state": "RESUME"}

    def _act_service_request(self, policy, det, jobs, done) -> list[dict]:
        from fleetctl.act.tickets import file_ticket, ticket_body

        out, now = [], self.clock()
        try:
            records = self.incidents.records()
        except FleetctlError:
            records = []  # the ticket goes out without the history rather than not at all
        log = self.log.current().values()
        filed = self._tickets_filed(det, now)
        for node in det.nodes:
            if self._ladder_state.get(node) in ("healed", "rebooting", "stopped"):
                continue  # healed; the reboot decides (a new fault after it makes the node suspect); or unknown
            if node in filed:
                continue  # its ticket for this incident is out: one per incident, whatever the cool-down
            history = self.incidents.history(node, now, records).to_dict()
            decisions = [r for r in log if node in r.get("targets", {}).get("nodes", [])]

            def do(aid, node=node, history=history, decisions=decisions):
                body = ticket_body(aid, det.summary(), history, decisions, now)
                return file_ticket(self.config.state_dir, body, self.config.service_webhook,
                                   self.config.webhook_timeout_s)

            why = f"service request for {node}" + (f" (suspect: {history['in_window']} incidents within "
                                                    "act.suspect_window_s)" if history["suspect"] else "")
            out += self._take(policy, det, "service-request", {"nodes": [node]}, do, why, pass_id=True)
        return [r for r in out if r]

    def _tickets_filed(self, det, now: float) -> set[str]:
        """Nodes with a service request done for this detection since fleetctl last took them out
        of service for it (drain or swap): the same incident seen again, by a later pass or with
        a cool-down of 0, files no second ticket. A new drain after the node came back is a new
        incident. Without any drain, a ticket within act.suspect_window_s counts."""
        taken: dict[str, float] = {}
        tickets: dict[str, float] = {}
        for rec in self.log.for_detection(det.id):
            if "done" not in rec.get("history", ()):
                continue
            for node in rec.get("targets", {}).get("nodes", []):
                if rec.get("action") in ("drain", "swap"):
                    taken[node] = max(taken.get(node, 0.0), rec["time"])
                elif rec.get("action") == "service-request":
                    tickets[node] = max(tickets.get(node, 0.0), rec["time"])
        return {node for node, t in tickets.items()
                if t >= taken.get(node, now - self.config.suspect_window_s)}

    def _remember(self, det, action, aid, targets) -> None:
        """An incident per node a remediation was started on (the memory behind `suspect`)."""
        for node in targets.get("nodes", []):
            if node in self._remembered:
                continue  # one incident per detection, however many rungs it climbs
            self._remembered.add(node)
            try:
                self.incidents.record(time=self.clock(), node=node, code=det.code, action=action,
                                      action_id=aid, source=det.source,
                                      gpu=det.subject if det.code.startswith(("xid.", "gpu.")) else "")
            except FleetctlError:
                pass  # the action is done; a memory that cannot be written must not undo it


def suspect_line(suspects: dict) -> str:
    names = ", ".join(sorted(suspects))
    return (f"suspect: {names} had too many incidents lately (act.suspect_after within "
            "act.suspect_window_s): a service request, never back to production by fleetctl")


def reason_code(code: str) -> str:
    """A check code as the code part of a Slurm reason (`fleetctl:<code> ...`): no spaces or quotes."""
    clean = re.sub(r"[^A-Za-z0-9_.\-]", ".", code).strip(".") or "act"
    return clean[:64]
