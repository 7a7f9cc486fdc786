"""Discovery from node documents to a site file: the node payload on this machine, hostile
documents, fabric NIC choice, classes and deviations, cabling, tiers and link ids from LLDP tables of
hosts and switches (shaped like the lab's), the written file, and --diff."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleetctl.config import parse_site
from fleetctl.discover.build import discover_payload
from fleetctl.discover.classes import build_classes, class_name
from fleetctl.discover.diff import diff_site
from fleetctl.discover.fabric import FabricSpec, assign_ids, assign_tiers, from_lldp
from fleetctl.discover.facts import choose_fabric_nics, parse_facts
from fleetctl.discover.lldp import parse_neighbours
from fleetctl.discover.run import Discovery
from fleetctl.discover.sitefile import render, write_site
from fleetctl.errors import DataError, UsageError


def lldp_json(entries):
    """lldpcli -f json: (local port, system name, port) -> the list form lldpd prints."""
    return json.dumps({"lldp": {"interface": [
        {local: {"via": "LLDP", "chassis": {name: {"id": {"type": "mac", "value": "aa:bb:cc:00:00:01"}}},
                 "port": {"id": {"type": "ifname", "value": port}, "ttl": "4"}}}
        for local, name, port in entries]}})


def doc(node, netdevs, lldp=(), *, gpus=4, cpus=2, loopback=(), mem=23.5):
    return {"schema": "fleetctl.discover.node/1", "node": node, "cpus": cpus, "memory_gb": mem,
            "kernel": "6.1.0", "gpus": {"count": gpus, "model": "NVIDIA H100 80GB HBM3" if gpus else ""},
            "rdma": [], "netdevs": [dict({"kind": "ethernet", "operstate": "up", "rate_gbps": 0.0,
                                          "mtu": 1500, "virtual": False}, **n) for n in netdevs],
            "loopback": list(loopback), "lldp": {"text": lldp_json(lldp), "error": None}}


# The lab's shape: node1-2 on leaf1, node3-4 on leaf2, two NICs each, two spines.
def lab_docs(mtu_node2_eth1=1500, drop=None):
    hosts, switches = {}, {}
    port = {}
    for i in range(1, 5):
        leaf = 1 if i <= 2 else 2
        nets = [{"name": "mgmt0", "addresses": [f"10.250.0.{10 + i}/24"]}]
        entries = []
        for k in range(2):
            j = (i - 1) % 2 * 2 + k
            nets.append({"name": f"eth{k}", "addresses": [f"10.252.{leaf}.{4 * j + 2}/30"],
                         "mtu": mtu_node2_eth1 if (i, k) == (2, 1) else 1500})
            entries.append((f"eth{k}", f"leaf{leaf}", f"n{i}e{k}"))
            port[(f"leaf{leaf}", f"n{i}e{k}")] = (f"node{i}", f"eth{k}", f"10.252.{leaf}.{4 * j + 1}/30")
        hosts[f"node{i}"] = doc(f"node{i}", nets, entries)
    for leaf in (1, 2):
        nets, entries = [], []
        for (sw, p), (node, nic, addr) in port.items():
            if sw == f"leaf{leaf}":
                nets.append({"name": p, "addresses": [addr]})
                entries.append((p, node, nic))
        for s in (1, 2):
            if drop == f"leaf{leaf}--spine{s}":
                continue
            nets.append({"name": f"spine{s}", "addresses": [f"10.253.{leaf}.{4 * s + 1}/30"]})
            entries.append((f"spine{s}", f"spine{s}", f"leaf{leaf}"))
        switches[f"leaf{leaf}"] = doc(f"leaf{leaf}", nets, entries, gpus=0, loopback=[f"10.252.{leaf}.254/32"])
    for s in (1, 2):
        nets, entries = [], []
        for leaf in (1, 2):
            if drop == f"leaf{leaf}--spine{s}":
                continue
            nets.append({"name": f"leaf{leaf}", "addresses": [f"10.253.{leaf}.{4 * s + 2}/30"]})
            entries.append((f"leaf{leaf}", f"leaf{leaf}", f"spine{s}"))
        switches[f"spine{s}"] = doc(f"spine{s}", nets, entries, gpus=0, loopback=[f"10.253.0.{s}/32"])
    return hosts, switches


def discovery(**kw) -> Discovery:
    hosts, switches = lab_docs(**kw)
    d = Discovery()
    d.facts = {n: parse_facts(v, n) for n, v in hosts.items()}
    d.switch_facts = {n: parse_facts(v, n) for n, v in switches.items()}
    for f in d.facts.values():
        choose_fabric_nics(f)
    d.classes = build_classes(d.facts)
    from_lldp(d.facts, d.switch_facts, d.fabric)
    assign_tiers(d.fabric)
    assign_ids(d.fabric)
    return d


def site_text(d: Discovery) -> str:
    return render(cluster="lab", classes=d.classes, fabric=d.fabric, access={"transport": "local",
                  "local": {"netns": "fl-{node}"}}, slurm={}, checks={}, notes=d.notes, sources=d.sources)


def test_payload_runs_on_a_bare_python_and_its_document_parses():
    proc = subprocess.run([sys.executable, "-I", "-S", "-", json.dumps({"budget_s": 10})],
                          input=discover_payload().encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()[-500:]
    raw = json.loads(proc.stdout)
    facts = parse_facts(raw, "here")
    assert facts.cpus >= 1 and facts.memory_gb > 0 and facts.kernel
    assert raw["gpus"]["count"] == 0 and "error" in raw["gpus"]  # no GPU source on this machine
    assert all(n.name != "lo" for n in facts.nics)


@pytest.mark.parametrize("bad, message", [
    ([], "not a discovery document"),
    ({"schema": "fleetctl.discover.node/1", "cpus": "many"}, "cpus: not a number"),
    ({"schema": "fleetctl.discover.node/1", "netdevs": [{"name": "x" * 300}]}, "not a short text"),
    ({"schema": "fleetctl.discover.node/1", "netdevs": [{"name": "../../etc"}]}, "not a NIC name"),
    ({"schema": "fleetctl.discover.node/1", "rdma": [{"name": "mlx5_0", "netdev": "a b"}]}, "not a NIC name"),
    ({"schema": "fleetctl.discover.node/1", "netdevs": [{"name": "e", "addresses": ["10.0.0.999/8"]}]},
     "not an address"),
    ({"schema": "fleetctl.discover.node/1", "netdevs": [{"name": "e"}] * 300}, "at most 256"),
    ({"schema": "fleetctl.discover.node/1", "lldp": {"text": "{\"lldp\": 3}"}}, "not an object"),
    ({"schema": "fleetctl.discover.node/1", "error": "bad argument: x"}, "bad argument"),
    # Wrong types where a list belongs: a DataError for the node, not a TypeError ending discovery.
    ({"schema": "fleetctl.discover.node/1", "rdma": [{"name": "mlx5_0", "ports": {"a": 1}}]}, "ports: not a list"),
    ({"schema": "fleetctl.discover.node/1", "rdma": [{"name": "mlx5_0", "ports": 5}]}, "ports: not a list"),
    ({"schema": "fleetctl.discover.node/1", "netdevs": [{"name": "e", "addresses": {"x": 1}}]}, "not a list"),
    ({"schema": "fleetctl.discover.node/1", "loopback": 3}, "loopback: not a list"),
    # a lone surrogate (JSON "\ud800") would make the written site file invalid TOML
    ({"schema": "fleetctl.discover.node/1", "gpus": {"model": "H100\ud800"}}, "not valid Unicode"),
    ({"schema": "fleetctl.discover.node/1", "netdevs": [{"name": "e"}, {"name": "e"}]}, "'e' listed twice"),
])
def test_hostile_documents_are_data_errors_naming_the_node(bad, message):
    with pytest.raises(DataError, match=message) as exc:
        parse_facts(bad, "gpu7")
    assert "gpu7" in exc.value.message


def test_out_of_range_numa_nodes_and_lids_are_unknown_not_kept():
    doc = {"schema": "fleetctl.discover.node/1",
           "rdma": [{"name": "mlx5_0", "numa_node": 10**100, "ports": [{"lid": 10**100}, {"lid": True}, {"lid": 7}]}],
           "netdevs": [{"name": "eth0", "numa_node": -1}]}
    facts = parse_facts(doc, "gpu7")
    assert facts.nic("mlx5_0").numa_node is None and facts.nic("mlx5_0").lids == [7]
    assert facts.nic("eth0").numa_node is None


def test_lldp_field_with_a_lone_surrogate_is_a_data_error():
    with pytest.raises(DataError, match="not valid Unicode"):
        parse_neighbours(lldp_json([("eth0", "leaf\ud800", "swp1")]), "n1: lldpcli")


def test_lldp_json0_and_nesting_bounds():
    json0 = {"lldp": [{"interface": [{"name": "eth0", "via": "LLDP", "chassis": [
        {"id": [{"type": "mac", "value": "aa"}], "name": [{"value": "leaf9"}]}],
        "port": [{"id": [{"type": "ifname", "value": "swp3"}]}]}]}]}
    (nb,) = parse_neighbours(json.dumps(json0))
    assert (nb.local_port, nb.system_name, nb.port) == ("eth0", "leaf9", "swp3")
    with pytest.raises(DataError, match="not lldpcli JSON"):
        parse_neighbours("[" * 100000)
    assert parse_neighbours('{"lldp": {}}') == []


def test_fabric_nics_are_those_with_an_lldp_neighbour():
    d = discovery()
    f = d.facts["node1"]
    assert f.fabric_nics == ["eth0", "eth1"]
    assert any("mgmt0" in n for n in f.notes)
    # Without LLDP anywhere, every up, non-virtual netdev; --nics chooses exactly.
    raw = doc("n", [{"name": "eno1"}, {"name": "veth9"}, {"name": "br0", "virtual": True}])
    raw["lldp"] = {"text": None, "error": "lldpcli not found"}
    f = parse_facts(raw, "n")
    choose_fabric_nics(f)
    assert f.fabric_nics == ["eno1"] and "no LLDP table" in f.notes[0]
    choose_fabric_nics(f, include=("br*",))
    assert f.fabric_nics == ["br0"]


def test_classes_group_by_hardware_and_report_deviations():
    d = discovery(mtu_node2_eth1=9000)
    (cls,) = d.classes
    assert cls.name == "h100x4" and cls.nodeset == "node[1-4]" and cls.gpus["count"] == 4
    assert [(n["name"], n["mtu"]) for n in cls.nics] == [("eth0", 1500), ("eth1", 1500)]
    assert cls.deviations == [{"node": "node2", "what": "eth1.mtu", "value": 9000, "expected": 1500}]
    assert class_name("", 0, {"cpu"}) == "cpu-2"


def test_cabling_tiers_ids_and_addresses_from_lldp():
    d = discovery()
    links = {l.id: l for l in d.fabric.links}
    assert sorted(links) == sorted([f"node{i}:eth{k}--leaf{1 if i <= 2 else 2}" for i in range(1, 5)
                                    for k in range(2)] + [f"leaf{l}--spine{s}" for l in (1, 2) for s in (1, 2)])
    assert {s: v["tier"] for s, v in d.fabric.switches.items()} == {"leaf1": 1, "leaf2": 1, "spine1": 2,
                                                                    "spine2": 2}
    assert d.fabric.switches["spine2"]["address"] == "10.253.0.2"
    up = links["leaf1--spine2"]
    assert (up.a, up.b, up.a_address, up.b_address) == ("leaf1:spine2", "spine2:leaf1", "10.253.1.9", "10.253.1.10")
    host = links["node3:eth1--leaf2"]
    assert (host.b, host.a_address, host.b_address) == ("leaf2:n3e1", "10.252.2.6", "10.252.2.5")


def test_written_file_passes_the_schema_and_is_never_overwritten_silently(tmp_path):
    d = discovery()
    text = site_text(d)
    site = parse_site(text, "discovered.toml")
    assert site.nodes == parse_site(text).nodes and len(site.links) == 12 and len(site.switches) == 4
    assert site.node_class("node4").nic("eth1").mtu == 1500
    out = write_site(tmp_path / "site.toml", text)
    with pytest.raises(UsageError, match="exists: give --force"):
        write_site(out, text)
    write_site(out, text.replace('name = "lab"', 'name = "lab2"'), force=True)
    assert 'name = "lab2"' in out.read_text()
    from fleetctl.errors import ConfigError

    with pytest.raises(ConfigError):
        write_site(tmp_path / "bad.toml", text.replace("tier = 2", "tier = 9"))
    assert not (tmp_path / "bad.toml").exists()


def test_diff_names_a_link_down_an_mtu_change_a_moved_cable_and_a_new_node():
    reference = parse_site(site_text(discovery()), "site.toml")
    d = discovery(mtu_node2_eth1=9000, drop="leaf1--spine2")
    changes = diff_site(reference, d, ["node1", "node2", "node3", "node4"])
    assert changes["missing_links"] == ["leaf1--spine2"] and changes["new_links"] == []
    assert changes["nics"] == [{"node": "node2", "nic": "eth1", "what": "mtu", "expected": 1500, "value": 9000}]
    assert changes["changes"] == 2
    # A cable moved from leaf2 to leaf1 and a node nobody declared.
    d = discovery()
    for link in d.fabric.links:
        if link.id == "node3:eth1--leaf2":
            link.b, link.id = "leaf1:n9", "node3:eth1--leaf1"
    d.facts["node9"] = d.facts["node1"]
    changes = diff_site(reference, d, ["node1", "node3", "node9"])
    assert changes["moved"] == [{"nic": "node3:eth1", "from": "node3:eth1--leaf2", "to": "node3:eth1--leaf1"}]
    assert changes["new_nodes"] == ["node9"] and changes["missing_links"] == []
    assert diff_site(reference, discovery(), ["node1"])["changes"] == 0
