"""recovery.cadence: how often replicas are taken, fixed or agreed from their cost."""

from __future__ import annotations

import math

import pytest

from fleetctl.errors import RecoveryError
from fleetctl.recovery.cadence import AGREE_EVERY, FIRST_AGREE, Cadence


def _measured(cadence: Cadence, replica_s: float, iteration_s: float) -> Cadence:
    for _ in range(50):
        cadence.observe_replica(replica_s)
    cadence.iteration_s = iteration_s
    return cadence


def test_the_iteration_time_leaves_out_the_replicas_own_blocking():
    cadence = Cadence(None)
    cadence.restart(0)
    now = 0.0
    for _ in range(20):  # 10 ms of work, then a replica that blocks 90 ms: K = 1 looks like 100 ms
        cadence.observe_step(now)
        cadence.observe_replica(0.090)
        now += 0.100
    assert abs(cadence.iteration_s - 0.010) < 1e-9
    assert cadence.wanted() == 171  # 0.090 * 0.95 / (0.05 * 0.010)


def test_a_fixed_k_replicates_on_the_same_iterations_as_before():
    cadence = Cadence(4)
    cadence.restart(17)  # a new generation keeps a fixed K's global alignment
    assert [i for i in range(20) if cadence.due(i)] == [3, 7, 11, 15, 19]
    assert not cadence.agreement_due(AGREE_EVERY + 16)
    assert _measured(cadence, 1.0, 0.001).wanted() == 4


def test_auto_takes_the_fewest_iterations_that_keep_the_loop_within_its_budget():
    cheap = _measured(Cadence(None), 0.001, 0.1)  # 1 % of an iteration: every iteration
    assert cheap.wanted() == 1
    dear = _measured(Cadence(None), 0.060, 0.5)  # 12 % at K = 1: K = 3 is 4 %
    assert dear.wanted() == 3
    assert _measured(Cadence(None, budget=0.01), 0.060, 0.5).wanted() == 12
    assert _measured(Cadence(None), 0.025, 0.5).wanted() == 1  # exactly the budget: K = 1


def test_given_the_mtbf_auto_takes_youngs_interval_when_it_is_longer():
    cadence = _measured(Cadence(None, mtbf_s=3600.0), 0.060, 0.5)
    young = math.sqrt(2 * 0.060 * 3600) / 0.5  # 41.6 iterations
    assert cadence.wanted() == round(young)
    assert _measured(Cadence(None, mtbf_s=1.0), 0.060, 0.5).wanted() == 3  # never over the budget


def test_every_rank_agrees_at_the_same_iterations_and_a_generation_starts_at_one():
    ranks = [Cadence(None), Cadence(None)]
    for rank in ranks:
        rank.restart(100)  # the generation's replica of iteration 99 taken on entry
    due = []
    for it in range(100, 100 + 2 * AGREE_EVERY + 1):
        agreed = [r.agreement_due(it) for r in ranks]
        assert agreed[0] == agreed[1]
        if agreed[0]:
            k = max(5, 2)  # the all-reduce (MAX) of the two ranks' wishes
            for r in ranks:
                r.adopt(k, it)
        due.append([r.due(it) for r in ranks])
    assert all(a == b for a, b in due)
    first = 99 + FIRST_AGREE  # K = 1 until then: the first replicas measure the cost
    agreements = [it for it in range(100, 200) if ranks[0].agreement_due(it)]
    assert agreements == [first + n * AGREE_EVERY for n in range(4)]
    assert [it for it, (d, _) in zip(range(100, 200), due) if d][:FIRST_AGREE + 2] == \
        list(range(100, first + 1)) + [first + 5, first + 10]
    ranks[0].restart(300)
    assert ranks[0].k == 1 and ranks[0].due(300) and ranks[0].due(301)


def test_a_later_generation_agrees_at_its_first_iteration_on_the_survivors_measurements():
    """After a fault the survivors know the cost already: K is agreed at the generation's first
    iteration (a new standby asks for 1, the survivors' wish wins), then again FIRST_AGREE in and
    every AGREE_EVERY as in the first generation; the first generation still measures first."""
    survivor = _measured(Cadence(None), 0.060, 0.5)  # wants K = 3
    standby = Cadence(None)
    for rank in (survivor, standby):
        rank.restart(500, gen=2)
    assert [it for it in range(500, 600) if survivor.agreement_due(it)] == \
        [500, 499 + FIRST_AGREE] + [499 + FIRST_AGREE + n * AGREE_EVERY for n in range(1, 4)]
    assert [standby.agreement_due(it) for it in range(500, 600)] == \
        [survivor.agreement_due(it) for it in range(500, 600)]
    k = max(survivor.wanted(), standby.wanted())
    assert (standby.wanted(), k) == (1, 3)
    for rank in (survivor, standby):
        rank.adopt(k, 500)
    assert [it for it in range(500, 510) if survivor.due(it)] == [500, 503, 506, 509]
    assert [it for it in range(500, 510) if standby.due(it)] == [500, 503, 506, 509]
    first = Cadence(None)
    first.restart(0, gen=0)
    assert [it for it in range(0, 10) if first.agreement_due(it)] == [FIRST_AGREE - 1]


def test_resilient_refuses_a_bad_cadence_by_name(monkeypatch):
    torch = pytest.importorskip("torch")
    from fleetctl.recovery.resilient import Resilient

    env = {"FLEETCTL_RUN_STORE": "127.0.0.1:1", "FLEETCTL_RUN_SLOT": "0", "FLEETCTL_RUN_ID": "x"}
    model = torch.nn.Linear(2, 2)
    for kwargs, message in [({"every": "often"}, "every must be a positive integer or 'auto'"),
                            ({"every": "auto", "replica_budget": 2.0}, "replica_budget must be a fraction"),
                            ({"every": "auto", "mtbf_s": 0}, "mtbf_s must be seconds")]:
        with pytest.raises(RecoveryError, match=message):
            Resilient(model, env=env, **kwargs)
