"""The CLI Slurm backend against the lab's real slurmctld: drain/resume, reservations, jobs, requeue.

Every test leaves Slurm as it found it (nodes resumed, reservations deleted, jobs cancelled): the lab
is shared by the whole test session.
"""

from __future__ import annotations

import subprocess

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.errors import SlurmError
from fleetctl.slurm import backend_for_site
from fleetctl.slurm.parse import parse_record
from fleetctl.slurm.reasons import MAX_REASON_BYTES

from labutil import sbatch, scontrol, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slurm]


@pytest.fixture
def slurm(lab):
    backend = backend_for_site(lab.cluster)
    yield backend
    # Put every node back in service, whoever drained it in the test.
    subprocess.run(["scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME"],
                   env=lab.command_env(), capture_output=True, timeout=30)


def test_ping_and_nodes(lab, slurm):
    assert slurm.ping().split(".")[:2] == lab.state["slurm"]["version"].split(".")
    nodes = {n.name: n for n in slurm.nodes()}
    assert sorted(nodes) == sorted(lab.nodes)
    for node in nodes.values():
        assert node.partitions == ["gpu"] and "lab" in node.features
        assert node.available, node.state_text
    assert [n.name for n in slurm.nodes(lab.nodes[:2])] == lab.nodes[:2]


def test_drain_with_reason_and_resume_only_our_drains(lab, slurm):
    ours, operators, healthy = lab.nodes[0], lab.nodes[1], lab.nodes[2]
    scontrol(lab, "update", f"NodeName={operators}", "State=DRAIN", "Reason=rack maintenance by alice")
    drained = slurm.drain([ours, operators], "xid79", "gpu3 fell off the bus")
    reason = drained.reason
    assert reason == "fleetctl:xid79 gpu3 fell off the bus"
    assert drained.drained == [ours]  # the operator's drain is not taken over
    assert "'rack maintenance by alice' (not fleetctl's): left as is" in drained.skipped[operators]

    now = {n.name: n for n in slurm.nodes()}
    assert now[ours].drained and now[ours].reason == reason and now[ours].reason_user == "root"
    assert now[ours].reason_time[:4].isdigit()
    assert now[operators].drained and now[operators].reason == "rack maintenance by alice"

    result = slurm.resume([ours, operators, healthy])
    assert result.resumed == [ours]
    assert "was not written by fleetctl" in result.refused[operators]
    assert result.refused[healthy] == "no drain reason: not drained by fleetctl"
    after = {n.name: n for n in slurm.nodes()}
    assert not after[ours].drained and after[ours].reason == ""
    assert after[operators].drained and after[operators].reason == "rack maintenance by alice"


def test_long_reason_is_stored_whole_after_truncation(lab, slurm):
    reason = slurm.drain([lab.nodes[3]], "ecc-dbe", "x" * 400 + " [weird] ]").reason
    assert len(reason.encode()) <= MAX_REASON_BYTES
    assert slurm.nodes([lab.nodes[3]])[0].reason == reason
    assert slurm.resume([lab.nodes[3]]).resumed == [lab.nodes[3]]


def test_redrain_updates_our_reason_and_force_takes_over(lab, slurm):
    node = lab.nodes[0]
    slurm.drain([node], "temp", "gpu0 at 96 C")
    assert slurm.drain([node], "xid48", "double-bit ECC").drained == [node]
    assert slurm.nodes([node])[0].reason == "fleetctl:xid48 double-bit ECC"
    scontrol(lab, "update", f"NodeName={node}", "State=DRAIN", "Reason=operator")
    assert slurm.drain([node], "xid48", force=True).drained == [node]
    assert slurm.nodes([node])[0].reason == "fleetctl:xid48"


def test_unknown_node_is_a_slurm_error(slurm):
    with pytest.raises(SlurmError, match="nosuchnode"):
        slurm.nodes(["nosuchnode"])


def test_reservation_create_show_update_delete(lab, slurm):
    name = "fleetctl-test-spares"
    a, b = lab.nodes[2], lab.nodes[3]
    try:
        res = slurm.create_reservation(name, [a, b], flags=["maint", "ignore_jobs"], users=["root"])
        assert res.name == name and res.nodes == [a, b] and res.users == ["root"]
        assert {"MAINT", "IGNORE_JOBS"} <= set(res.flags) and res.state == "ACTIVE"
        assert [r.name for r in slurm.reservations()].count(name) == 1
        res = slurm.update_reservation(name, nodes=[b], duration="60")
        assert res.nodes == [b] and res.duration == "01:00:00"
    finally:
        slurm.delete_reservation(name)
    assert slurm.reservations(name) == []
    with pytest.raises(SlurmError):
        slurm.delete_reservation(name)


def test_running_job_node_list(lab, slurm):
    job = sbatch(lab, "-N2", "-J", "fleetctl|test", "--wrap", "sleep 120")
    try:
        running = wait_for(lambda: [j for j in slurm.jobs(job_ids=[job]) if j.state == "RUNNING"])
        assert len(running[0].nodes) == 2 and set(running[0].nodes) <= set(lab.nodes)
        assert running[0].name == "fleetctl|test" and running[0].user == "root"
        assert running[0].partition == "gpu"
        on_node = slurm.jobs(nodes=[running[0].nodes[1]])
        assert job in [j.job_id for j in on_node]
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), timeout=30)


def test_requeue(lab, slurm):
    job = sbatch(lab, "-N1", "--requeue", "--wrap", "sleep 120")
    try:
        wait_for(lambda: [j for j in slurm.jobs(job_ids=[job]) if j.state == "RUNNING"])
        slurm.requeue(job)
        record = wait_for(lambda: parse_record(scontrol(lab, "show", "job", job, "--oneliner"))
                          if "Restarts=1" in scontrol(lab, "show", "job", job, "--oneliner") else None)
        assert record["Restarts"] == "1"
    finally:
        subprocess.run(["scancel", job], env=lab.command_env(), timeout=30)


def test_inventory_command_shows_slurm_state(lab, slurm, capsys, monkeypatch):
    import json

    monkeypatch.setenv("COLUMNS", "200")  # no folding of the reason column

    slurm.drain([lab.nodes[1]], "nic-down", "eth1 lost carrier")
    assert cli_run(["inventory", "--site", str(lab.site_file), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    nodes = {n["name"]: n for n in data["nodes"]}
    assert sorted(nodes) == sorted(lab.nodes) and data["warnings"] == []
    drained = nodes[lab.nodes[1]]["slurm"]
    assert drained["drained"] and drained["ours"] and drained["reason"] == "fleetctl:nic-down eth1 lost carrier"
    # A job of an earlier test may still be completing there (IDLE+COMPLETING).
    assert nodes[lab.nodes[0]]["slurm"]["state"].split("+")[0] in ("IDLE", "MIXED", "ALLOCATED")
    assert cli_run(["inventory", "--site", str(lab.site_file), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert f"{len(lab.nodes)} nodes, {len(lab.nodes) - 1} available, 1 drained (1 by fleetctl)" in out
    assert "fleetctl:nic-down eth1 lost carrier" in out
