"""No-rollback recovery's parts: the replica protocol over real sockets (and what it refuses), the
plans and reports read from the store as input, and the controller's decisions against a real torch
TCPStore (fleetctl.recovery.replica, control, resilient)."""

from __future__ import annotations

import datetime
import hashlib
import json
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from fleetctl.errors import RecoveryError  # noqa: E402
from fleetctl.recovery import control, replica  # noqa: E402
from fleetctl.recovery.resilient import Resilient, peer_failure  # noqa: E402


# ---------------------------------------------------------------- replicas
@pytest.fixture
def server():
    s = replica.ReplicaServer("127.0.0.1", "run-a", max_bytes=1 << 20)
    yield s
    s.close()


def test_a_replica_goes_to_its_holder_and_comes_back_checked(server):
    body = bytes(range(256)) * 100
    replica.push("127.0.0.1", server.port, "run-a", 3, 41, body)
    replica.push("127.0.0.1", server.port, "run-a", 3, 42, body[::-1])
    assert server.store.holds() == {3: [41, 42]}
    assert replica.fetch("127.0.0.1", server.port, "run-a", 3, 41) == body
    assert replica.fetch("127.0.0.1", server.port, "run-a", 3, 42) == body[::-1]
    with pytest.raises(RecoveryError, match="no replica of rank 3 at iteration 7"):
        replica.fetch("127.0.0.1", server.port, "run-a", 3, 7)


def _raw(port: int, data: bytes) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        return json.loads(sock.makefile("rb").readline())


@pytest.mark.parametrize("request_bytes, error", [
    (b'{"op":"put","run":"run-b","rank":0,"iteration":1,"size":1,"sha256":"' + b"0" * 64 + b'"}\nx',
     "another job"),
    (b'{"op":"put","run":"run-a","rank":0,"iteration":1,"size":2000000,"sha256":"' + b"0" * 64 + b'"}\n',
     "size must be"),
    (b'{"op":"put","run":"run-a","rank":0,"iteration":1,"size":1,"sha256":"' + b"0" * 64 + b'"}\nx',
     "SHA-256 mismatch"),
    (b'{"op":"put","run":"run-a","rank":-1,"iteration":1,"size":1,"sha256":"x"}\n', "rank must be"),
    (b'{"op":"drop","run":"run-a","rank":0,"iteration":1}\n', "unknown op"),
    (b"not json\n", "not JSON"),
    (b"[1]\n", "not a JSON object"),
    (b"x" * 5000, "over 4096 bytes"),
])
def test_hostile_replica_requests_are_refused_and_nothing_is_kept(server, request_bytes, error):
    reply = _raw(server.port, request_bytes)
    assert reply["ok"] is False and error in reply["error"]
    assert server.store.holds() == {} and server.refused == 1


def test_the_holder_keeps_the_last_three_of_each_rank_within_its_byte_bound():
    store = replica.ReplicaStore(keep=3, max_total=10_000)
    for it in range(5):
        store.put(0, it, b"a" * 1000, "d")
    assert store.holds() == {0: [2, 3, 4]}
    for it in range(4):
        store.put(1, it, b"b" * 3000, "d")  # over the bound: the oldest go first, never a rank's last
    held = store.holds()
    assert held[1][-1] == 3 and held[0][-1] == 4
    assert sum(len(store.get(r, i)[0]) for r, its in held.items() for i in its) <= 10_000


# ---------------------------------------------------------------- plans and reports as input
def _plan_doc(**over) -> str:
    doc = control.Plan(1, 2, {0: 0, 3: 1}, {0: 3, 1: 0}, 9, {1: 1}, {1: 0}).to_doc()
    doc.update(over)
    return json.dumps(doc)


def test_a_plan_reads_back_as_written():
    plan = control.Plan.parse(_plan_doc(), 1)
    assert (plan.ranks, plan.holders, plan.resume, plan.lost, plan.sources) == \
        ({0: 0, 3: 1}, {0: 3, 1: 0}, 9, {1: 1}, {1: 0})
    assert plan.slot_of(1) == 3


