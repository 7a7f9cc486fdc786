"""Measurement integrity: loss the agents' own health counters explain is set aside, reported as a
`probe.overload` warning (exit 1), never as a network finding; the /health group of the run file
round-trips with validation and `audit analyze` of a stored run gives the same verdict."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from fleetctl.analysis.integrity import overload_marks, probes_kept
from tests.support.synthetic import Fault
from tests.support.synthetic_run import EPOCH_NS, synthetic_run
from fleetctl.meshrun.analyze import exit_code
from fleetctl.config.site import parse_site
from fleetctl.errors import DataError
from fleetctl.lab.sitefile import site_document, to_toml
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.meshrun.analyze import RunData, analyze, read_run, to_dict, write_run
from fleetctl.mesh.health import HEALTH_FIELDS
from fleetctl.mesh.pairs import select_pairs
from fleetctl.model.fabric import Topology

DURATION = 6.0


@pytest.fixture(scope="module")
def topo():
    layout = build_layout(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                                    clock_skew=False, slurm=False, ssh=False))
    site = parse_site(to_toml(site_document(layout, Path("/nonexistent-lab"), slurm_conf="",
                                            ssh={}, cpus=2)))
    return Topology.from_site(site)


def health_rows(overloaded: set[int], **bad) -> dict:
    """A health table of DURATION 1 s windows; windows in `overloaded` get the counters `bad`."""
    rows = []
    for i in range(int(DURATION) + 1):
        row = dict.fromkeys(HEALTH_FIELDS, 0)
        row.update(t_start_ns=EPOCH_NS + i * 10**9, duration_s=1.0, sent=100, late_p50_us=500,
                   late_p99_us=4000, cpu_s=0.02)
        if i in overloaded:
            row.update(bad)
        rows.append([row[f] for f in HEALTH_FIELDS])
    return {"fields": list(HEALTH_FIELDS), "windows": rows, "window_s": 1.0}


def overloaded_run(topo, victim: str, health: bool, fault: list | None = None) -> RunData:
    """A clean synthetic run, except that `victim`'s agent dropped 40 % of what reached it in
    seconds 1-3 (its socket overflowed): what an overloaded responder looks like."""
    pairs = [(topo.nics[a], topo.nics[b]) for a, b in select_pairs(topo).pairs]
    syn = synthetic_run(topo, pairs, fault or [], sports=8, duration=DURATION, seed=5)
    probes = syn.probes.copy()
    hosts = syn.hosts
    v = hosts.index(victim)
    t = (probes["t_send"] - EPOCH_NS) * 1e-9
    to_victim = (syn.nic_host[probes["dst_nic"]] == v) & (t > 1.0) & (t < 3.0)
    rng = np.random.default_rng(1)
    drop = to_victim & (rng.random(probes.size) < 0.4) & (probes["lost"] == 0)
    probes["lost"][drop] = 1
    for k in ("t_remote_rx", "t_remote_tx", "t_recv"):
        probes[k][drop] = 0
    tables = {}
    if health:
        tables = {h: health_rows(set()) for h in hosts}
        tables[victim] = health_rows({1, 2}, rxq_ovfl=300, udp_rcvbuf_errors=300, late_p99_us=2e5)
    return RunData("syn-ovl", "lab", topo, syn.paths, syn.flows, probes, syn.epoch_ns,
                   {"window_s": 3.0, "duration": DURATION, "solver": "nnls", "rate": 20.0},
                   health=tables)


def network(findings):
    return [f for f in findings if f.get("category") != "probe"]


def test_without_health_the_overload_reads_as_a_network_fault(topo):
    """The control: the same records without the agents' counters blame the victim's NICs."""
    run = overloaded_run(topo, "node2", health=False)
    a = analyze(run, "nnls", 3.0)
    assert network(a.findings), "the injected drops must look like a fault without health data"
    assert any("node2" in f["element"]["id"] for f in network(a.findings))


def test_overloaded_agent_is_a_probe_warning_not_a_network_fault(topo, tmp_path):
    run = overloaded_run(topo, "node2", health=True)
    a = analyze(run, "nnls", 3.0)
    assert network(a.findings) == []
    probe = [f for f in a.findings if f.get("category") == "probe"]
    assert [f["check"] for f in probe] == ["probe.overload"]
    f = probe[0]
    assert f["element"] == {"type": "host", "id": "node2"} and f["severity"] == "warning"
    assert f["evidence"]["overloaded_windows"] == 2
    assert f["evidence"]["counters"] == {"rxq_ovfl": 600, "udp_rcvbuf_errors": 600}
    assert f["evidence"]["probes_set_aside"] > 0 and "--rate" in f["fix"]
    data = to_dict(run, a)
    assert exit_code(data) == 1 and data["summary"]["integrity"]["hosts_overloaded"] == ["node2"]
    # stored and re-read: the /health group comes back, the verdict is the same
    path = write_run(tmp_path / "run.h5", run, a)
    back = read_run(path)
    assert set(back.health) == set(run.health)
    assert back.health["node2"]["windows"] == run.health["node2"]["windows"]
    again = analyze(back, "nnls", 3.0)
    assert [(f["element"], f["metric"]) for f in again.findings] == \
        [(f["element"], f["metric"]) for f in a.findings]


def test_a_real_fault_is_still_named_beside_an_overloaded_agent(topo):
    run = overloaded_run(topo, "node2", health=True, fault=[Fault("leaf1->spine2", "loss", 0.05)])
    a = analyze(run, "nnls", 3.0)
    net = network(a.findings)
    assert [f["element"]["id"] for f in net] == ["leaf1--spine2"], net
    assert net[0]["significance"]["q_value"] <= 0.01
    assert exit_code(to_dict(run, a)) == 2


def test_marks_ignore_unknown_counters_and_catch_lateness_and_cpu():
    clean = health_rows(set(), udp_in_errors=-1)
    rows = health_rows({0}, udp_in_errors=-1)  # -1: the host does not offer the counter
    assert overload_marks({"a": rows}, ["a"])["a"].overloaded == 0
    late = health_rows({2}, late_p99_us=150_000)
    cpu = health_rows({3, 4}, cpu_s=0.95)
    marks = overload_marks({"a": clean, "b": late, "c": cpu}, ["a", "b", "c"])
    assert (marks["a"].overloaded, marks["b"].overloaded, marks["c"].overloaded) == (0, 1, 2)
    assert marks["c"].cpu_pct_max == 95.0


def test_probes_kept_drops_sender_and_responder_windows():
    from fleetctl.model.fabric import PROBE_DTYPE

    p = np.zeros(4, dtype=PROBE_DTYPE)
    p["src_nic"] = [0, 1, 0, 1]
    p["dst_nic"] = [1, 0, 1, -1]  # the last: a loop probe, no responder
    p["t_send"] = EPOCH_NS + np.array([0.5, 2.5, 4.5, 2.6]) * 1e9
    marks = overload_marks({"b": health_rows({2}, skipped=7)}, ["a", "b"])
    keep = probes_kept(p, np.array([0, 1]), ["a", "b"], marks)
    assert keep.tolist() == [True, False, True, False]
    assert marks["b"].probes_set_aside == 2


def test_reader_refuses_a_bad_health_group(topo, tmp_path):
    run = overloaded_run(topo, "node2", health=True)
    path = write_run(tmp_path / "run.h5", run, analyze(run, "nnls", 3.0))
    for name, change in (("rows", lambda g: g["rows"].__setitem__((0, 0), np.nan)),
                         ("host", lambda g: g["host"].__setitem__(0, 99)),
                         ("fields", lambda g: g.attrs.__setitem__("fields", '["a", "a"]'))):
        bad = tmp_path / f"bad-{name}.h5"
        bad.write_bytes(path.read_bytes())
        with h5py.File(bad, "r+") as f:
            change(f["health"])
        with pytest.raises(DataError, match="/health"):
            read_run(bad)


def test_probes_to_an_agent_not_yet_running_are_set_aside():
    """16 agents starting on 2 cores: the last one starts ~0.4 s after the others send to it."""
    from fleetctl.model.fabric import PROBE_DTYPE

    late = health_rows(set())
    for row in late["windows"]:
        row[0] += 400_000_000  # b's agent started 0.4 s late
    p = np.zeros(3, dtype=PROBE_DTYPE)
    p["src_nic"], p["dst_nic"] = [0, 0, 1], [1, 1, 0]
    p["t_send"] = EPOCH_NS + np.array([0.2, 0.6, 0.2]) * 1e9
    marks = overload_marks({"a": health_rows(set()), "b": late}, ["a", "b"])
    assert probes_kept(p, np.array([0, 1]), ["a", "b"], marks).tolist() == [False, True, True]
    assert marks["b"].probes_outside_alive == 1 and marks["b"].overloaded == 0


def test_audit_analyze_of_a_stored_overloaded_run_warns_and_exits_1(topo, tmp_path, capsys):
    import json

    from fleetctl.cli import run as cli_run

    run = overloaded_run(topo, "node2", health=True)
    path = write_run(tmp_path / "run.h5", run, analyze(run, "nnls", 3.0))
    rc = cli_run(["audit", "analyze", str(path), "--no-color"])
    text = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert rc == 1 and "probe.overload node2" in text and "no network finding" in text
    assert "loss floor (95 % confidence)" in text and "not measurable with this run" in text
    rc = cli_run(["audit", "analyze", str(path), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["summary"]["network_findings"] == 0
    assert data["summary"]["probe_warnings"] == 1
    assert data["summary"]["loss_floor"]["links"]["loss_floor_pct_max"] > 0


def test_a_stall_marks_its_window_and_reaches_back_one_echo_timeout():
    """A responder not running for 0.6 s answered probes late (lost at their senders): its window
    is overloaded, and so are probes sent up to one echo timeout before that window (their echoes
    were due while it stood still)."""
    from fleetctl.analysis.integrity import IntegrityThresholds
    from fleetctl.model.fabric import PROBE_DTYPE

    stalled = health_rows({3}, stall_max_us=600_000)
    p = np.zeros(4, dtype=PROBE_DTYPE)
    p["src_nic"], p["dst_nic"] = [0, 0, 0, 0], [1, 1, 1, 1]
    p["t_send"] = EPOCH_NS + np.array([1.5, 2.2, 3.5, 4.5]) * 1e9
    marks = overload_marks({"b": stalled}, ["a", "b"], IntegrityThresholds(echo_timeout_s=1.0))
    assert marks["b"].overloaded == 1 and marks["b"].stall_us_max == 600_000
    assert probes_kept(p, np.array([0, 1]), ["a", "b"], marks).tolist() == \
        [True, False, False, True]
    quiet = health_rows({3}, stall_max_us=200_000)  # below the agent's own skip limit
    assert overload_marks({"b": quiet}, ["b"])["b"].overloaded == 0


def test_a_host_slow_on_all_its_nics_is_a_probe_warning(topo):
    """A busy host slows what it sends on every NIC alike (software timestamps): a
    `probe.host_delay` warning about the measurement, never a link finding; one NIC slow alone is
    still a network finding."""
    pairs = [(topo.nics[a], topo.nics[b]) for a, b in select_pairs(topo).pairs]

    def audit(faults):
        syn = synthetic_run(topo, pairs, faults, sports=8, duration=DURATION, seed=5)
        run = RunData("syn-hd", "lab", topo, syn.paths, syn.flows, syn.probes, syn.epoch_ns,
                      {"window_s": 3.0, "duration": DURATION, "solver": "nnls", "rate": 20.0})
        return run, analyze(run, "nnls", 3.0)

    # slow both ways (a one-way slowdown of a whole host is, to a one-shot clock fit, an offset)
    run, a = audit([Fault("node2", "delay", 60.0)])
    assert network(a.findings) == []
    (f,) = a.findings
    assert f["check"] == "probe.host_delay" and f["element"] == {"type": "host", "id": "node2"}
    assert f["severity"] == "warning" and f["evidence"]["side"] == "both"
    assert "not blamed" in f["note"] and exit_code(to_dict(run, a)) == 1
    run, a = audit([Fault("node2:eth0->leaf1", "delay", 60.0)])
    assert [f["element"].get("direction") for f in a.findings] == ["node2:eth0->leaf1"]
    assert exit_code(to_dict(run, a)) == 2


def test_marks_judged_together_equal_marks_judged_one_by_one():
    """overload_marks judges hosts sharing their fields in one array (lens at 1,280 hosts);
    host_marks judges one host: the same marks, host by host."""
    from dataclasses import asdict

    from fleetctl.analysis.integrity import IntegrityThresholds, host_marks, overload_marks
    from fleetctl.mesh.health import HEALTH_FIELDS

    rng = np.random.default_rng(5)
    fields = list(HEALTH_FIELDS)
    health, hosts = {}, [f"n{i}" for i in range(40)]
    for i, h in enumerate(hosts):
        rows = []
        for k in range(int(rng.integers(1, 12))):
            row = dict.fromkeys(fields, 0)
            row.update(t_start_ns=1_800_000_000_000_000_000 + k * 250_000_000 + i, duration_s=0.25,
                       late_p99_us=float(rng.choice([50.0, 200_000.0], p=[0.9, 0.1])),
                       rxq_ovfl=int(rng.choice([0, 3, -1], p=[0.8, 0.1, 0.1])),
                       cpu_s=float(rng.uniform(0, 0.25)))
            rows.append([row[f] for f in fields])
        if i % 13 != 7:  # some hosts without a table
            health[h] = {"fields": fields, "windows": rows}
    health["odd"] = {"fields": ["t_start_ns", "duration_s", "skipped"],
                     "windows": [[1.8e18, 0.25, 2]]}
    th = IntegrityThresholds(echo_timeout_s=0.2)
    marks = overload_marks(health, hosts + ["odd"], th)
    assert list(marks) == [h for h in hosts + ["odd"] if h in health]
    assert any(m.overloaded for m in marks.values()) and any(not m.overloaded for m in marks.values())
    for h, m in marks.items():
        one = host_marks(h, health[h]["fields"], health[h]["windows"], th)
        assert asdict(m) == asdict(one), h
