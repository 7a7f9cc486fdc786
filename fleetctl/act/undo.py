"""`fleetctl act undo ACTION_ID`: reverse one action where that can be done safely.

- drain: resume the node, only while its reason is still the one this action wrote (carries the action
  id): a node drained since by an operator or another action is left alone.
- swap: put the released spare back into the pool, only while it runs no job; the bad node stays
  drained (it is still bad: `fleetctl spares replenish` returns it after repair).
- resume: drain the node again.
- an abandoned swap (act stopped after the spare left the pool): return the spare, as for a swap.
- snapshot, notify: nothing to undo (said so).
A successful undo is logged as `undone` on the action's id; a refused or failed one changes nothing.
"""

from __future__ import annotations

from fleetctl.act.actionlog import ActionLog
from fleetctl.errors import SlurmError, UsageError


def undo(log: ActionLog, action_id: str, backend, pool=None, *, dry_run: bool = False) -> dict:
    rec = log.current().get(action_id)
    if rec is None:
        raise UsageError(f"no action {action_id!r} in {log.path}")
    if rec["phase"] != "done" and not (rec["phase"] == "abandoned" and rec.get("undo")):
        raise UsageError(f"action {action_id} is {rec['phase']}: only a done action (or an abandoned "
                         "swap whose spare was released) can be undone")
    action = rec["action"]
    base = {k: rec[k] for k in ("id", "policy", "action", "detection", "targets") if k in rec}
    # A failed undo raises and logs nothing: the action stays `done`, as it is.
    if action == "drain":
        what = _undo_drain(rec, backend, dry_run)
    elif action == "swap":
        what = _undo_swap(rec, backend, pool, dry_run)
    elif action == "resume":
        what = _undo_resume(rec, backend, dry_run)
    elif action == "reboot":
        what = _undo_reboot(rec, backend, dry_run)
    else:
        raise UsageError(f"a {action} action cannot be undone")
    if dry_run:
        return {"id": action_id, "dry_run": True, "would": what}
    return log.append({**base, "phase": "undone", "why": what})


def _undo_drain(rec, backend, dry_run) -> str:
    nodes = rec["targets"]["nodes"]
    states = backend.lookup(nodes).found
    for node in nodes:
        st = states.get(node)
        if st is None or not st.drained:
            raise UsageError(f"{node} is no longer drained: nothing to undo")
        if rec["id"] not in (st.reason or ""):
            raise UsageError(f"{node} now carries reason {st.reason!r}, not this action's: left alone")
    if not dry_run:
        result = backend.resume(nodes, wait_s=0)
        if result.refused:
            raise SlurmError("; ".join(f"{n}: {why}" for n, why in result.refused.items()))
    return f"resume {','.join(nodes)}"


def _undo_swap(rec, backend, pool, dry_run) -> str:
    spare = (rec.get("undo") or {}).get("return_spare")
    if not spare:
        raise UsageError("this swap released no spare: nothing to return")
    if pool is None:
        raise UsageError("no spare pool configured")
    jobs = backend.jobs(nodes=[spare])
    if jobs:
        raise UsageError(f"spare {spare} runs job(s) {','.join(j.job_id for j in jobs)}: returned only "
                         "once it is free")
    if not dry_run:
        with pool.locked():
            before = pool.members()
            if spare not in before:
                pool.write_members(before, sorted(set(before) | {spare}))
    return f"return {spare} to {pool.config.reservation}"


def _undo_resume(rec, backend, dry_run) -> str:
    nodes = rec["targets"]["nodes"]
    if not dry_run:
        backend.drain(nodes, "act.undo", f"{rec['id']} undo of a resume")
    return f"drain {','.join(nodes)} again"


def _undo_reboot(rec, backend, dry_run) -> str:
    """Withdraw a reboot Slurm has not issued yet (scontrol cancel_reboot); one already issued
    cannot be taken back, and Slurm says so."""
    nodes = rec["targets"]["nodes"]
    if not dry_run:
        backend.cancel_reboot(nodes)
    return f"cancel the reboot of {','.join(nodes)}"