@pytest.mark.parametrize("over, error", [
    ({"version": 2}, "version"),
    ({"gen": 4}, "gen"),
    ({"ranks": {"0": 0, "3": 0}}, "ranks are not 0..1"),
    ({"ranks": {"x": 0, "3": 1}}, "is not a number"),
    ({"resume": "9"}, "is not an iteration"),
    ({"end": "reboot"}, "is not one of"),
    ({"holders": [1]}, "must be an object"),
])
def test_a_bad_plan_is_refused_by_name(over, error):
    with pytest.raises(RecoveryError, match=error):
        control.Plan.parse(_plan_doc(**over), 1)


def test_an_oversized_or_broken_store_value_is_refused():
    with pytest.raises(RecoveryError, match="over"):
        control.decode("x" * (control.VALUE_MAX + 1), "plan 1")
    with pytest.raises(RecoveryError, match="not JSON"):
        control.decode(b"\xff\xfe", "hello of slot 2")
    with pytest.raises(RecoveryError, match="kind must be"):
        control.Report.parse('{"kind": "maybe"}', 2)
    with pytest.raises(RecoveryError, match="at most 64"):
        control.Report.parse(json.dumps({"kind": "peer", "have": list(range(65))}), 2)
    with pytest.raises(RecoveryError, match="port"):
        control.Hello.parse('{"node": "n1", "address": "10.0.0.1", "port": 70000}', 0)


def test_replicas_are_held_on_another_node_when_there_is_one():
    ranks = {0: 0, 1: 1, 2: 2, 3: 3}
    nodes = {0: "a", 1: "a", 2: "b", 3: "b"}
    holders = control.holders_for(ranks, nodes)
    assert all(nodes[holders[r]] != nodes[s] for s, r in ranks.items())
    assert control.holders_for({0: 0}, {0: "a"}) == {0: 0}


def test_the_resume_point_is_the_newest_iteration_every_rank_has():
    plan = control.Plan(0, 3, {0: 0, 1: 1, 2: 2}, {0: 1, 1: 2, 2: 0})
    reports = {0: control.Report(0, "peer", "", {61, 62, 63}, {2: {60, 61, 62}}),
               1: control.Report(1, "peer", "", {62, 63, 64}, {0: {61, 62, 63}})}
    assert control.resume_point(plan, reports, lost={2}) == 62
    assert control.resume_point(plan, {1: reports[1]}, lost={0, 2}) is None  # rank 2's holder is lost too


def test_a_collective_failure_is_a_peer_failure_and_a_bug_is_not():
    assert peer_failure(RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"))
    assert peer_failure(RuntimeError("Timed out waiting 60000ms for recv operation to complete"))
    assert not peer_failure(ValueError("bad batch"))
    assert not peer_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_outside_fleetctl_run_the_library_says_how_to_launch():
    with pytest.raises(RecoveryError, match="not started by `fleetctl run`"):
        Resilient(torch.nn.Linear(2, 2), env={})


def test_a_backend_is_gloo_or_nccl_and_nccl_needs_a_gpu_it_can_see():
    env = {"FLEETCTL_RUN_STORE": "127.0.0.1:1", "FLEETCTL_RUN_SLOT": "0", "FLEETCTL_RUN_ID": "r",
           "FLEETCTL_RUN_ADDR": "127.0.0.1"}
    with pytest.raises(RecoveryError, match="backend 'mpi': gloo or nccl"):
        Resilient(torch.nn.Linear(2, 2), env=env, backend="mpi")
    if not torch.cuda.is_available():  # this machine (the device scripts run the GPU side)
        with pytest.raises(RecoveryError, match="needs a CUDA GPU"):
            Resilient(torch.nn.Linear(2, 2), env=env, backend="nccl")


def test_state_restored_from_a_copy_replays_exactly_and_drops_the_abandoned_steps_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    job = Resilient(model, opt, env={"FLEETCTL_RUN_STORE": "127.0.0.1:1", "FLEETCTL_RUN_SLOT": "0",
                                     "FLEETCTL_RUN_ID": "x", "FLEETCTL_RUN_ADDR": "127.0.0.1"})

    def step(i, apply=True):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i)) + 0.1 * torch.randn(4, 8)
        torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        if apply:
            opt.step()
            opt.zero_grad()

    def digest():
        return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    for i in range(3):
        step(i)
    copy = job._capture()
    for i in range(3, 6):
        step(i)
    straight = digest()
    step(6, apply=False)  # a step abandoned in its all-reduce: its gradients are still there
    job._load(copy)
    for i in range(3, 6):
        step(i)
    assert digest() == straight


