"""`fleetctl migrate JOBID NODE`: move the ranks a `fleetctl run` job has on NODE to its standbys at
the next step boundary, before NODE fails (a lens gray failure, an operator's maintenance).

Each rank on NODE is asked to leave (`leave/<slot>` in the job's control store). At its next
`step()` it has just pushed its state of that step to its replica holder; it reports `migrate`,
drops its process group and ends. Its peers' next collective fails; the controller gives its rank to
a standby, which restores that step from the holder; nothing is lost and nothing is requeued. The
training pauses for one in-process restart (docs/recovery.md, "Figures").
"""

from __future__ import annotations

import datetime
import time

from fleetctl.errors import RecoveryError, UsageError
from fleetctl.recovery import control

SLOTS_MAX = 100_000  # hello keys scanned for the job's slots


def connect(host: str, port: int, timeout_s: float = 10.0):
    import torch.distributed as dist

    try:
        return dist.TCPStore(host, port, None, False, datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    except Exception as exc:
        raise RecoveryError(f"control store {host}:{port} unreachable: {exc}") from None


def store_of_job(backend, job_id: str, base_port: int) -> tuple[str, int]:
    """Where a `fleetctl run` job's control store is when it was left to its default: the job's
    first node (its NodeAddr as Slurm has it), port base_port + job id mod 20000."""
    record = backend.job_record(job_id)
    if not record:
        raise UsageError(f"job {job_id}: Slurm does not know it")
    from fleetctl.nodeset import expand

    nodes = expand(record.get("NodeList", ""))
    if not nodes:
        raise UsageError(f"job {job_id} has no nodes yet (state {record.get('JobState', '?')})")
    found = backend.nodes([nodes[0]])
    address = (found[0].address if found else "") or nodes[0]
    return address, base_port + int(job_id.split("_")[0]) % 20000


def ranks_on(store, node: str) -> tuple[control.Plan, dict[int, control.Hello], list[int]]:
    """(plan, live slots, the training slots on `node`)."""
    plan = current_plan(store)
    live = hellos(store)
    return plan, live, sorted(s for s in plan.ranks if s in live and live[s].node == node)


def check_movable(store, node: str) -> tuple[control.Plan, dict[int, control.Hello], list[int]]:
    """(plan, live slots, slots to move) when the ranks on `node` can go to standbys; else the
    error that says why not."""
    plan, live, movers = ranks_on(store, node)
    if not movers:
        raise UsageError(f"the job has no training rank on {node} (its ranks are on "
                         f"{', '.join(sorted({live[s].node for s in plan.ranks if s in live})[:8]) or 'no node yet'})")
    standbys = sorted(s for s in live if s not in plan.ranks)
    if len(standbys) < len(movers):
        raise RecoveryError(f"{len(movers)} rank(s) on {node} and {len(standbys)} standby left: nothing to move "
                            "them to", hint="`fleetctl spares swap JOBID NODE` moves the whole job to a spare")
    return plan, live, movers


def current_plan(store) -> control.Plan:
    if not store.check(["gen"]):
        raise RecoveryError("the job's control store has no plan yet (still starting?)")
    gen = int(store.get("gen"))
    plan = control.Plan.parse(store.get(control.plan_key(gen)), gen)
    if plan.end:
        raise RecoveryError(f"the run has ended ({plan.end}: {plan.reason})")
    return plan


def hellos(store) -> dict[int, control.Hello]:
    out = {}
    for slot in range(min(control.slot_count(store), SLOTS_MAX)):
        if store.check([control.hello_key(slot)]) and not store.check([control.exit_key(slot)]):
            out[slot] = control.Hello.parse(store.get(control.hello_key(slot)), slot)
    return out


def migrate(store, node: str, reason: str, timeout_s: float = 120.0, clock=time.monotonic) -> dict:
    """Ask the ranks on `node` to move; wait for the plan that gives them to standbys."""
    plan, live, movers = check_movable(store, node)
    started = clock()
    for slot in movers:
        store.set(control.leave_key(slot), reason or "fleetctl migrate")
    deadline = started + timeout_s
    gen = plan.gen
    while clock() < deadline:
        newest = int(store.get("gen"))
        while gen < newest:
            gen += 1
            new = control.Plan.parse(store.get(control.plan_key(gen)), gen)
            if new.end:
                raise RecoveryError(f"the run ended instead ({new.end}: {new.reason})")
            if not set(movers) & set(new.ranks):
                moved = {plan.ranks[s]: {"from_slot": s, "to_slot": new.slot_of(plan.ranks[s]),
                                         "to_node": live.get(new.slot_of(plan.ranks[s])).node
                                         if new.slot_of(plan.ranks[s]) in live else None} for s in movers}
                return {"node": node, "moved": moved, "generation": gen, "resume": new.resume,
                        "seconds": round(clock() - started, 3)}
        time.sleep(0.05)
    raise RecoveryError(f"the ranks on {node} did not move within {timeout_s:.0f} s (is the loop calling step()?)")
