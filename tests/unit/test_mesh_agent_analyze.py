"""`fleetctl audit analyze FILE.h5` in-process: a stored run (synthetic records with skewed
clocks, written by the same code as `audit --mesh --out`) is re-analysed with any solver; bad
files give one clear line and exit 3, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.config.site import parse_site
from fleetctl.lab.sitefile import site_document, to_toml
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.mesh.pairs import select_pairs
from fleetctl.meshrun.analyze import RunData, analyze, write_run
from fleetctl.model.fabric import Topology
from tests.support.synthetic import Fault
from tests.support.synthetic_run import synthetic_run


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    layout = build_layout(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                                    clock_skew=False, slurm=False, ssh=False))
    site = parse_site(to_toml(site_document(layout, Path("/nonexistent-lab"), slurm_conf="",
                                            ssh={}, cpus=2)))
    topo = Topology.from_site(site)
    pairs = [(topo.nics[a], topo.nics[b]) for a, b in select_pairs(topo).pairs]
    syn = synthetic_run(topo, pairs, [Fault("leaf1->spine2", "loss", 0.04)], sports=8, seed=3)
    run = RunData("syn-1", "lab", topo, syn.paths, syn.flows, syn.probes, syn.epoch_ns,
                  {"window_s": 3.0, "duration": 6.0, "solver": "nnls"})
    path = tmp_path_factory.mktemp("runs") / "run.h5"
    write_run(path, run, analyze(run, "nnls", 3.0))
    return path


@pytest.mark.parametrize("solver", ["nnls", "l1", "vote"])
def test_analyze_names_the_fault_with_each_solver(stored, capsys, solver):
    rc = cli_run(["audit", "analyze", str(stored), "--solver", solver, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 2 and data["run_id"] == "syn-1" and data["summary"]["solver"] == solver
    f = data["findings"][0]
    assert f["element"] == {"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2"}
    assert {"metric", "severity", "confidence", "evidence"} <= set(f)


def test_analyze_human_view_and_rewrite(stored, tmp_path, capsys):
    out = tmp_path / "again.h5"
    rc = cli_run(["audit", "analyze", str(stored), "--out", str(out), "--no-color"])
    text = capsys.readouterr().out
    assert rc == 2 and "leaf1--spine2 (leaf1->spine2)" in text and "link directions" in text
    assert out.exists()


def test_bad_files_are_one_line_errors(stored, tmp_path, capsys):
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(stored.read_bytes()[:5000])
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5\n")
    for path, words in ((tmp_path / "missing.h5", "not found"), (truncated, "truncated"),
                        (text, "not a readable HDF5")):
        rc = cli_run(["audit", "analyze", str(path)])
        err = capsys.readouterr().err
        assert rc == 3 and words in err and "Traceback" not in err and err.count("\n") == 1
    assert cli_run(["audit", "analyze", str(stored), "--solver", "nope"]) == 3
    assert "unknown solver" in capsys.readouterr().err
    assert cli_run(["audit", "analyze"]) == 3
