"""Fabric discovery on outputs recorded from real fabrics by others (tests/data/real/PROVENANCE.md):
the InfiniBand subnet of PSMN's cluster X5 (ibnetdiscover, with the site's own GUID map and its own
list of spine switches as the truth) and lldpcli JSON from three real setups."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fleetctl.config import parse_site
from fleetctl.discover.classes import ClassSpec
from fleetctl.discover.fabric import FabricSpec, assign_ids, assign_tiers, from_ibnetdiscover
from fleetctl.discover.ibnet import parse_ibnetdiscover, parse_node_name_map
from fleetctl.discover.lldp import parse_neighbours
from fleetctl.discover.sitefile import render

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def x5():
    ib = parse_ibnetdiscover((REAL / "ibnetdiscover-x5-voltaire-qdr.topo").read_text())
    names = parse_node_name_map((REAL / "ibnetdiscover-x5-voltaire-qdr.map").read_text())
    spec = FabricSpec()
    from_ibnetdiscover(ib, {}, spec, names)
    assign_tiers(spec)
    assign_ids(spec)
    return ib, names, spec


def test_x5_switches_cables_and_rates():
    ib, names, spec = x5()
    assert len(ib.switches) == 11 and len(ib.cas) == 89
    # Every cable once: 159 of them, each printed from both ends in the file.
    assert len(ib.cables) == len(spec.links) == 159
    # 4x QDR (32 Gb/s of data) between switches and to the QDR HCAs; 4x DDR (16 Gb/s) to the old ones.
    assert Counter(c.rate_gbps for c in ib.cables) == {32.0: 136, 16.0: 23}
    first = ib.devices["0008f10500200b50"]
    assert first.kind == "switch" and first.lid == 9 and first.ports == 36
    assert first.description == "Voltaire 4036 - 36 QDR ports switch"
    assert ib.devices["003048c749cd0000"].port_guids == {1: "003048c749cd0001"}
    assert ib.devices["003048c749cd0000"].lid == 72


def test_x5_tiers_match_the_sites_own_list_of_spines():
    _, _, spec = x5()
    spines = {line.strip() for line in (REAL / "ibnetdiscover-x5-voltaire-qdr.spine").read_text().splitlines()
              if line.startswith("S-")}
    assert len(spines) == 5
    assert {s for s, info in spec.switches.items() if info["tier"] >= 2} == spines
    assert {s for s, info in spec.switches.items() if info["tier"] == 1} == set(spec.switches) - spines


def test_x5_hosts_named_by_the_map_and_parallel_cables_numbered():
    ib, names, spec = x5()
    host_ends = [l.a for l in spec.links if not l.a.startswith("S-")]
    assert len(host_ends) == 89 - 0 and "x5570comp1" in host_ends  # every CA has one cable
    assert sum(1 for h in host_ends if h.startswith("H-")) == 3  # the 3 CAs the site's map leaves out
    ids = [l.id for l in spec.links]
    assert len(set(ids)) == len(ids)
    parallel = [i for i in ids if i.startswith("S-0008f10500200b50--S-0008f10500108c5c#")]
    assert sorted(parallel) == [f"S-0008f10500200b50--S-0008f10500108c5c#{k}" for k in range(1, 7)]


def test_x5_as_a_site_file_passes_the_schema():
    ib, names, spec = x5()
    hosts = sorted({l.a for l in spec.links if not l.a.startswith(("S-", "H-"))})
    cls = ClassSpec(name="x5", nodes=hosts, cpus=0, memory_gb=0, gpus={"count": 0}, nics=[])
    host_ids = [l.a for l in spec.links if l.a.startswith("H-")]
    spec.links = [l for l in spec.links if l.a not in host_ids]  # unnamed CAs are no site nodes
    text = render(cluster="x5", classes=[cls], fabric=spec, access={"transport": "ssh"}, slurm={},
                  checks={}, notes=[], sources=["ibnetdiscover"])
    site = parse_site(text, source="x5.toml")
    assert len(site.switches) == 11 and len(site.links) == 159 - 3
    assert site.links["S-0008f10500200b50--S-0008f10500108c5c#1"].a.port == "1"


@pytest.mark.parametrize("sample, local, system, port, mgmt", [
    ("lldpcli-json-nexus-eno8303.json", "eno8303", "NKG-ESWA07-2.eng.citrite.net", "Ethernet1/28", ()),
    ("lldpcli-json-list-router-eno1.json", "eno1", "router", "ge-1/0/1", ("192.0.2.1",)),
    ("lldpcli-json-single-nameless-chassis.json", "enp3s0", "", "g17", ("192.168.178.21",)),
])
def test_real_lldpcli_outputs(sample, local, system, port, mgmt):
    (nb,) = parse_neighbours((REAL / sample).read_text(), sample)
    assert (nb.local_port, nb.system_name, nb.port, nb.mgmt_ips) == (local, system, port, mgmt)


def test_nameless_chassis_gets_an_id_from_its_mac():
    from fleetctl.discover.fabric import switch_id

    (nb,) = parse_neighbours((REAL / "lldpcli-json-single-nameless-chassis.json").read_text())
    assert switch_id(nb.system_name, nb.chassis_id) == "sw-4494fc9d550a"
    (nb,) = parse_neighbours((REAL / "lldpcli-json-nexus-eno8303.json").read_text())
    assert switch_id(nb.system_name, nb.chassis_id) == "NKG-ESWA07-2"


@pytest.mark.parametrize("text", [
    'Switch  ' + "9" * 5000 + ' "S-0008f10500200b50"\n',  # int() of 5,000 digits is a ValueError
    'Switch  36 "S-0008f10500200b50"\n[1]  "S-0008f10500200b51"[1] # ' + "9" * 5000 + "xQDR\n",
    'Switch  36 "S-0008f10500200b50"\n[' + "9" * 50 + ']  "S-0008f10500200b51"[1]\n',
    'Switch  36 "S-' + "a" * 1000 + '"\n',  # a GUID is 64 bits: not cut to its last 16 digits
])
def test_ibnetdiscover_numbers_and_guids_out_of_range_are_data_errors(text):
    from fleetctl.errors import DataError

    with pytest.raises(DataError, match="not ibnetdiscover output|never lists"):
        parse_ibnetdiscover(text, "ib.txt")
    huge_lid = 'Switch  36 "S-0008f10500200b50" # "x" enhanced port 0 lid ' + "9" * 5000 + "\n"
    assert parse_ibnetdiscover(huge_lid, "ib.txt").devices["0008f10500200b50"].lid is None  # unknown, not kept
