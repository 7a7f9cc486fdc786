"""When a lens agent surely answered probes (fleetctl.lens.agents.AgentState): the windows it did
not cover are set aside, so its own start-up and end are never taken for a cable."""

from __future__ import annotations

from fleetctl.lens.agents import AgentState


def test_a_late_start_covers_only_from_the_agents_first_window():
    """Asked to start at 100 s, the agent ran only from 102.5 s (sshd throttled the handshake,
    as on the 64-host lab): probes sent to it before then were lost to fleetctl, not the fabric."""
    st = AgentState("node1")
    st.began(100.0, now=100.0)
    assert not st.covered(100.2, 101.0)  # nothing before its first batch
    st.batch(104.0, [[int(102.5e9), 1.0]])
    assert not st.covered(100.2, 101.5) and not st.covered(102.0, 103.0)
    assert st.covered(102.7, 103.9)
    st.batch(105.0, [[int(103.5e9), 1.0]])
    assert st.covered(102.7, 104.9) and not st.covered(102.7, 105.0)


def test_a_batch_without_health_covers_from_its_arrival():
    st = AgentState("node1")
    st.began(100.0, now=100.0)
    st.batch(101.0, [])
    st.batch(103.0, [])
    assert not st.covered(100.5, 101.0) and st.covered(101.2, 102.9)


def test_an_ended_agent_is_trusted_until_one_window_before_its_last_batch():
    st = AgentState("node1")
    st.began(100.0, now=100.0)
    st.batch(101.1, [[int(100.0e9), 1.0]])
    st.batch(110.0, [[int(109.0e9), 1.0]])
    st.ended()
    assert st.covered(100.2, 108.9) and not st.covered(100.2, 109.5)
    # the next incarnation: the gap between them is covered by neither
    st.began(111.0, now=111.0)
    st.batch(113.0, [[int(112.0e9), 1.0]])
    assert not st.covered(108.0, 112.5) and st.covered(112.2, 112.9)


def test_an_agent_that_ends_before_any_batch_covers_nothing():
    st = AgentState("node1")
    st.began(100.0, now=100.0)
    st.ended()
    assert list(st.intervals) == [] and not st.covered(100.0, 100.1)


def test_a_hostile_health_row_falls_back_to_the_arrival():
    st = AgentState("node1")
    st.began(100.0, now=100.0)
    st.batch(104.0, [["x", 1.0]])
    assert not st.covered(100.2, 103.5)
    st.batch(106.0, [[-5, 1.0]])
    assert st.covered(104.2, 105.9)
