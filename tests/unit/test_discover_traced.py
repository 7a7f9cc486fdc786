"""The fabric from TTL-traced hop lists (fleetctl.discover.traced): switches grouped from the
addresses they answer from, tiers, host and switch cables, with ECMP over several spines,
unanswered hops and a switch answering from several addresses; and the lab's own fabric rebuilt
from the hop lists its routers give (icmp_errors_use_inbound_ifaddr), up to switch names."""

from __future__ import annotations

import itertools

from fleetctl.discover.fabric import FabricSpec, LinkSpec, assign_ids, assign_tiers
from fleetctl.discover.traced import Trace, infer, merge, peer
from fleetctl.lab.topology import LabParams, build_layout

# Two leaves, two spines, /30 everywhere (the lab's addressing, written out):
# node1:eth0 10.0.1.2 -> leaf A 10.0.1.1; node2:eth0 10.0.2.2 -> leaf B 10.0.2.1
# A-S1 10.1.0.1/10.1.0.2  A-S2 10.1.0.5/10.1.0.6  B-S1 10.1.0.9/10.1.0.10  B-S2 10.1.0.13/10.1.0.14
NICS = {"node1:eth0": ("10.0.1.2", 30), "node2:eth0": ("10.0.2.2", 30)}
UP_S1 = ["10.0.1.1", "10.1.0.2", "10.1.0.9"]     # node1 -> leaf A -> spine 1 -> leaf B
UP_S2 = ["10.0.1.1", "10.1.0.6", "10.1.0.13"]    # node1 -> leaf A -> spine 2 -> leaf B
DOWN_S1 = ["10.0.2.1", "10.1.0.10", "10.1.0.1"]  # node2 -> leaf B -> spine 1 -> leaf A
DOWN_S2 = ["10.0.2.1", "10.1.0.14", "10.1.0.5"]


def ends(spec: FabricSpec) -> set[tuple]:
    return {(l.a, l.b, l.a_address, l.b_address) for l in spec.links}


def test_peer_prefers_the_host_prefix_and_needs_an_answering_end():
    seen = {"10.1.0.1", "10.1.0.2", "10.1.0.0"}
    assert peer("10.1.0.2", seen, 30) == "10.1.0.1"
    assert peer("10.1.0.1", seen, 31) == "10.1.0.0"
    assert peer("10.1.0.1", seen, 30) == "10.1.0.2"
    assert peer("10.1.0.6", seen) == "" and peer("not-an-address", seen) == ""


def test_ecmp_over_two_spines_gives_two_leaves_two_spines_four_cables():
    traces = [Trace("node1:eth0", "node2:eth0", UP_S1 + [None]), Trace("node1:eth0", "node2:eth0", UP_S2),
              Trace("node2:eth0", "node1:eth0", DOWN_S1), Trace("node2:eth0", "node1:eth0", DOWN_S2 + [None])]
    t = infer(NICS, traces, taken={"node1", "node2"})
    assert {s: i["tier"] for s, i in t.spec.switches.items()} == {"leaf1": 1, "leaf2": 1, "spine1": 2, "spine2": 2}
    assert t.groups == {"leaf1": ["10.0.1.1", "10.1.0.1", "10.1.0.5"], "leaf2": ["10.0.2.1", "10.1.0.9", "10.1.0.13"],
                        "spine1": ["10.1.0.2", "10.1.0.10"], "spine2": ["10.1.0.6", "10.1.0.14"]}
    assert ends(t.spec) == {
        ("node1:eth0", "leaf1", "10.0.1.2", "10.0.1.1"), ("node2:eth0", "leaf2", "10.0.2.2", "10.0.2.1"),
        ("leaf1", "spine1", "10.1.0.1", "10.1.0.2"), ("leaf1", "spine2", "10.1.0.5", "10.1.0.6"),
        ("leaf2", "spine1", "10.1.0.9", "10.1.0.10"), ("leaf2", "spine2", "10.1.0.13", "10.1.0.14")}
    assert all("inferred from traced paths" in i["comment"] for i in t.spec.switches.values())
    assert t.spec.sources == ["trace"] and any("names generated" in n for n in t.spec.notes)


def test_unanswered_hops_drop_only_what_they_hide():
    # spine 2 never answers towards node2; the last hop of one trace is missing too.
    traces = [Trace("node1:eth0", "node2:eth0", UP_S1),
              Trace("node1:eth0", "node2:eth0", ["10.0.1.1", None, "10.1.0.13"]),
              Trace("node2:eth0", "node1:eth0", DOWN_S1),
              Trace("node2:eth0", "node1:eth0", ["10.0.2.1", "10.1.0.14", None])]
    t = infer(NICS, traces)
    # The hidden hops cost spine 2's cable to leaf A, nothing else; a trailing `*` is not taken as
    # the end of its path (the pair's switch count comes from its other flows).
    assert t.groups["leaf2"] == ["10.0.2.1", "10.1.0.9", "10.1.0.13"]
    assert sorted(t.groups.values()) == sorted([["10.0.1.1", "10.1.0.1"], ["10.0.2.1", "10.1.0.9", "10.1.0.13"],
                                                ["10.1.0.2", "10.1.0.10"], ["10.1.0.14"]])
    switch_cables = {(l.a, l.b) for l in t.spec.links if ":" not in l.a}
    assert len(switch_cables) == 3 and all(t.spec.switches[b]["tier"] == 2 for _a, b in switch_cables)


