"""The batch period lens advises for a coordinator's number of agents (docs/scale.md, "Sizing a
coordinator"): one core kept up with 2,048 batches a second, not with 5,120."""

from __future__ import annotations

from fleetctl.lens.coordinator import ADVISED_BATCHES_PER_S, batch_period_for


def test_the_advised_period_keeps_the_batch_rate_under_what_one_core_carried():
    assert batch_period_for(8) == 0.25  # the lab's default stays
    assert batch_period_for(512) == 0.25  # 2,048 a second: the hour at 512 hosts kept up
    assert batch_period_for(1280) == 1.0  # 0.5 s would be 2,560 a second
    for agents in (1, 100, 525, 526, 1050, 1051, 1280, 4000, 12_500, 100_000):
        p = batch_period_for(agents)
        assert p in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # divides the 1 s window, or it divides p
        assert agents / p <= ADVISED_BATCHES_PER_S or p == 8.0
        assert p == 0.25 or agents / (p / 2) > ADVISED_BATCHES_PER_S  # the shortest such
