"""Parsers of Slurm output, on outputs recorded from the lab's 22.05, 24.11 and 26.05 and written from
the 24.11 docs (awkward cases a lab does not produce).

See tests/unit/slurm_outputs/README.md for where each file comes from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetctl.errors import SlurmError
from fleetctl.slurm.parse import (parse_nodes, parse_record, parse_reservations, parse_squeue,
                                  parse_state)

OUT = Path(__file__).parent / "slurm_outputs"


def read(version: str, name: str) -> str:
    return (OUT / version / name).read_text()


def test_record_values_with_spaces_and_equals():
    rec = parse_record("A=1 OS=Linux 6.1.0 #1 SMP B= CfgTRES=cpu=2,mem=1M Z=(null)")
    assert rec == {"A": "1", "OS": "Linux 6.1.0 #1 SMP", "B": "", "CfgTRES": "cpu=2,mem=1M", "Z": "(null)"}


def test_reason_is_cut_by_its_user_time_suffix():
    rec = parse_record("NodeName=n1 Reason=a b=c [x] [root@2025-01-01T00:00:00] Comment=c d")
    assert rec["Reason"] == "a b=c [x]"
    assert (rec["ReasonUser"], rec["ReasonTime"]) == ("root", "2025-01-01T00:00:00")
    assert rec["Comment"] == "c d"


def test_reason_without_suffix_runs_to_the_next_key():
    rec = parse_record("NodeName=n1 Reason=hand made Partitions=a")
    assert rec["Reason"] == "hand made" and rec["Partitions"] == "a"


def test_garbage_is_an_error():
    with pytest.raises(SlurmError, match="cannot parse Slurm output"):
        parse_record("slurm_load_node error: something")


@pytest.mark.parametrize("text, expected", [
    ("IDLE", ("IDLE", [])), ("IDLE+DRAIN", ("IDLE", ["DRAIN"])),
    ("down*", ("DOWN", [])), ("MIXED+DRAIN+RESERVED", ("MIXED", ["DRAIN", "RESERVED"])),
    ("", ("UNKNOWN", [])),
])
def test_state(text, expected):
    assert parse_state(text) == expected


def test_nodes_24_11_written_from_docs():
    nodes = {n.name: n for n in parse_nodes(read("24.11-docs", "show_node.txt"))}
    assert list(nodes) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    n1 = nodes["gpu001"]
    assert (n1.state, n1.flags, n1.drained, n1.available) == ("IDLE", ["DRAIN"], True, False)
    assert n1.reason == "fleetctl:xid79 gpu3 fell off the bus"
    assert (n1.reason_user, n1.reason_time) == ("root", "2025-02-04T17:05:31")
    assert n1.partitions == ["gpu", "all"] and n1.features == ["h100", "rail8"]
    assert (n1.cpus, n1.real_memory_mb, n1.address) == (192, 2000000, "10.0.0.1")
    n2 = nodes["gpu002"]
    assert (n2.state_text, n2.reason, n2.available, n2.drained) == ("MIXED", "", True, False)
    n3 = nodes["gpu003"]
    assert n3.state_text == "DOWN+NOT_RESPONDING" and n3.reason == "Not responding"
    assert n3.reason_user == "slurm" and not n3.available
    n4 = nodes["gpu004"]
    assert n4.reason == "psu swap, see [ticket 4711] x=y" and n4.reason_user == "alice"
    assert n4.features == [] and n4.drained and n4.state == "ALLOCATED"
    rec = parse_record(read("24.11-docs", "show_node.txt").splitlines()[3])
    assert (rec["Comment"], rec["Extra"], rec["ReservationName"]) == ("rack 4", "row=2", "fleetctl-spares")


def test_jobs_24_11_written_from_docs():
    jobs = parse_squeue(read("24.11-docs", "squeue.txt"))
    assert [j.job_id for j in jobs] == ["4012", "4013", "4014_3"]
    assert jobs[0].nodes == ["gpu002", "gpu004"] and jobs[0].nodelist == "gpu[002,004]"
    assert jobs[0].name == "llama-70b|pretrain" and jobs[0].user == "alice" and jobs[0].reason == ""
    assert jobs[1].state == "PENDING" and jobs[1].nodes == [] and jobs[1].reason == "Resources"


def test_squeue_bad_line():
    with pytest.raises(SlurmError, match="cannot parse squeue line"):
        parse_squeue("12|RUNNING\n")


def test_reservations_24_11_written_from_docs():
    res = parse_reservations(read("24.11-docs", "show_reservation.txt"))
    assert [r.name for r in res] == ["fleetctl-spares", "upgrade"]
    spares = res[0]
    assert spares.nodes == ["gpu007", "gpu008"] and spares.flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"]
    assert spares.users == ["root"] and spares.state == "ACTIVE" and spares.partition == ""
    assert res[1].users == ["root", "alice"] and res[1].partition == "gpu" and len(res[1].nodes) == 64


def test_no_reservations():
    assert parse_reservations("No reservations in the system\n") == []


RECORDED = ("22.05", "24.11", "26.05")  # captured by slurm_outputs/capture.py from the lab's real Slurm


@pytest.mark.parametrize("version", RECORDED)
def test_nodes_recorded(version):
    nodes = {n.name: n for n in parse_nodes(read(version, "show_node.txt"))}
    assert list(nodes) == ["node1", "node2", "node3", "node4"]
    n1 = nodes["node1"]
    assert (n1.state_text, n1.drained, n1.available) == ("IDLE+DRAIN", True, False)
    assert n1.reason == "fleetctl:xid79 gpu3 fell off the bus" and n1.reason_user == "root"
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d", n1.reason_time), n1.reason_time
    assert n1.partitions == ["gpu"] and n1.features == ["lab", "leaf1"] and n1.active_features == ["lab", "leaf1"]
    assert (n1.cpus, n1.real_memory_mb, n1.address) == (2, 1000, "10.250.0.11")
    assert nodes["node2"].reason == "psu swap, see [ticket 4711] x=y"
    n3 = nodes["node3"]
    assert (n3.state_text, n3.reason, n3.reason_user, n3.available) == ("MIXED", "", "", True)


@pytest.mark.parametrize("version", RECORDED)
def test_jobs_recorded(version):
    jobs = {j.job_id: j for j in parse_squeue(read(version, "squeue.txt"))}
    running, pending = jobs["1"], jobs["2"]
    assert running.state == "RUNNING" and running.nodes == ["node3", "node4"]
    assert running.name == "llama|pretrain" and running.user == "root" and running.partition == "gpu"
    assert pending.state == "PENDING" and pending.nodes == [] and pending.nodelist == ""
    assert pending.reason.startswith("Nodes required for job are DOWN, DRAINED")


@pytest.mark.parametrize("version", RECORDED)
def test_reservations_recorded(version):
    (res,) = parse_reservations(read(version, "show_reservation.txt"))
    assert (res.name, res.nodes, res.users, res.state) == ("fleetctl-spares", ["node4"], ["root"], "ACTIVE")
    assert res.flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"] and res.duration == "365-00:00:00"
    assert res.partition == ""
    assert parse_reservations(read(version, "no_reservation.txt")) == []


@pytest.mark.parametrize("version", RECORDED)
def test_a_reason_on_a_node_that_is_not_drained_or_down_is_not_in_force(version):
    # 24.11's `scontrol update State=RESUME` leaves Reason (and its [user@time]) on the now IDLE node,
    # as seen in the lab (22.05 and 26.05 clear it). A stale reason must not look like a drain in force.
    drained = read(version, "show_node.txt").splitlines()[0]
    assert "State=IDLE+DRAIN " in drained
    (node,) = parse_nodes(drained.replace("State=IDLE+DRAIN ", "State=IDLE "))
    assert (node.state_text, node.drained, node.reason, node.reason_user, node.reason_time) == \
        ("IDLE", False, "", "", "")
    (down,) = parse_nodes(drained.replace("State=IDLE+DRAIN ", "State=DOWN+NOT_RESPONDING "))
    assert down.reason == "fleetctl:xid79 gpu3 fell off the bus"
