"""The act engine: for each detection, the policies it matches, the decision for each of their
actions (taken, or refused and why) and the action itself, logged around it.

Order that makes a crash harmless: the decision is appended to the action log as `pending` (fsynced)
before the action; `done` or `failed` after. No drain ever happens without its record; a crash
between the two leaves `pending`, reconciled by `recover()` at the next start. Refusals, never an
exception, for: measurement trouble or fleetctl's own failure, confidence below the policy's floor,
a cool-down, an operator's drain, the budget. In dry-run every decision is logged as `dry-run`.

Points of that order: the engine calls `on_point(action, point)` (point: after-pending, after-action,
after-<step> of a multi-step action) at each, a no-op unless a test gives a hook that crashes the
process there (tests/support/crash.py), to prove the order above.
"""

from __future__ import annotations

import contextlib

import time
from collections.abc import Callable

from fleetctl.act.actionlog import ActionLog, new_action_id
from fleetctl.act.budget import Budget, since_hour
from fleetctl.act.config import ActConfig
from fleetctl.act.detections import Detection
from fleetctl.act.incidents import REMEDIATIONS, IncidentLog
from fleetctl.act.ladder import STOPPED, Ladder, reason_code, suspect_line
from fleetctl.act.policies import ACTIONS, REMEDIATION, RUNGS, Policy
from fleetctl.errors import FleetctlError, SlurmError
from fleetctl.slurm.reasons import is_ours


def _no_hook(action: str, point: str) -> None:
    """The default `on_point`: production passes every point silently."""


