"""The coordinator's outputs together (fleetctl.lens.outputs): every event record in the log and,
with a receiver down, waiting in the webhook spool; a window's figures on /metrics."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetctl.config.site import parse_site
from fleetctl.lab.sitefile import site_document, to_toml
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.lens.eventlog import read_events
from fleetctl.lens.options import LensOptions
from fleetctl.lens.outputs import Outputs
from fleetctl.mesh.pairs import select_pairs
from fleetctl.meshrun.analyze import reanalyze
from fleetctl.model.fabric import Topology
from tests.cli.test_lens_cli import record
from tests.unit.test_lens_window import run, windows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_events_reach_log_and_spool_with_the_receiver_down(tmp_path):
    dead = free_port()  # nothing listens there
    opts = LensOptions(state_dir=str(tmp_path), webhook_url=f"http://127.0.0.1:{dead}/hook",
                       segments=False)
    out = Outputs(opts, log=lambda _m: None)
    try:
        out.event(record(1))
        out.event(record(1, "close"))
        assert [e["state"] for e in read_events(tmp_path / "events.jsonl")] == ["closed"]
        assert out.webhook.pending == 2
    finally:
        out.close()
    # a restart finds both still undelivered
    again = Outputs(opts, log=lambda _m: None)
    try:
        assert again.webhook.pending == 2
        assert [e["id"] for e in again.open_events()] == []
    finally:
        again.close()


def test_window_figures_on_metrics(tmp_path):
    pytest.importorskip("prometheus_client")
    port = free_port()
    opts = LensOptions(state_dir=str(tmp_path), metrics_port=port, segments=False)
    out = Outputs(opts, log=lambda _m: None)
    try:
        doc = {"t_end": 1e9, "elements": [{"type": "link", "id": "leaf1--spine2",
                                           "direction": "leaf1->spine2", "loss_pct": 2.5,
                                           "delay_p50_us": 12.0, "delay_p99_us": 30.0,
                                           "probes": 4000}],
               "agents": [{"host": "node1", "alive": True, "overloaded": False, "pps": 5600.0,
                           "cpu_pct": 7.5}],
               "clock": [{"host": "node1", "offset_us": 0.0, "drift_ppm": 0.0}]}
        out.window(doc, None, {}, {}, [record(1)])
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "leaf1--spine2" in text and "0.025" in text  # loss ratio, base units
        assert "fleetctl_lens_element_lost_probes_total{" in text and " 100.0" in text  # 2.5 % of 4000
        assert 'severity="critical"' in text
    finally:
        out.close()


def test_segments_are_run_files_audit_analyze_reads(tmp_path):
    """Opt-in segments (lens.segments): the windows' records end up in a run file that
    `audit analyze` reads like any probe run."""
    lab = build_layout(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                                 clock_skew=False, slurm=False, ssh=False))
    site = parse_site(to_toml(site_document(lab, Path("/nonexistent-lab"), slurm_conf="",
                                            ssh={}, cpus=2)))
    topo = Topology.from_site(site)
    pairs = [(topo.nics[a], topo.nics[b]) for a, b in select_pairs(topo).pairs]
    syn = run((topo, pairs), duration=3.0)
    plan = SimpleNamespace(topo=topo, paths=syn.paths, flows=syn.flows, rate=40.0,
                           plan=SimpleNamespace(to_dict=lambda: {"design": "full-mesh"}),
                           disc=SimpleNamespace(switch_results={}))
    opts = LensOptions(state_dir=str(tmp_path), segments=True)
    out = Outputs(opts, log=lambda m: (_ for _ in ()).throw(AssertionError(m)), cluster=site)
    out.set_plan(plan)
    for a, b, probes in windows(syn):
        out.window({"t_end": b}, probes, {}, {"t_end": b}, [])
    out.close()
    files = sorted((tmp_path / "segments").glob("lens-*.h5"))
    assert len(files) == 1
    data = reanalyze(files[0])
    assert data["summary"]["probes"] == syn.probes.size and data["findings"] == []