# ---------------------------------------------------------------- the controller on a real store
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def store():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=5), wait_for_workers=False)


def _hello(store, slot, node):
    store.set(control.hello_key(slot), control.encode({"node": node, "address": "127.0.0.1", "port": 1}))


def _report(store, gen, slot, have, holds=None, kind="peer"):
    control.post_report(store, gen, slot, {"kind": kind, "reason": "x", "have": sorted(have),
                                           "holds": {str(r): sorted(i) for r, i in (holds or {}).items()}})


def _plan(store) -> control.Plan:
    gen = int(store.get("gen"))
    return control.Plan.parse(store.get(control.plan_key(gen)), gen)


def _started(store, clock, active=3, slots=4):
    ctl = control.Controller(store, active, slots, control.Timing(dead_after_s=5, grace_s=30), clock=clock)
    for slot in range(slots):
        _hello(store, slot, f"node{slot}")
    assert ctl.poll() is None
    return ctl


def test_plan_zero_waits_for_every_training_rank_then_names_them(store):
    clock = Clock()
    ctl = control.Controller(store, 3, 4, clock=clock)
    _hello(store, 0, "node0")
    _hello(store, 1, "node1")
    assert ctl.poll() is None and not store.check(["gen"])
    _hello(store, 2, "node2")
    ctl.poll()
    plan = _plan(store)
    assert plan.gen == 0 and plan.ranks == {0: 0, 1: 1, 2: 2} and plan.resume is None
    assert all(plan.holders[r] != s for s, r in plan.ranks.items())


def test_a_lost_rank_goes_to_the_standby_at_the_newest_common_iteration(store):
    clock = Clock()
    ctl = _started(store, clock)
    holder_of_2 = _plan(store).holders[2]
    control.post_exit(store, 2, -9)
    _report(store, 0, 0, {60, 61, 62}, {2: {60, 61, 62}} if holder_of_2 == 0 else {})
    assert ctl.poll() is None  # slot 1 has not reported yet
    _report(store, 0, 1, {61, 62, 63}, {2: {60, 61, 62}} if holder_of_2 == 1 else {})
    ctl.poll()
    plan = _plan(store)
    assert plan.gen == 1 and plan.ranks == {0: 0, 1: 1, 3: 2} and plan.resume == 62
    assert plan.lost == {2: 2} and plan.sources == {2: holder_of_2}
    assert "killed by signal 9" in plan.reason


def test_no_standby_left_ends_the_run_for_requeue(store):
    clock = Clock()
    ctl = _started(store, clock, active=3, slots=3)
    control.post_exit(store, 1, -9)
    _report(store, 0, 0, {5})
    _report(store, 0, 2, {5})
    assert ctl.poll() == "requeue"
    assert _plan(store).end == "requeue" and "0 standby left" in _plan(store).reason


def test_a_ranks_own_error_ends_the_run(store):
    clock = Clock()
    ctl = _started(store, clock)
    _report(store, 0, 1, {5}, kind="error")
    control.post_exit(store, 1, 1)
    _report(store, 0, 0, {5})
    _report(store, 0, 2, {5})
    assert ctl.poll() == "abort"
    assert "own error" in _plan(store).reason


def test_a_frozen_rank_is_lost_after_its_heartbeat_stops_and_its_launcher_told_to_kill_it(store):
    clock = Clock()
    ctl = _started(store, clock)
    for _ in range(3):
        for slot in range(4):
            store.add(control.beat_key(slot), 1)
        clock.now += 1
        assert ctl.poll() is None
    for _ in range(7):  # slot 1 stops beating
        for slot in (0, 2, 3):
            store.add(control.beat_key(slot), 1)
        clock.now += 1
        ctl.poll()
    assert store.check([control.kill_key(1)]) and 1 in ctl.gone
    assert "no heartbeat" in ctl.gone[1]