class Engine(Ladder):
    def __init__(self, backend, policies: list[Policy], config: ActConfig, *, pool=None,
                 dry_run: bool = True, registry: str | None = None, clock=time.time,
                 on_point: Callable[[str, str], None] = _no_hook):
        self.backend = backend
        self.policies = policies
        self.config = config
        self.pool = pool
        self.dry_run = dry_run
        self.log = ActionLog(config.state_dir)
        self.budget = Budget(config.max_drain_pct, config.max_drains_per_hour)
        self.incidents = IncidentLog.from_config(config)
        self.registry = registry
        self.clock = clock
        self.on_point = on_point
        self._refusals: set[tuple] = set()  # refusals already logged by this process (no repeats)
        self._planned_drains: list[str] = []  # dry-run: drains decided but not visible in Slurm
        self._dry = dry_run  # this policy's: the engine's dry run, or the policy in shadow mode
        self._breaker = ""  # this detection's breaker line ('' closed)
        self._node_cache = None  # Slurm's node states, read once per pass (one_pass) and after our changes
        self._in_pass = False
        self.node_reads = 0
        self._breaker_memo: tuple = (None, "")  # (node read, planned drains) -> the breaker's line
        self.remediator = None  # act.remedy.Remediator (GPU reset, re-audit): set by act.run.start
        self._ladder_state: dict[str, str] = {}  # this detection's nodes: healed | failed | rebooting
        self._remembered: set[str] = set()  # nodes with an incident recorded for this detection

    # ---- entry points
    def recover(self) -> list[dict]:
        """Reconcile actions left `pending` by a crash: a drain whose node carries the action id in
        its reason happened (`done`); anything else did not finish (`abandoned`)."""
        out = []
        for rec in self.log.current().values():
            if rec["phase"] != "pending":
                continue
            base = {k: rec[k] for k in ("id", "policy", "action", "detection", "targets") if k in rec}
            done = False
            if rec["action"] == "drain" and rec.get("targets", {}).get("nodes"):
                try:
                    state = self.backend.lookup(rec["targets"]["nodes"]).found
                except SlurmError:
                    continue  # decide next time, with Slurm reachable
                done = all(rec["id"] in (s.reason or "") for s in state.values()) and bool(state)
            phase = "done" if done else "abandoned"
            why = ("recovered after a crash: Slurm shows the drain" if done else
                   "the process stopped before this action finished: check its target by hand")
            spare = rec.get("spare") if rec["action"] == "swap" else None
            if isinstance(spare, str) and spare:
                # The spare left the pool before the crash: the record says which, so that
                # `act undo` can return it (it is never lost to the pool).
                base["undo"] = {"return_spare": spare, "job": (rec.get("targets", {}).get("jobs") or [None])[0]}
                why += f"; spare {spare} was released (act undo {rec['id']} returns it once free)"
            out.append(self.log.append({**base, "phase": phase, "why": why}))
        return out

    def handle(self, det: Detection) -> list[dict]:
        """Every decision for one detection (records as appended to the log)."""
        out: list[dict] = []
        if not self._in_pass:
            self._node_cache = None
        matching = [p for p in self.policies if p.matches(det)]
        if any(set(p.actions) & set(REMEDIATION) for p in matching):
            self._breaker = self._breaker_line()
        self._remembered = set()
        for policy in matching:
            self._dry = self.dry_run or policy.shadow
            self._ladder_state = {}
            out += self._handle_policy(policy, det)
        return out


    # ---- one policy
    def _handle_policy(self, policy: Policy, det: Detection) -> list[dict]:
        why = self._policy_refusal(policy, det)
        if why:
            return [r for r in (self._refuse(policy, det, a, {"nodes": det.nodes}, why)
                                for a in policy.ordered_actions) if r]
        try:
            jobs = self._jobs(det)
        except SlurmError as exc:
            return [r for r in (self._refuse(policy, det, a, {"nodes": det.nodes},
                                             f"cannot read the jobs from Slurm: {exc.message}")
                                for a in policy.ordered_actions) if r]
        out: list[dict] = []
        suspects = self._suspects(det)
        ladder = self._ladder(policy, suspects, det)
        skipped = [a for a in policy.ordered_actions if a in RUNGS and a not in ladder]
        for action in [a for a in ACTIONS if a in ladder or a in skipped]:
            if (action in REMEDIATION or action == "service-request") and self._breaker:
                out += [r for r in [self._refuse(policy, det, action, {"nodes": det.nodes}, self._breaker)] if r]
            elif action in skipped:  # said once, where the rung would have been
                why = (suspect_line(suspects) if any(suspects) else
                       f"the check catalogue's action for {det.code} is {det.remedy}: {action} would not clear it")
                out += [r for r in [self._refuse(policy, det, action, {"nodes": det.nodes}, why)] if r]
            elif action == "resume" and suspects:
                why = suspects.get("") or suspect_line(suspects)
                out += [r for r in [self._refuse(policy, det, "resume", {"nodes": det.nodes}, why)] if r]
            else:
                out += getattr(self, f"_act_{action.replace('-', '_')}")(policy, det, jobs, out)
        return out


    def _policy_refusal(self, policy: Policy, det: Detection) -> str:
        if det.trouble:
            return f"not acted on: {det.trouble}"
        if det.confidence < policy.min_confidence:
            return (f"confidence {det.confidence:.2f} is below the policy's floor of "
                    f"{policy.min_confidence:.2f}")
        since = self.clock() - policy.cooldown_s
        for rec in self.log.for_detection(det.id):
            # An action undone since still started the cool-down (an operator undid it: don't redo it).
            if rec.get("policy") == policy.name and "done" in rec["history"] and rec["time"] >= since:
                return (f"cool-down: policy {policy.name} acted on this at {_clock(rec['time'])} "
                        f"({rec['id']}); cool-down {policy.cooldown_s:g} s")
        return ""

    def _jobs(self, det: Detection) -> list[dict]:
        if det.jobs:
            return [{"job_id": j["job_id"], "nodes": j.get("nodes", ""), "user": j.get("user", "")}
                    for j in det.jobs]
        if not det.nodes:
            return []
        return [{"job_id": j.job_id, "nodes": j.nodelist, "user": j.user, "node_list": j.nodes}
                for j in self.backend.jobs(nodes=det.nodes, states=["RUNNING"])]

    # ---- actions
    def _act_snapshot(self, policy, det, jobs, _done) -> list[dict]:
        """Ask every job at once, wait once (snapshot_timeout_s in all, not per job): the drain that
        follows waits for at most one timeout, whatever the number of jobs. A job whose registry
        entry cannot be used is refused; a request that fails is that job's `failed`, never the end
        of the policy."""
        from fleetctl.snapshot import requests
        from fleetctl.snapshot.registry import lookup

        out, started = [], []
        for job in jobs:
            targets = {"jobs": [job["job_id"]], "nodes": det.nodes}
            try:
                root = lookup(job["job_id"], self.registry, owner=self._owner(job))
            except FleetctlError as exc:
                out.append(self._refuse(policy, det, "snapshot", targets,
                                        f"job {job['job_id']} does not use the snapshot library ({exc.message})"))
                continue
            what = f"snapshot job {job['job_id']} in {root}"
            if self._dry:
                out.append(self.log.append({**self._base(policy, det, "snapshot", targets), "phase": "dry-run",
                                            "why": f"would {what} ({self._dry_note(policy)})"}))
                continue
            base = self._base(policy, det, "snapshot", targets)
            self.log.append({**base, "phase": "pending", "why": what})
            started.append((base, what, requests.ask(root, "drain"), time.monotonic()))
        if started:
            self.on_point("snapshot", "after-pending")
            requests.wait_all([a for _, _, a, _ in started], self.config.snapshot_timeout_s)
        for base, what, asked, t0 in started:
            seconds = round(time.monotonic() - t0, 3)
            if asked.answer is not None:
                out.append(self.log.append({**base, "phase": "done", "why": what, "seconds": seconds,
                                            "result": {**asked.answer, "request": asked.request_id}}))
            else:
                why = asked.problem or asked.timeout_error(self.config.snapshot_timeout_s).message
                out.append(self.log.append({**base, "phase": "failed", "why": f"{what}: {why}",
                                            "seconds": seconds}))
        return [r for r in out if r]

    def _owner(self, job: dict) -> int | None:
        """The uid owning a job (its registry entry must be theirs): from its user, else Slurm."""
        uid = _uid(job.get("user"))
        if uid is None and not job.get("user"):
            from fleetctl.snapshot.registry import job_owner

            try:
                uid = job_owner(self.backend, job["job_id"])
            except FleetctlError:
                uid = None
        return uid

    def _act_migrate(self, policy, det, jobs, _done) -> list[dict]:
        """Each `fleetctl run` job on the node: its ranks there go to its standbys at their next
        step (docs/recovery.md). A job that is not one, or has no standby left, is a refusal: the
        policy's swap, if any, then moves the whole job."""
        from fleetctl.recovery.launch import BASE_PORT
        from fleetctl.recovery.migrate import check_movable, connect, migrate, ranks_on, store_of_job

        out = []
        for node in det.nodes:
            for job in jobs:
                if node not in job.get("node_list", [node]):
                    continue
                targets = {"nodes": [node], "jobs": [job["job_id"]]}
                try:
                    host, port = store_of_job(self.backend, job["job_id"], BASE_PORT)
                    store = connect(host, port, timeout_s=self.config.migrate_connect_s)
                    if not ranks_on(store, node)[2]:
                        # the job's own controller already gave the rank lost there to a standby (a
                        # hung or dead process is found in seconds), or only a standby is there: the
                        # job runs on; swapping it would requeue it for nothing
                        out += self._take(policy, det, "migrate", targets,
                                          lambda node=node: {"node": node, "moved": {}},
                                          f"nothing to move: job {job['job_id']} has no training rank "
                                          f"on {node} (lost there and replaced in the job, or a standby)")
                        continue
                    check_movable(store, node)
                except FleetctlError as exc:
                    out.append(self._refuse(policy, det, "migrate", targets, f"cannot migrate: {exc.message}"))
                    continue
                out += self._take(policy, det, "migrate", targets,
                                  lambda aid, store=store, node=node: migrate(
                                      store, node, f"{aid} {det.message}"[:200], self.config.migrate_timeout_s),
                                  f"move job {job['job_id']}'s ranks on {node} to its standbys", pass_id=True)
        return [r for r in out if r]

    def _act_drain(self, policy, det, jobs, _done) -> list[dict]:
        if not det.nodes:
            return [r for r in [self._refuse(policy, det, "drain", {}, "no node to drain: the element "
                                             "is not a host, NIC or host link")] if r]
        out = []
        for node in det.nodes:
            why = self._drain_refusal(node)
            targets = {"nodes": [node]}
            if why:
                out.append(self._refuse(policy, det, "drain", targets, why))
                continue
            code = reason_code(det.code)
            out += self._take(policy, det, "drain", targets,
                              lambda aid, node=node: self._drain(node, code, f"{aid} {det.message}"),
                              f"drain {node} ({code})", pass_id=True, undo={"resume": [node]})
        return [r for r in out if r]

    def _act_swap(self, policy, det, jobs, done) -> list[dict]:
        from fleetctl.spares.swap import plan_swap, run_swap

        if self.pool is None:
            return [r for r in [self._refuse(policy, det, "swap", {}, "no spare pool configured")] if r]
        out = []
        drained_now = {n for r in done if r["action"] == "drain" and r["phase"] in ("done", "dry-run")
                       for n in r["targets"]["nodes"]}
        for node in det.nodes:
            for job in jobs:
                if node not in job.get("node_list", [node]):
                    continue
                targets = {"nodes": [node], "jobs": [job["job_id"]]}
                moved = next((r for r in done if r["action"] == "migrate" and r["phase"] in ("done", "dry-run")
                              and r["targets"] == targets), None)
                if moved is not None:  # its ranks left the node for standbys: nothing to swap
                    out.append(self._refuse(policy, det, "swap", targets,
                                            f"not needed: {moved['id']} moved the job's ranks to standbys"))
                    continue
                if node not in drained_now:
                    why = self._drain_refusal(node, allow_ours=True, allow_operators=True)
                    if why:
                        out.append(self._refuse(policy, det, "swap", targets, why))
                        continue
                try:
                    plan = plan_swap(self.backend, self.pool, job["job_id"], node, code=reason_code(det.code),
                                     dry_run=self._dry)
                except FleetctlError as exc:
                    out.append(self._refuse(policy, det, "swap", targets, f"cannot swap: {exc.message}"))
                    continue

                def do(aid, plan=plan, targets=targets):
                    plan.text = f"{aid} {det.message}"
                    run_swap(plan, self.backend, self.pool,
                             after_step=lambda step: self._progress(aid, policy, det, "swap", targets, plan,
                                                                    step))
                    if not plan.ok:
                        failed = [s for s in plan.steps if s.status == "failed"]
                        raise SlurmError(f"swap step {failed[0].step} failed: {failed[0].result}")
                    return {"spare": plan.spare, "steps": [s.__dict__ for s in plan.steps],
                            "warnings": plan.warnings}

                out += self._take(policy, det, "swap", targets, do,
                                  f"swap job {job['job_id']} off {node} onto a spare", pass_id=True,
                                  undo={"return_spare": True})
        return [r for r in out if r]

    def _act_resume(self, policy, det, jobs, _done) -> list[dict]:
        out = []
        for node in det.nodes:
            state = self._ladder_state.get(node)
            if set(policy.actions) & set(RUNGS) and state != "healed":
                why = ("Slurm resumes it after its reboot (nextstate=RESUME), once its health check passes"
                       if state == "rebooting" else STOPPED if state == "stopped"
                       else "no rung of the ladder healed it (its reset-gpu or reboot record says why)")
                out.append(self._refuse(policy, det, "resume", {"nodes": [node]}, why))
                continue
            out += self._take(policy, det, "resume", {"nodes": [node]},
                              lambda node=node: _resume(self.backend, node), f"resume {node}",
                              undo={"drain": [node]})
        return [r for r in out if r]


    def _act_notify(self, policy, det, jobs, done) -> list[dict]:
        from fleetctl.act.notify import post

        body = {"policy": policy.name, "detection": det.summary(), "jobs": jobs,
                "decisions": [{k: r.get(k) for k in ("id", "action", "phase", "why", "targets")} for r in done]}
        return self._take(policy, det, "notify", {"webhook": policy.webhook},
                          lambda: post(policy.webhook, body, self.config.webhook_timeout_s),
                          f"notify {policy.webhook}")

    # ---- the pending -> action -> done frame
    def _base(self, policy, det, action, targets, aid: str | None = None) -> dict:
        return {"id": aid or new_action_id(self.clock()), "policy": policy.name, "action": action,
                "detection": det.summary(), "targets": targets}

    def _take(self, policy, det, action, targets, do, what, *, pass_id=False, undo=None) -> list[dict]:
        base = self._base(policy, det, action, targets)
        aid = base["id"]
        if self._dry:
            if action == "drain" and self.dry_run:  # a shadow policy's drains do not hold back the others'
                self._planned_drains += targets.get("nodes", [])
            return [self.log.append({**base, "phase": "dry-run", "why": f"would {what} ({self._dry_note(policy)})"})]
        self.log.append({**base, "phase": "pending", "why": what})
        self.on_point(action, "after-pending")
        started = time.monotonic()
        if action in ("drain", "swap", "resume", "reboot"):
            self._node_cache = None  # it changes node states: the next decision reads them anew
        try:
            result = do(aid) if pass_id else do()
        except FleetctlError as exc:
            return [self.log.append({**base, "phase": "failed", "why": f"{what}: {exc.message}",
                                     "seconds": round(time.monotonic() - started, 3)})]
        except Exception as exc:  # fleetctl's own failure: logged, never the end of act or of the policy
            return [self.log.append({**base, "phase": "failed",
                                     "why": f"{what}: internal error ({type(exc).__name__}: {str(exc)[:300]}); "
                                            "check its target by hand",
                                     "seconds": round(time.monotonic() - started, 3)})]
        self.on_point(action, "after-action")
        if action in REMEDIATIONS:
            self._remember(det, action, aid, targets)
        rec = {**base, "phase": "done", "why": what, "result": result,
               "seconds": round(time.monotonic() - started, 3)}
        if undo is not None:
            rec["undo"] = ({"return_spare": result.get("spare"), "job": targets.get("jobs", [None])[0]}
                           if "return_spare" in undo else undo)
        return [self.log.append(rec)]

    def _dry_note(self, policy) -> str:
        return "dry run" if self.dry_run else f"shadow: policy {policy.name} is in shadow mode"


    def _progress(self, aid, policy, det, action, targets, plan, step) -> None:
        """A step of a multi-step action done: recorded (still `pending`) with what it changed, so a
        crash before `done` still knows, e.g., which spare left the pool."""
        rec = {**self._base(policy, det, action, targets, aid), "phase": "pending",
               "why": f"{action}: step {step.step} {step.status}: {step.result}"}
        if getattr(plan, "spare", None):
            rec["spare"] = plan.spare
        self.log.append(rec)
        self.on_point(action, f"after-{step.step}")

    def _refuse(self, policy, det, action, targets, why) -> dict | None:
        key = (policy.name, det.id, action, why)
        if key in self._refusals:
            return None
        self._refusals.add(key)
        return self.log.append({"id": new_action_id(self.clock()), "policy": policy.name, "action": action,
                                "detection": det.summary(), "targets": targets, "phase": "refused",
                                "why": why})

    @contextlib.contextmanager
    def one_pass(self):
        """The detections handled inside share one read of Slurm's node states (read again only after
        an action of this engine changed them): a storm of N detections on a 10,000-node cluster costs
        one `scontrol show node` per drain, swap, resume or reboot, not two per detection. Outside a
        pass, every detection reads them anew."""
        self._in_pass, self._node_cache = True, None
        try:
            yield self
        finally:
            self._in_pass, self._node_cache = False, None

    def node_states(self) -> list:
        """Slurm's node states (SlurmError when it cannot be read), as this pass knows them."""
        if self._node_cache is None:
            self._node_cache = self.backend.nodes()
            self.node_reads += 1  # also the generation the breaker's line is kept for
        return self._node_cache


    def _drain_refusal(self, node: str, *, allow_ours: bool = False, allow_operators: bool = False) -> str:
        try:
            everyone = self.node_states()
        except SlurmError as exc:
            return f"cannot read node states from Slurm: {exc.message}"
        state = next((n for n in everyone if n.name == node), None)
        if state is None:
            return f"{node} is not known to Slurm"
        if state.drained and not is_ours(state.reason, self.backend.drain_prefix):
            return "" if allow_operators else f"{node} was drained by someone else ({state.reason!r}): never touched"
        if state.drained:
            return "" if allow_ours else f"{node} is already drained by fleetctl ({state.reason!r})"
        if node in self._planned_drains:
            return "" if allow_ours else f"{node} is already to be drained (dry run)"
        hour = self.log.done_since(since_hour(self.clock()), ("drain", "swap"))
        drained_by_act = {n for r in hour for n in r.get("targets", {}).get("nodes", [])}
        return self.budget.check(node, everyone, len(drained_by_act), self._planned_drains)

    def _drain(self, node: str, code: str, text: str) -> dict:
        result = self.backend.drain([node], code, text)
        if not result.drained:
            raise SlurmError(f"{node} not drained: {'; '.join(result.skipped.values())}")
        return {"drained": result.drained, "reason": result.reason}


def _resume(backend, node: str) -> dict:
    result = backend.resume([node], wait_s=0)
    if not result.resumed:
        raise SlurmError(f"{node} not resumed: {'; '.join(result.refused.values())}")
    return {"resumed": result.resumed}


def _uid(user) -> int | None:
    """The uid of a job's user (its registry entry must be theirs), None when unknown here."""
    import pwd

    if not isinstance(user, str) or not user:
        return None
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) + "Z"
