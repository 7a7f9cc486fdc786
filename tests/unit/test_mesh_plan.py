"""The probe plan: full mesh while it fits the per-host budget, a covering design beyond, every host
within its budget, `--rate` above it flagged; the loss floor; Benjamini-Hochberg significance."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fleetctl.analysis.integrity import budget_finding
from fleetctl.analysis.significance import benjamini_hochberg, significant
from fleetctl.config.site import parse_site
from fleetctl.mesh.pairs import _Coverage
from fleetctl.mesh.plan import element_probes, host_ends, loss_floor, plan_probes
from fleetctl.model.fabric import Topology

ROOT = Path(__file__).resolve().parents[2]


def rail_topo(sus: int, nodes_per_su: int, rails: int = 8, spines: int = 4) -> Topology:
    text = subprocess.run([sys.executable, str(ROOT / "site_configs" / "gen_rail.py"), "--sus",
                           str(sus), "--nodes-per-su", str(nodes_per_su), "--rails", str(rails),
                           "--spines", str(spines)], capture_output=True, text=True,
                          check=True).stdout
    return Topology.from_site(parse_site(text))


@pytest.fixture(scope="module")
def rail128():
    return rail_topo(2, 64)  # 128 hosts x 8 NICs: 1,024 NICs


def test_small_fabric_is_a_full_mesh_at_the_capped_rate():
    topo = rail_topo(1, 4)  # 4 hosts x 8 NICs: 224 pairs, 112 ends per host
    plan = plan_probes(topo, budget_pps=20_000, duration=10)
    assert plan.design == "full-mesh" and len(plan.pairs) == 32 * 24
    assert plan.rate == 50.0 and plan.max_host_pps == 50.0 * 2 * 8 * 24


def test_full_mesh_rate_follows_the_budget_then_covering_takes_over():
    topo = rail_topo(1, 4)
    plan = plan_probes(topo, budget_pps=4000, duration=10)
    assert plan.design == "full-mesh" and plan.rate == pytest.approx(4000 / 384)
    assert plan.max_host_pps == pytest.approx(4000) and not plan.over_budget
    small = plan_probes(topo, budget_pps=1000, duration=10)  # full mesh would be 2.6/s per pair
    assert small.design == "covering" and len(small.pairs) < len(plan.pairs)
    assert small.max_host_pps <= 1000 * 1.001


def test_rate_override_above_the_budget_is_flagged():
    topo = rail_topo(1, 4)
    plan = plan_probes(topo, budget_pps=2000, duration=10, rate=500)
    assert plan.rate == 500 and plan.rate_source == "override" and plan.over_budget
    f = budget_finding(plan.to_dict())
    assert f["check"] == "probe.budget" and f["severity"] == "warning"
    assert budget_finding(plan_probes(topo, budget_pps=2000, duration=10).to_dict()) is None


def test_rail_plan_covers_every_link_and_keeps_each_host_in_budget(rail128):
    k = 3
    plan = plan_probes(rail128, budget_pps=2000, k=k, duration=10)
    assert plan.design == "covering"
    cov = _Coverage(rail128)
    counts, need = cov.sources(plan.pairs, k)
    assert np.all(counts >= need) and need.min() >= 1
    ends = host_ends(plan.pairs, rail128.nic_host)
    assert max(ends.values()) * plan.rate <= 2000 * 1.001
    assert set(ends) == set(rail128.nic_host)  # every host probes or is probed
    # every NIC sends, and is probed by k sources (its cable's both directions covered)
    srcs = {}
    for a, b in plan.pairs:
        srcs.setdefault(b, set()).add(a)
    assert {a for a, _ in plan.pairs} == set(cov.nics)
    assert min(len(srcs.get(n, ())) for n in cov.nics) >= k
    probes = element_probes(rail128, plan)
    assert min(probes.values()) > 0  # every link direction gets probes


def test_a_subset_gets_its_own_covering_design_not_the_fleets_filtered(rail128):
    """lens over part of the site (a shard: one scalable unit of two): the design is made over
    the subset's NICs; filtering the fleet's design kept about half its pairs, and its sources
    per link direction fell below k."""
    k = 3
    unit = set(range(len(rail128.nics) // 2))  # the first unit's hosts' NICs
    assert {rail128.nic_host[i] for i in unit}.isdisjoint(
        {rail128.nic_host[i] for i in range(len(rail128.nics)) if i not in unit})
    plan = plan_probes(rail128, unit, budget_pps=2000, k=k, duration=10)
    assert plan.design == "covering"
    assert all(a in unit and b in unit for a, b in plan.pairs)
    cov = _Coverage(rail128, unit)
    counts, need = cov.sources(plan.pairs, k)
    assert np.all(counts >= need) and need.max() >= k
    def fewest_sources(pairs):  # of any NIC of the unit: its cable's coverage
        srcs: dict[int, set[int]] = {}
        for a, b in pairs:
            srcs.setdefault(b, set()).add(a)
        return min(len(srcs.get(n, ())) for n in unit)

    assert fewest_sources(plan.pairs) >= k
    whole = plan_probes(rail128, budget_pps=2000, k=k, duration=10)
    filtered = [(a, b) for a, b in whole.pairs if a in unit and b in unit]
    assert fewest_sources(filtered) < k  # what the fleet's design, filtered, left a unit


def test_loss_floor_is_the_rule_of_three():
    assert loss_floor(3000)[()] == pytest.approx(-np.log(0.05) / 3000)
    assert abs(loss_floor(1000)[()] - 0.003) < 1e-4 and np.isinf(loss_floor(0)[()])
    assert loss_floor(100, confidence=0.99)[()] == pytest.approx(np.log(100) / 100)


def test_benjamini_hochberg_q_values():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 -> 0.02, 0.02, 0.04, 0.04 (monotone from the top)
    assert benjamini_hochberg(p, 4).tolist() == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert benjamini_hochberg(np.array([0.001]), 100)[0] == pytest.approx(0.1)


def finding(lost, sent, bg_lost=0, bg_sent=100_000):
    return {"element": {"type": "link", "id": "x"}, "metric": "loss", "category": "network",
            "evidence": {"probes_through": sent, "lost_through": lost,
                         "probes_clean_outside": bg_sent, "lost_clean_outside": bg_lost}}


def test_significance_keeps_a_real_loss_and_drops_a_lucky_few():
    real, lucky = finding(50, 5000), finding(2, 5000, bg_lost=50)
    kept, dropped = significant([real, lucky], tests=400)
    assert kept == [real] and dropped == [lucky]
    assert real["significance"]["confidence_pct"] > 99 and lucky["significance"]["q_value"] > 0.01