def test_a_rank_that_never_reports_while_the_others_wait_is_the_hung_one(store):
    clock = Clock()
    ctl = _started(store, clock)
    assert _plan(store).holders[1] == 2
    _report(store, 0, 0, {5}, {2: {5}})
    _report(store, 0, 2, {5}, {1: {5}})  # slot 1 alive (beating) but silent: stuck in its compute
    for _ in range(4):
        for slot in range(4):
            store.add(control.beat_key(slot), 1)
        clock.now += 10
        ctl.poll()
    assert store.check([control.kill_key(1)]) and "hung" in ctl.gone[1]
    plan = _plan(store)
    assert plan.ranks == {0: 0, 2: 2, 3: 1} and plan.resume == 5


def _progress(store, slot, rank, phase, progress_time, gen=0, iteration=10):
    store.set(control.progress_key(slot), control.encode(
        {"v": 1, "gen": gen, "rank": rank, "node": f"node{slot}", "pid": 100 + slot, "iteration": iteration,
         "time": progress_time, "progress_time": progress_time, "phase": phase, "iteration_s": 0.1,
         "compute_s": 0.05, "samples": 20}))


def _beat_all(store, ctl, clock, seconds, slots=range(4)):
    for _ in range(int(seconds)):
        for slot in slots:
            store.add(control.beat_key(slot), 1)
        clock.now += 1
        ctl.poll()


def test_a_rank_stuck_in_its_own_work_while_the_others_wait_is_the_hang_and_goes_to_the_standby(store):
    """The hang as `fleetctl job watch` judges it (3 x 0.1 s + 10 s without an iteration), from the
    progress the ranks send: the rank still computing is the culprit, killed, and its rank moves."""
    clock = Clock()
    ctl = control.Controller(store, 3, 4, control.Timing(dead_after_s=5, grace_s=90), clock=clock, wall=clock)
    for slot in range(4):
        _hello(store, slot, f"node{slot}")
    ctl.poll()
    clock.now += 1
    t = clock.now
    _progress(store, 0, 0, "collective", t)
    _progress(store, 1, 1, "compute", t)
    _progress(store, 2, 2, "collective", t)
    _beat_all(store, ctl, clock, 9)  # within 10.3 s: not yet
    assert not ctl.gone and not ctl.signals
    _beat_all(store, ctl, clock, 3)
    assert "hung" in ctl.gone[1] and "stuck in its own work" in ctl.gone[1]
    assert store.get(control.kill_key(1)) == b"hung" and not store.check([control.kill_key(0)])
    assert b"slot 1: hung" in store.get(control.trouble_key(0))  # NCCL survivors abort their collective
    _report(store, 0, 0, {9}, {2: {9}})  # the killed rank's peers leave their collective
    _report(store, 0, 2, {9}, {1: {9}})
    _beat_all(store, ctl, clock, 1, slots=(0, 2, 3))
    plan = _plan(store)
    assert plan.ranks == {0: 0, 2: 2, 3: 1} and plan.resume == 9 and "hung" in plan.reason


def test_no_hang_is_judged_while_rank_0_moves_nor_blamed_when_no_rank_stands_out(store):
    clock = Clock()
    ctl = control.Controller(store, 3, 4, control.Timing(dead_after_s=5, grace_s=300), clock=clock, wall=clock)
    for slot in range(4):
        _hello(store, slot, f"node{slot}")
    ctl.poll()
    for _ in range(20):  # training moves: rank 0's progress is fresh every second
        for slot in range(3):
            _progress(store, slot, slot, "compute", clock.now)
        _beat_all(store, ctl, clock, 1)
    assert not ctl.gone and not ctl.signals
    t = clock.now
    for slot in range(3):  # all wait in the collective (a network fault under it): nobody to blame
        _progress(store, slot, slot, "collective", t)
    _beat_all(store, ctl, clock, 40)
    assert not ctl.gone
    assert [(s.metric, s.rank) for s in ctl.signals] == [("hang", None)]
    assert ctl.signals[0].evidence["culprit_unknown"]
    _progress(store, 1, 1, "compute", t, gen=5)  # another generation's (or a forged) progress: ignored
    _beat_all(store, ctl, clock, 11)
    assert not ctl.gone
    for bad in ("x" * 5000, "not json", json.dumps([1]), json.dumps({"v": 1, "gen": 0, "rank": 1})):
        store.set(control.progress_key(1), bad)  # hostile or broken: read as no progress, never blamed
        _beat_all(store, ctl, clock, 11)
        assert not ctl.gone