def test_a_switch_answering_from_different_addresses_is_one_switch():
    # leaf A answers node1 sometimes from its loopback 10.9.9.1 instead of the ingress port.
    traces = [Trace("node1:eth0", "node2:eth0", UP_S1),
              Trace("node1:eth0", "node2:eth0", ["10.9.9.1", "10.1.0.6", "10.1.0.13"]),
              Trace("node2:eth0", "node1:eth0", DOWN_S1), Trace("node2:eth0", "node1:eth0", DOWN_S2)]
    t = infer(NICS, traces)
    assert len(t.spec.switches) == 4
    assert "10.9.9.1" in t.groups["leaf1"] and "10.0.1.1" in t.groups["leaf1"]
    assert sum(1 for l in t.spec.links if ":" in l.a) == 2


def test_loopback_answers_without_subnets_pair_cables_by_count():
    nics = {"a:eth0": ("192.168.0.1", 24), "b:eth0": ("192.168.1.1", 24)}
    traces = [Trace("a:eth0", "b:eth0", ["10.255.0.1", "10.255.1.1", "10.255.0.2"]),
              Trace("b:eth0", "a:eth0", ["10.255.0.2", "10.255.1.1", "10.255.0.1"]),
              Trace("a:eth0", "b:eth0", ["10.255.0.1", "10.255.1.2", "10.255.0.2"])]
    t = infer(nics, traces)
    pairs = sorted((l.a, l.b) for l in t.spec.links if ":" not in l.a)
    assert pairs == [("leaf1", "spine1"), ("leaf1", "spine2"), ("leaf2", "spine1"), ("leaf2", "spine2")]


def test_names_from_lldp_and_generated_names_avoid_hosts():
    traces = [Trace("node1:eth0", "node2:eth0", UP_S1), Trace("node2:eth0", "node1:eth0", DOWN_S1)]
    t = infer(NICS, traces, names={"node1:eth0": "tor-a"}, taken={"leaf1", "node1", "node2"})
    assert sorted(t.spec.switches) == ["leaf2", "spine1", "tor-a"]
    assert "named by LLDP" in t.spec.switches["tor-a"]["comment"]


def test_merge_keeps_lldp_host_cables_and_adds_traced_switch_cables():
    spec = FabricSpec(switches={"tor-a": {"tier": 0, "model": "", "address": ""},
                                "tor-b": {"tier": 0, "model": "", "address": ""}},
                      links=[LinkSpec("node1:eth0", "tor-a:swp1", "10.0.1.2", "", 0, "lldp"),
                             LinkSpec("node2:eth0", "tor-b:swp1", "10.0.2.2", "", 0, "lldp")], sources=["lldp"])
    traces = [Trace("node1:eth0", "node2:eth0", UP_S1), Trace("node2:eth0", "node1:eth0", DOWN_S1)]
    t = infer(NICS, traces, names={"node1:eth0": "tor-a", "node2:eth0": "tor-b"})
    merge(spec, t)
    assign_tiers(spec)
    assign_ids(spec)
    assert sorted(l.id for l in spec.links) == ["node1:eth0--tor-a", "node2:eth0--tor-b", "tor-a--spine1",
                                                 "tor-b--spine1"]
    assert {l.a: l.b_address for l in spec.links if ":" in l.a} == {"node1:eth0": "10.0.1.1", "node2:eth0": "10.0.2.1"}
    assert spec.sources == ["lldp", "trace"] and spec.switches["spine1"]["tier"] == 2


def _lab_traces(layout, sports: int = 4):
    """The hop lists the lab's routers give: first hop the leaf's host port, then the spine's port
    towards the source leaf, then the destination leaf's port towards that spine (spine by ECMP)."""
    nics = {f"{h.name}:{n.name}": (n.address, 30) for h in layout.hosts for n in h.nics}
    gateway = {f"{h.name}:{n.name}": n.gateway for h in layout.hosts for n in h.nics}
    leaf = {f"{h.name}:{n.name}": h.leaf for h in layout.hosts for n in h.nics}
    spines = [s.id for s in layout.spines]
    traces = []
    for (a, b), j in itertools.product(itertools.permutations(sorted(nics), 2), range(sports)):
        if a.split(":")[0] == b.split(":")[0]:
            continue
        if leaf[a] == leaf[b]:
            traces.append(Trace(a, b, [gateway[a], None]))
            continue
        s = spines[(hash((a, b)) + j) % len(spines)]
        up, down = layout.uplink(leaf[a], s), layout.uplink(leaf[b], s)
        traces.append(Trace(a, b, [gateway[a], up.b.address, down.a.address, None]))
    return nics, traces


