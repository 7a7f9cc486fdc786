"""`fleetctl spares swap JOBID BADNODE`: move a job off a bad node onto a spare.

Steps, in this order (each one recorded, `--dry-run` shows them all and does none):
1. check: the job runs on BADNODE and Slurm may requeue it (batch, Requeue=1);
2. drain BADNODE with a fleetctl reason (a node an operator drained already stays as it is);
3. release one free spare from the pool (it leaves the reservation, so the job may land on it);
4. requeue the job excluding BADNODE (requeuehold, ExcNodeList+=BADNODE, release): with the bad node
   drained and excluded, the free spare is where it lands;
5. restore: nothing to do here: a job using fleetctl.snapshot restores its newest verified snapshot
   when it starts again; `wait_running` reports when it runs and where.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from fleetctl.errors import SlurmError, UsageError
from fleetctl.slurm.reasons import is_ours


@dataclass
class SwapStep:
    step: str
    detail: str
    status: str = "planned"  # planned, done, skipped, failed
    result: str = ""
    seconds: float = 0.0


@dataclass
class SwapPlan:
    job_id: str
    bad_node: str
    dry_run: bool
    steps: list[SwapStep] = field(default_factory=list)
    spare: str | None = None
    warnings: list[str] = field(default_factory=list)
    running_on: list[str] = field(default_factory=list)
    code: str = "spares.swap"  # of the drain reason
    text: str = ""
    expedited: bool = False  # the job was submitted with --requeue=expedite (Slurm 25.11+)

    @property
    def ok(self) -> bool:
        return all(s.status in ("done", "skipped", "planned") for s in self.steps)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def plan_swap(backend, pool, job_id: str, bad_node: str, *, code: str = "spares.swap",
              text: str = "", dry_run: bool = False) -> SwapPlan:
    plan = SwapPlan(str(job_id), bad_node, dry_run, code=code, text=text)
    rec = backend.job_record(job_id)
    if not rec:
        raise UsageError(f"job {job_id}: Slurm does not know it")
    state = rec.get("JobState", "").upper()
    from fleetctl.slurm.parse import expand_nodelist

    nodes = expand_nodelist(rec.get("NodeList", "(null)"))
    if state != "RUNNING":
        raise UsageError(f"job {job_id} is {state or 'in an unknown state'}, not RUNNING: nothing to swap")
    if bad_node not in nodes:
        raise UsageError(f"job {job_id} does not run on {bad_node} (its nodes: {','.join(nodes)})")
    if rec.get("BatchFlag", "1") == "0":
        raise UsageError(f"job {job_id} is not a batch job: Slurm cannot requeue it")
    if rec.get("Requeue", "1") == "0":
        raise UsageError(f"job {job_id} was submitted with --no-requeue: Slurm will not requeue it")
    plan.expedited = rec.get("ExpeditedRequeue", "").lower() == "yes"
    how = ("expedited requeue: it starts again at once, at the highest priority" if plan.expedited else
           "requeued jobs wait for Slurm's credential lifetime (cred_expire) before they start again; "
           "`sbatch --requeue=expedite` with SlurmctldParameters=enable_expedited_requeue (Slurm 25.11+) "
           "restarts at once")
    plan.steps.append(SwapStep("check", f"job {job_id} RUNNING on {','.join(nodes)}, requeueable; {how}",
                               "done"))
    node = backend.lookup([bad_node]).found.get(bad_node)
    if node is not None and node.drained and not is_ours(node.reason, backend.drain_prefix):
        plan.steps.append(SwapStep("drain", f"{bad_node} already drained by someone else "
                                   f"({node.reason!r}): left as is", "skipped"))
    elif node is not None and node.drained:
        plan.steps.append(SwapStep("drain", f"{bad_node} already drained by fleetctl ({node.reason!r})",
                                   "skipped"))
    else:
        plan.steps.append(SwapStep("drain", f"drain {bad_node}: {code} {text}".strip()))
    free = [n for n in pool.status().free if n not in nodes]
    if not free:
        raise SlurmError(f"no free spare in {pool.config.reservation} to swap {bad_node} for")
    plan.steps.append(SwapStep("release", f"take one free spare out of {pool.config.reservation} "
                               f"(candidates: {','.join(free)})"))
    plan.steps.append(SwapStep("requeue", f"requeue job {job_id} with {bad_node} excluded"))
    plan.steps.append(SwapStep("restore", "the job restores its newest verified snapshot when it starts "
                               "(fleetctl.snapshot), or starts over from its own checkpoint"))
    return plan


def run_swap(plan: SwapPlan, backend, pool, *, on_step=None, after_step=None) -> SwapPlan:
    """Do the planned steps in order; stop at the first failure (later steps stay `planned`).

    `on_step(step)` is called before each step is done, `after_step(step)` after each step that
    changed something (act's log records the released spare there, before the next step)."""
    if plan.dry_run:
        return plan
    code, text = plan.code, plan.text
    for step in plan.steps:
        if step.status != "planned" or step.step == "restore":
            continue
        if on_step is not None:
            on_step(step)
        started = time.monotonic()
        try:
            if step.step == "drain":
                result = backend.drain([plan.bad_node], code, text)
                step.result = f"drained {','.join(result.drained)}" if result.drained else \
                    "; ".join(result.skipped.values())
            elif step.step == "release":
                plan.spare, change = pool.release_one(exclude=[plan.bad_node])
                plan.warnings += change.warnings
                step.result = f"released {plan.spare}"
            elif step.step == "requeue":
                backend.requeue_excluding(plan.job_id, [plan.bad_node],
                                          allow=[plan.spare] if plan.spare else [])
                step.result = f"requeued, {plan.bad_node} excluded"
            step.status = "done"
        except SlurmError as exc:
            step.status, step.result = "failed", exc.message
            step.seconds = round(time.monotonic() - started, 3)
            break
        step.seconds = round(time.monotonic() - started, 3)
        if after_step is not None:
            after_step(step)
    return plan


def wait_running(backend, job_id: str, timeout_s: float = 60.0) -> list[str]:
    """Wait until the job runs again; return its nodes ([] if it did not within the timeout)."""
    from fleetctl.slurm.parse import expand_nodelist

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rec = backend.job_record(job_id)
        if rec.get("JobState", "").upper() == "RUNNING":
            return expand_nodelist(rec.get("NodeList", "(null)"))
        time.sleep(0.2)
    return []