class CountingStore:
    """A real TCPStore, its round trips counted."""

    def __init__(self, store):
        self.store, self.calls = store, 0

    def __getattr__(self, name):
        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls += 1
            return attr(*args, **kwargs)
        return counted


def test_a_quiet_poll_takes_the_same_few_round_trips_at_any_size(store):
    """The controller reads the done, exit and report keys only when their counters move and the
    heartbeats in one batch: a poll's round trips do not grow with the job."""
    calls = {}
    for slots in (8, 64):
        counting = CountingStore(store)
        prefix = dist.PrefixStore(f"size{slots}", store)
        counting.store = prefix
        clock = Clock()
        ctl = control.Controller(counting, slots - 1, slots, clock=clock, wall=clock)
        for slot in range(slots):
            _hello(prefix, slot, f"node{slot}")
        ctl.poll()
        for slot in range(slots):
            prefix.add(control.beat_key(slot), 1)
        clock.now += 0.5
        ctl.poll()  # looks at progress too (none sent yet)
        counting.calls = 0
        clock.now += 0.1
        ctl.poll()
        calls[slots] = counting.calls
    assert calls[8] == calls[64] <= 5, calls


def test_training_done_on_every_rank_ends_the_run(store):
    clock = Clock()
    ctl = _started(store, clock)
    for slot in range(3):
        control.post_done(store, slot)
        control.post_exit(store, slot, 0)  # done, then ended: no loss
    assert ctl.poll() == "done"
    assert _plan(store).end == "done" and not ctl.gone


def test_a_rank_that_left_on_request_goes_to_the_standby_at_its_boundary(store):
    clock = Clock()
    ctl = _started(store, clock)
    holder_of_1 = _plan(store).holders[1]
    _report(store, 0, 1, {40, 41, 42}, kind="migrate")
    control.post_exit(store, 1, 0)
    for slot in (0, 2):
        _report(store, 0, slot, {41, 42}, {1: {40, 41, 42}} if slot == holder_of_1 else {})
    ctl.poll()
    plan = _plan(store)
    assert plan.ranks == {0: 0, 2: 2, 3: 1} and plan.resume == 42 and "on request" in plan.reason


def test_migrate_refuses_a_node_without_ranks_and_a_job_without_standbys(store):
    from fleetctl.errors import UsageError
    from fleetctl.recovery.migrate import migrate

    clock = Clock()
    _started(store, clock, active=3, slots=4)
    store.set("slots", "4")
    with pytest.raises(UsageError, match="no training rank on node9"):
        migrate(store, "node9", "test", timeout_s=1)
    control.post_exit(store, 3, 0)  # the standby is gone
    with pytest.raises(RecoveryError, match="1 rank\\(s\\) on node1 and 0 standby left"):
        migrate(store, "node1", "test", timeout_s=1)
    assert not store.check([control.leave_key(1)])  # nothing was asked of the rank


def test_host_copies_do_not_change_with_the_state_and_fall_back_without_pinned_memory():
    """hostcopy.HostCopier: a replica's copy is the state when copied (later steps write the
    originals in place); containers are rebuilt, plain values kept. GPU tensors would go to pinned
    buffers (benchmarks/device/ measures that): on a machine without CUDA, asking for one is
    refused once and every copy after is pageable."""
    import torch

    from fleetctl.recovery.hostcopy import HostCopier

    host = HostCopier()
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "optim": [torch.ones(2), (3, "sgd")],
             "step": 7}
    copied = host.copy(state)
    state["model"]["w"].add_(1)
    state["optim"][0].mul_(5)
    assert torch.equal(copied["model"]["w"], torch.arange(6.0).reshape(2, 3))
    assert torch.equal(copied["optim"][0], torch.ones(2)) and copied["optim"][1] == (3, "sgd")
    assert copied["step"] == 7 and copied["model"] is not state["model"]
    host.give_back(copied)  # pageable copies: nothing to reuse
    assert host._free == {}
    if not torch.cuda.is_available():
        assert host._buffer(torch.ones(2)) is None and host.pinned is False


