"""Pair selection: full mesh when small, covering design with k distinct sources when large.

Coverage is checked independently of the design's distance test: through the ECMP DAG walk of
Topology.expected_row (every link direction a pair can cross with non-zero probability)."""

from collections import defaultdict

import pytest

from fleetctl.errors import UsageError
from fleetctl.mesh.pairs import select_pairs
from tests.support.fabrics import fat_tree, leaf_spine


def sources_per_link(topo, pairs):
    out = defaultdict(set)
    for a, b in pairs:
        elems, w = topo.expected_row(topo.nics[a], topo.nics[b])
        for e, x in zip(elems, w):
            if x > 0 and topo.elements[e].type == "link":
                out[e].add(a)
    return out


def test_small_cluster_gets_full_mesh():
    t = leaf_spine(4, 2, 2, 2)  # the lab's shape: 8 hosts x 2 NICs
    plan = select_pairs(t, k=3)
    assert plan.design == "full-mesh"
    assert len(plan.pairs) == plan.full_mesh_pairs == 16 * 14  # no pair within one host
    assert all(t.nic_host[a] != t.nic_host[b] for a, b in plan.pairs)


@pytest.mark.parametrize("k", [2, 3])
def test_covering_design_reaches_k_distinct_sources(k):
    t = fat_tree(8)  # 128 NICs: above the full-mesh limit
    plan = select_pairs(t, k=k)
    assert plan.design == "covering" and not plan.short
    assert len(plan.pairs) < plan.full_mesh_pairs / 10
    cover = sources_per_link(t, plan.pairs)
    for e, el in enumerate(t.elements):
        if el.type != "link":
            continue
        a, b = el.direction.split("->")
        if a in t.switch_tier and b in t.switch_tier:
            assert len(cover[e]) >= k, el.direction
        elif a in t.switch_tier:  # switch -> NIC: probed by k distinct sources
            assert len(cover[e]) >= k, el.direction
        else:  # NIC -> switch: only the NIC itself can send over it
            assert len(cover[e]) == 1, el.direction


def test_repair_tops_up_a_poor_base_plan():
    t = fat_tree(4)
    plan = select_pairs(t, k=2, full_mesh_max=0, base=[(0, 15)])
    assert (0, 15) in plan.pairs and not plan.short and plan.min_sources >= 2
    cover = sources_per_link(t, plan.pairs)
    switch_links = [e for e, el in enumerate(t.elements) if el.type == "link"
                    and all(x in t.switch_tier for x in el.direction.split("->"))]
    assert all(len(cover[e]) >= 2 for e in switch_links)


def test_k_must_be_positive():
    with pytest.raises(UsageError, match="k must be"):
        select_pairs(leaf_spine(2, 2, 1, 1), k=0)
