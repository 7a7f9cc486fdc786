"""Path discovery, collector side: hop addresses -> site elements, candidate rows where a trace is
incomplete, and the dead-link checks (switch probes, coverage). The site is the lab's own site
file generator's output (real addresses); the tracer itself runs in the lab tests."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import numpy as np
import pytest

from fleetctl.config.site import parse_site
from fleetctl.lab.sitefile import site_document, to_toml
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.mesh import discovery
from fleetctl.mesh.pairs import select_pairs
from fleetctl.mesh.trace_agent import parse_icmp
from fleetctl.model.fabric import Topology


@pytest.fixture(scope="module")
def lab_site():
    layout = build_layout(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                                    clock_skew=False, slurm=False, ssh=False))
    doc = site_document(layout, Path("/nonexistent-lab"), slurm_conf="", ssh={}, cpus=2)
    site = parse_site(to_toml(doc))
    return site, Topology.from_site(site)


def addr(site, link_id, end):
    link = site.links[link_id]
    return link.a.address if end == "a" else link.b.address


def test_port_hops_map_to_link_directions(lab_site):
    site, topo = lab_site
    hops = [addr(site, "node1:eth0--leaf1", "b"), addr(site, "leaf1--spine2", "b"),
            addr(site, "leaf2--spine2", "a")]
    path = discovery.hops_to_path(topo, discovery.hop_table(site), "node1:eth0", "node3:eth1", hops)
    labels = [topo.elements[e].label for e in path]
    assert labels == ["node1:eth0", "node1:eth0->leaf1", "leaf1", "leaf1->spine2", "spine2",
                      "spine2->leaf2", "leaf2", "leaf2->node3:eth1", "node3:eth1"]


def test_loopback_hops_map_through_the_only_link(lab_site):
    site, topo = lab_site
    hops = [site.switches["leaf1"].address, site.switches["spine1"].address,
            site.switches["leaf2"].address]
    path = discovery.hops_to_path(topo, discovery.hop_table(site), "node2:eth1", "node4:eth0", hops)
    assert [topo.elements[e].label for e in path][3] == "leaf1->spine1"


@pytest.mark.parametrize("hops", [
    [],  # nothing answered
    ["10.252.1.1", None, "10.253.2.9"],  # a hop missing
    ["10.252.1.1", "10.9.9.9", "10.253.2.9"],  # an address the site file does not know
    ["10.252.1.1", "10.253.2.10", "10.253.2.9"],  # spine2's port toward leaf2 right after leaf1
])
def test_incomplete_or_inconsistent_traces_are_refused(lab_site, hops):
    site, topo = lab_site
    assert discovery.hops_to_path(topo, discovery.hop_table(site), "node1:eth0", "node3:eth0",
                                  hops) is None


def traces_for(site, topo, plan, spine_of=lambda flow: "spine1"):
    """What the tracer reports when flow f (and its echo) crosses spine_of(f)."""
    out = {}
    nics = discovery.nic_table(site, topo)
    for f in plan.flows:
        s, d = topo.nics[f["src_nic"]], topo.nics[f["dst_nic"]]
        for key, a, b in ((f"f{f['flow']}", s, d), (f"r{f['flow']}", d, s)):
            la = discovery.switch_name(topo, a)
            lb = discovery.switch_name(topo, b)
            hops = [addr(site, f"{a}--{la}", "b")]
            if la != lb:
                sp = spine_of(int(f["flow"]))
                hops += [addr(site, f"{la}--{sp}", "b"), addr(site, f"{lb}--{sp}", "a")]
            out.setdefault(nics[a].node, {"paths": {}, "arrived": []})["paths"][key] = hops
    return out


def test_resolve_dedupes_paths_and_falls_back_to_candidate_rows(lab_site):
    site, topo = lab_site
    pairs = select_pairs(topo).pairs
    plan = discovery.FlowPlan(pairs, [61000 + j for j in range(4)], 61100)
    traces = traces_for(site, topo, plan, lambda f: "spine1" if f % 2 else "spine2")
    first = plan.flows[0]
    traces["node1"]["paths"][f"f{first['flow']}"] = ["10.252.1.1", None]
    disc = discovery.resolve(topo, site, plan, traces)
    assert disc.traced_flows == 2 * len(plan.flows) - 1
    p = disc.paths
    assert not p.traced[disc.flows[0]["fwd_path"]]  # candidate row, weights < 1 on spine links
    assert p.traced[disc.flows[0]["rev_path"]]
    # 8 NICs: each directed pair on different leaves has 2 spine paths, same leaf 1 -> far fewer
    # path rows than flow directions
    assert len(p) < 2 * len(plan.flows) / 3
    assert discovery.dead_link_findings(topo, disc) == []


def test_coverage_finds_a_withdrawn_link_direction(lab_site):
    site, topo = lab_site
    plan = discovery.FlowPlan(select_pairs(topo).pairs, [61000 + j for j in range(8)], 61100)
    disc = discovery.resolve(topo, site, plan, traces_for(site, topo, plan))  # spine2 unused
    found = {(f["element"]["id"], f["element"]["direction"]) for f in
             discovery.dead_link_findings(topo, disc)}
    assert found == {("leaf1--spine2", "both"), ("leaf2--spine2", "both")}


def switch_results(topo, site, dead_from=None, dead_switch=None):
    out = {}
    for key, info, sw, _lid in discovery.switch_probes(topo, discovery.nic_table(site, topo),
                                                         site):
        own = discovery.switch_name(topo, topo.nics[info.index])
        out[key] = not (sw == dead_switch or (own, sw) == dead_from)
    return out


def test_switch_probes_name_the_dead_uplink_and_a_dead_switch(lab_site):
    site, topo = lab_site
    plan = discovery.FlowPlan(select_pairs(topo).pairs, [61000 + j for j in range(8)], 61100)
    disc = discovery.resolve(topo, site, plan, traces_for(site, topo, plan))
    disc.switch_results = switch_results(topo, site, dead_from=("leaf1", "spine2"))
    (f,) = discovery.dead_link_findings(topo, disc)
    assert f["element"] == {"type": "link", "id": "leaf1--spine2", "direction": "both"}
    assert f["metric"] == "down" and f["evidence"]["check"] == "switch-probe"
    disc.switch_results = switch_results(topo, site, dead_switch="spine2")
    (f,) = discovery.dead_link_findings(topo, disc)
    assert f["element"] == {"type": "switch", "id": "spine2"}


def test_parse_icmp_time_exceeded():
    inner = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 48, 1, 0, 1, socket.IPPROTO_UDP, 0,
                        socket.inet_aton("10.252.1.2"), socket.inet_aton("10.252.2.6")) + \
        struct.pack("!HHHH", 61003, 61100, 28, 0)
    outer = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(inner), 0, 0, 64,
                        socket.IPPROTO_ICMP, 0, socket.inet_aton("10.253.1.10"),
                        socket.inet_aton("10.252.1.2")) + struct.pack("!BBHI", 11, 0, 0, 0) + inner
    assert parse_icmp(outer) == ("10.253.1.10", 11, "10.252.1.2", "10.252.2.6", 61003, 61100)
    assert parse_icmp(outer[:30]) is None
    assert parse_icmp(np.zeros(10, dtype=np.uint8).tobytes()) is None


def test_ecmp_coverage_of_the_source_ports(lab_site):
    site, topo = lab_site
    plan = discovery.FlowPlan(select_pairs(topo).pairs, [61000 + j for j in range(4)], 61100)
    both = discovery.resolve(topo, site, plan,
                             traces_for(site, topo, plan, lambda f: f"spine{1 + f % 2}"))
    assert discovery.ecmp_coverage(topo, both) == {
        "ecmp_pairs": 48, "ecmp_pairs_all_paths_seen": 1.0, "ecmp_paths_seen_mean_share": 1.0}
    one = discovery.resolve(topo, site, plan, traces_for(site, topo, plan))  # spine1 only
    cov = discovery.ecmp_coverage(topo, one)
    # 16 same-leaf pairs have one path; the 32 across leaves see 1 of 2
    assert cov["ecmp_pairs_all_paths_seen"] == pytest.approx(16 / 48, abs=1e-4)
    assert cov["ecmp_paths_seen_mean_share"] == pytest.approx((16 + 32 * 0.5) / 48, abs=1e-4)