# ---------------------------------------------------------------- replacement standbys (--replenish, --join)
def test_a_standby_that_joined_later_takes_the_next_lost_rank(store):
    clock = Clock()
    ctl = _started(store, clock, active=3, slots=3)  # no standby of its own
    store.set("slots", "3")
    slot = control.join_slot(store)
    assert slot == 3
    _hello(store, slot, "node9")
    clock.now += control.JOIN_LOOK_EVERY_S
    assert ctl.poll() is None and ctl.slots == 4 and 3 in ctl.hellos
    from fleetctl.recovery.migrate import hellos

    assert sorted(hellos(store)) == [0, 1, 2, 3]  # `fleetctl migrate` sees it too
    holder_of_1 = _plan(store).holders[1]
    control.post_exit(store, 1, -9)
    for s in (0, 2):
        _report(store, 0, s, {7, 8}, {1: {7, 8}} if s == holder_of_1 else {})
    ctl.poll()
    plan = _plan(store)
    assert plan.gen == 1 and plan.ranks == {0: 0, 2: 2, 3: 1} and plan.resume == 8
    assert ctl.awaited_slots() == [0, 1, 2, 3]


def test_joined_standbys_are_bounded_and_one_that_never_started_is_not_awaited(store):
    clock = Clock()
    ctl = _started(store, clock, active=3, slots=3)
    store.set("slots", "3")
    store.add(control.JOINED, control.JOINED_MAX - 1)
    assert control.join_slot(store) == 3 + control.JOINED_MAX - 1
    with pytest.raises(RecoveryError, match=f"{control.JOINED_MAX} standbys joined this run already"):
        control.join_slot(store)
    clock.now += control.JOIN_LOOK_EVERY_S
    ctl.poll()
    assert ctl.slots == 3 + control.JOINED_MAX  # never more than the bound, whatever the counter says
    assert ctl.awaited_slots() == [0, 1, 2]  # none said hello: a queued job is cancelled, not awaited


class SubmittingBackend:
    """Records what the replenisher would give sbatch (the real submission: tests/integration/
    test_run_lab.py, under the lab's Slurm)."""

    def __init__(self, fail=False):
        self.scripts, self.args, self.cancelled, self.fail = [], [], [], fail

    def submit(self, script, args):
        from fleetctl.errors import SlurmError

        if self.fail:
            raise SlurmError("sbatch: error: invalid partition specified: gpu")
        self.scripts.append(open(script).read())
        self.args.append(args)
        return str(100 + len(self.scripts))

    def cancel(self, ids):
        self.cancelled.extend(ids)


def _wait_threads(replenisher):
    for thread in list(replenisher._threads):
        thread.join(10)


def test_one_replacement_is_submitted_per_standby_used_within_the_budget():
    import shlex

    from fleetctl.recovery.replenish import Replenisher

    backend = SubmittingBackend()
    command = ["python3", "train.py", "--name", "a b; rm -rf / $(reboot)", "it's"]
    rep = Replenisher(3, ["-p", "gpu"], "10.0.0.1:29400", command, "77", 60.0, backend=backend)
    rep.after(control.Plan(0, 3, {0: 0, 1: 1, 2: 2}, {}))  # plan 0 used nothing
    rep.after(control.Plan(1, 3, {0: 0, 3: 1, 2: 2}, {}, 5, lost={1: 1}))
    rep.after(control.Plan(1, 3, {0: 0, 3: 1, 2: 2}, {}, 5, lost={1: 1}))  # the same plan again: nothing
    _wait_threads(rep)
    assert len(backend.scripts) == 1
    assert backend.args[0] == ["-N1", "-n1", "--job-name=77.standby", "-p", "gpu"]
    script = backend.scripts[0]
    assert script.startswith("#!/bin/sh\n")
    words = shlex.split(script.splitlines()[-1])
    assert words[0] == "exec" and words[2:4] == ["-m", "fleetctl"] and words[4:9] == ["run", "--join", "10.0.0.1:29400", "--collective-timeout", "60"]
    assert words[-len(command):] == command  # each word as given: nothing a shell would expand
    rep.after(control.Plan(2, 3, {0: 0, 4: 1, 5: 2}, {}, 9, lost={1: 3, 2: 2}))  # two used, one left in budget
    _wait_threads(rep)
    rep.after(control.Plan(3, 3, {0: 0, 6: 1, 5: 2}, {}, 9, lost={1: 4}))
    rep.after(control.Plan(4, 3, {}, {}, end="requeue", lost={1: 6}))
    _wait_threads(rep)
    assert len(backend.scripts) == 3
    rep.cancel()
    assert backend.cancelled == ["101", "102", "103"]
    assert rep.to_dict() == {"budget": 3, "submitted": ["101", "102", "103"], "failures": []}