def test_the_labs_fabric_from_its_hop_lists_equals_its_site_file_up_to_names():
    layout = build_layout(LabParams(hosts=8, nics_per_host=2, leaves=4, spines=3))
    nics, traces = _lab_traces(layout)
    t = infer(nics, traces, taken={h.name for h in layout.hosts})
    spec = t.spec
    assign_tiers(spec)
    assign_ids(spec)
    want = {lid: (l.a.element, l.b.element, l.a.address, l.b.address) for lid, l in layout.links.items()}
    got = {l.id: (l.a, l.b, l.a_address, l.b_address) for l in spec.links}
    # Generated names follow the first host of each leaf and the lowest address of each spine,
    # which in the lab's addressing are its own names; the structure must match regardless.
    assert got == want
    assert {s: i["tier"] for s, i in spec.switches.items()} == {r.id: r.tier for r in layout.routers}


def test_the_trace_plan_is_bounded_and_never_traces_a_nodes_own_nics():
    from fleetctl.discover.trace_run import MAX_DESTS, SPORTS, plan

    nics = {f"n{i}:eth{k}": (f"10.{i}.{k}.2", 30, f"eth{k}") for i in range(40) for k in range(2)}
    config, flows = plan(nics)
    per_src: dict[str, set] = {}
    for src, dst in flows.values():
        assert src.split(":")[0] != dst.split(":")[0]
        per_src.setdefault(src, set()).add(dst)
    assert len(per_src) == 80 and all(len(d) == MAX_DESTS for d in per_src.values())
    assert len({d.split(":")[0] for d in per_src["n0:eth0"]}) > 8  # spread over the fleet, not one rack
    rows = config["nodes"]["n3"]
    assert len(rows) == 2 * MAX_DESTS * SPORTS and {r[6] for r in rows} == {"eth0", "eth1"}
    assert len({(r[1], r[2], r[3]) for r in rows}) == len(rows)  # one 5-tuple per flow


def test_hostile_tracer_output_is_dropped_per_flow():
    from fleetctl.discover.trace_run import _hops

    assert _hops(["10.0.0.1", None]) == ["10.0.0.1", None]
    assert _hops(["10.0.0.1", "../etc"]) is None and _hops("10.0.0.1") is None
    assert _hops(["10.0.0.1"] * 50) is None and _hops([7]) == [None]


def test_a_large_fleet_gets_fewer_destinations_per_nic_within_the_flow_budget():
    from fleetctl.discover.trace_run import MAX_FLOWS, plan

    nics = {f"n{i}:mlx5_{k}": (f"10.{i // 250}.{i % 250}.{k * 4 + 2}", 31, f"eth{k}")
            for i in range(1000) for k in range(8)}
    config, flows = plan(nics)
    assert 0 < len(flows) <= MAX_FLOWS
    assert {src for src, _d in flows.values()} == set(nics)  # every NIC still finds its first hop


def test_short_and_empty_hop_lists_cost_nothing_else():
    traces = [Trace("node1:eth0", "node2:eth0", UP_S1), Trace("node1:eth0", "node2:eth0", []),
              Trace("node1:eth0", "node2:eth0", ["10.0.1.1"]), Trace("node2:eth0", "node1:eth0", DOWN_S1)]
    t = infer(NICS, traces)
    assert len(t.spec.switches) == 3 and len(t.spec.links) == 4


def test_a_tracer_errors_field_of_the_wrong_type_is_ignored(monkeypatch):
    """`errors` from a node as an object or a number: no TypeError ending the discovery."""
    import json

    from fleetctl.discover import trace_run
    from fleetctl.discover.facts import NicFact, NodeFacts
    from fleetctl.fanout.result import OK, HostResult

    facts = {n: NodeFacts(n, nics=[NicFact("eth0", "ethernet", addresses=[f"10.0.{i}.2/30"])], fabric_nics=["eth0"])
             for i, n in enumerate(("node1", "node2"))}
    answers = {"node1": {"paths": {"t0": ["10.0.0.1"]}, "errors": {"a": 1}}, "node2": {"paths": {}, "errors": 7}}

    def fake_run_python(transport, nodes, script, timeout):
        return [HostResult(n, OK, 0, json.dumps(answers[n]) + "\n") for n in nodes]

    monkeypatch.setattr(trace_run, "run_python", fake_run_python)
    _nics, traces, failed, errors = trace_run.run_traces(None, facts)
    assert failed == {} and errors == []
    assert [(t.src, t.hops) for t in traces] == [("node1:eth0", ["10.0.0.1"])]