def test_a_refused_submission_is_said_and_training_is_not_touched():
    from fleetctl.recovery.replenish import Replenisher

    rep = Replenisher(2, ["-p", "gpu"], "h:1", ["true"], "", 60.0, backend=SubmittingBackend(fail=True))
    rep.after(control.Plan(1, 2, {0: 0, 2: 1}, {}, 5, lost={1: 1}))
    _wait_threads(rep)
    rep.cancel()
    assert rep.to_dict()["failures"] == ["sbatch: error: invalid partition specified: gpu"]
    assert rep.to_dict()["submitted"] == []


def test_a_standby_whose_hello_comes_after_a_loss_still_takes_the_next_one(store):
    """A lost slot has said hello and is gone: counted once, or a late standby's hello goes unread."""
    clock = Clock()
    ctl = control.Controller(store, 3, 5, control.Timing(dead_after_s=5, grace_s=30), clock=clock)
    for slot in range(4):  # slot 4, the second standby, still starting
        _hello(store, slot, f"node{slot}")
    ctl.poll()

    def lose(slot, its):
        holder = _plan(store).holders[_plan(store).ranks[slot]]
        control.post_exit(store, slot, -9)
        gen = _plan(store).gen
        for s in _plan(store).ranks:
            if s != slot:
                _report(store, gen, s, its, {_plan(store).ranks[slot]: its} if s == holder else {})
        ctl.poll()

    lose(1, {4})
    assert _plan(store).ranks == {0: 0, 2: 2, 3: 1}
    _hello(store, 4, "node4")
    ctl.poll()
    lose(2, {9})
    assert _plan(store).ranks == {0: 0, 3: 1, 4: 2} and not _plan(store).end


def test_a_standby_that_joins_just_before_a_loss_is_counted_at_once(store):
    clock = Clock()
    ctl = _started(store, clock, active=3, slots=3)
    store.set("slots", "3")
    clock.now += control.JOIN_LOOK_EVERY_S
    ctl.poll()  # looked: nobody joined
    _hello(store, control.join_slot(store), "node9")
    control.post_exit(store, 1, -9)  # within the same second: the controller looks again before giving up
    holder_of_1 = _plan(store).holders[1]
    for s in (0, 2):
        _report(store, 0, s, {4}, {1: {4}} if s == holder_of_1 else {})
    ctl.poll()
    assert _plan(store).ranks == {0: 0, 2: 2, 3: 1}


def test_a_job_that_is_ending_ends_the_run_and_its_dying_ranks_are_no_losses(store):
    clock = Clock()
    ctl = _started(store, clock)
    assert ctl.stop("the job is ending (SIGTERM to task 0)") == "requeue"
    control.post_exit(store, 1, -15)
    assert ctl.poll() == "requeue"
    plan = _plan(store)
    assert plan.end == "requeue" and plan.lost == {} and "SIGTERM" in plan.reason
    assert ctl.stop("again") == "requeue" and _plan(store).gen == plan.gen  # said once


def test_a_rank_ended_by_sigterm_is_lost_only_when_task_0_was_not_told_to_end_too(store):
    clock = Clock()
    ctl = _started(store, clock)
    control.post_exit(store, 1, -15)
    assert ctl.poll() is None and 1 not in ctl.gone  # the job may be ending: task 0's SIGTERM may follow
    clock.now += control.TERM_GRACE_S + 0.1
    ctl.poll()
    assert "killed by signal 15; the job itself went on" in ctl.gone[1]
