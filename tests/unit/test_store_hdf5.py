"""HDF5 run store: round trip, crash safety, and a clear DataError for every bad file."""

import json
import os

import h5py
import numpy as np
import pytest

from fleetctl.analysis.triangulate import triangulate
from fleetctl.analysis.windows import add_pair_figures, build_windows, host_clock
from fleetctl.errors import DataError
from fleetctl.model.fabric import PROBE_DTYPE
from fleetctl.store.reader import open_run
from fleetctl.store.runfile import SCHEMA_VERSION, RunWriter
from tests.support.fabrics import leaf_spine, path_table
from tests.support.synthetic import Fault
from tests.support.synthetic_run import synthetic_run


@pytest.fixture(scope="module")
def run_data():
    topo = leaf_spine(2, 2, 2, 2)
    pairs = [(a, b) for a in topo.nics for b in topo.nics if a.split(":")[0] != b.split(":")[0]]
    run = synthetic_run(topo, pairs, [Fault("leaf1->spine2", "loss", 0.05)], sports=4,
                        duration=4.0, seed=3)
    clock = host_clock(run.probes, run.nic_host, run.hosts, run.epoch_ns)
    win = build_windows(run.probes, run.flows, len(run.paths), len(topo.nics), run.nic_host,
                        2.0, run.epoch_ns, clock)
    add_pair_figures(win, run.probes, len(topo.nics), run.nic_host, run.epoch_ns, clock)
    return topo, run, clock, win


def write(path, run_data, *, findings=None):
    topo, run, clock, w = run_data
    with RunWriter(path, run_id="run-1", cluster="lab", parameters={"rate_hz": 20, "k": 3},
                   epoch_ns=run.epoch_ns) as wr:
        wr.write_topology(topo)
        wr.write_paths(run.paths)
        wr.write_flows(run.flows)
        half = len(run.probes) // 2  # appended in two batches, as an agent collector would
        wr.append_probes(run.probes[:half])
        wr.append_probes(run.probes[half:])
        wr.write_windows(w)
        wr.write_clock(clock)
        wr.write_findings(findings or [], "nnls")
    return path


def test_round_trip(tmp_path, run_data):
    topo, run, clock, w = run_data
    from fleetctl.model.fabric import WindowStats
    findings = triangulate(topo, run.paths, WindowStats(w.path_sent, w.path_lost, w.path_p50_us))
    assert [f["element"]["direction"] for f in findings] == ["leaf1->spine2"]
    path = write(tmp_path / "run.h5", run_data, findings=findings)
    assert sorted(os.listdir(tmp_path)) == ["run.h5"]
    with open_run(path) as r:
        a = r.attrs
        assert a["schema_version"] == SCHEMA_VERSION and a["complete"] is True
        assert a["run_id"] == "run-1" and a["cluster"] == "lab"
        assert a["parameters"] == {"rate_hz": 20, "k": 3} and a["epoch_ns"] == run.epoch_ns
        t2 = r.topology()
        assert [e.to_dict() for e in t2.elements] == [e.to_dict() for e in topo.elements]
        assert t2.switch_tier == topo.switch_tier
        p = r.paths()
        assert np.array_equal(p.indptr, run.paths.indptr)
        assert np.array_equal(p.elements, run.paths.elements)
        assert np.array_equal(r.probes(), run.probes)
        assert np.array_equal(r.flows(), run.flows)
        m = r.pair_figures()
        assert np.array_equal(m["src"], w.pair_src) and np.array_equal(m["dst"], w.pair_dst)
        assert np.array_equal(m["sent"], w.pair_sent)
        for k in ("loss", "p50_us", "p99_us"):
            assert np.allclose(m[k], getattr(w, f"pair_{k}"), equal_nan=True)
        c = r.clock()
        assert np.allclose(c["offset_s"], clock.offset) and len(c["pairs"]) == len(clock.pairs)
        assert r.findings() == json.loads(json.dumps(findings))
        # re-analysis from the file alone gives the same findings
        again = triangulate(t2, p, r.window_stats("p50"))
        assert json.loads(json.dumps(again)) == r.findings()


def test_plain_h5py_reads_it(tmp_path, run_data):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "r") as f:
        probes = f["probes"]
        assert probes.dtype == PROBE_DTYPE and probes.compression == "gzip"
        assert probes.chunks is not None
        nics = f["nics"][()]
        assert nics["name"][0].decode() == "node1:eth0"
        d = f["windows/pair_p50_us"][()]
        src, dst = f["windows/pair_src"][()], f["windows/pair_dst"][()]
        assert d.ndim == 2 and d.shape[1] == len(src) == len(dst)
        assert not (src == dst).any()  # a NIC never probes itself
        assert np.nanmedian(d) > 0


def test_exception_leaves_no_file(tmp_path, run_data):
    path = tmp_path / "run.h5"
    with pytest.raises(RuntimeError):
        with RunWriter(path, run_id="x", cluster="lab") as wr:
            wr.write_topology(run_data[0])
            raise RuntimeError("agent died")
    assert not path.exists() and os.listdir(tmp_path) == []


def test_killed_writer_leaves_only_tmp_which_is_refused(tmp_path, run_data):
    path = tmp_path / "run.h5"
    wr = RunWriter(path, run_id="x", cluster="lab")
    wr.write_topology(run_data[0])
    wr.f.flush()  # a kill -9 here: the .tmp is on disk, never renamed, never marked complete
    assert not path.exists()
    with pytest.raises(DataError, match="incomplete run"):
        open_run(wr.tmp)
    wr.abort()


def test_truncated_file(tmp_path, run_data):
    path = write(tmp_path / "run.h5", run_data)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(DataError, match="truncated or corrupt"):
        with open_run(path) as r:
            r.probes()


def test_not_hdf5_and_missing(tmp_path):
    p = tmp_path / "notes.h5"
    p.write_text("hello")
    with pytest.raises(DataError, match="not a readable HDF5 file"):
        open_run(p)
    with pytest.raises(DataError, match="run file not found"):
        open_run(tmp_path / "nope.h5")


def test_missing_dataset(tmp_path, run_data):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "a") as f:
        del f["paths/indptr"]
    with pytest.raises(DataError, match=r"dataset /paths/indptr is missing"):
        open_run(path)


@pytest.mark.parametrize("version,match", [(SCHEMA_VERSION + 1, "written by a newer fleetctl"),
                                           (0, "invalid schema version"),
                                           ("one", "not an integer")])
def test_wrong_version(tmp_path, run_data, version, match):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = version
    with pytest.raises(DataError, match=match):
        open_run(path)


def test_foreign_hdf5(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"] = [1, 2, 3]
    with pytest.raises(DataError, match="not a fleetctl mesh run"):
        open_run(path)


def test_optional_groups_missing_read_as_error_or_empty(tmp_path, run_data):
    path = tmp_path / "bare.h5"
    topo, run, _, _ = run_data
    with RunWriter(path, run_id="bare", cluster="lab") as wr:
        wr.write_topology(topo)
        wr.write_paths(run.paths)
        wr.write_flows(run.flows)
    with open_run(path) as r:
        assert r.findings() == [] and len(r.probes()) == 0
        with pytest.raises(DataError, match="/windows/path_sent is missing"):
            r.window_stats()
        with pytest.raises(DataError, match="unknown delay statistic"):
            r.window_stats("p90")


@pytest.mark.parametrize("damage,match", [
    (lambda f: f["paths/elements"].__setitem__(0, 10 ** 6), "element index is outside"),
    (lambda f: f["paths/indptr"].__setitem__(1, -5), "not a valid CSR pointer"),
    (lambda f: f["paths/src_nic"].__setitem__(0, 999), "NIC index is outside"),
])
def test_inconsistent_path_table(tmp_path, run_data, damage, match):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "a") as f:
        damage(f)
    with open_run(path) as r, pytest.raises(DataError, match=match):
        r.paths()


def test_inconsistent_elements_and_parameters(tmp_path, run_data):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "a") as f:
        els = f["elements"][()]
        i = next(k for k, e in enumerate(els) if e["type"] == b"link")
        els[i]["direction"] = b"ghost->node1:eth0"
        els[i + 1]["direction"] = b"node1:eth0->ghost"
        del f["elements"]
        f["elements"] = els
        f.attrs["parameters"] = "{not json"
    with open_run(path) as r:
        with pytest.raises(DataError, match="element table is inconsistent.*ghost"):
            r.topology()
        with pytest.raises(DataError, match="'parameters' is not JSON"):
            r.attrs


def test_a_schema_1_file_is_read_as_its_probed_pairs(tmp_path, run_data):
    """Schema 1 stored N x N matrices (NaN where not probed); they read as the pairs they held."""
    topo, run, clock, w = run_data
    path = write(tmp_path / "run.h5", run_data)
    n = len(topo.nics)
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 1
        g = f["windows"]
        for new, old in (("loss", "loss"), ("p50_us", "delay_p50_us"), ("p99_us", "delay_p99_us")):
            g.create_dataset(old, data=w.matrix(new, n))
        for name in ("pair_src", "pair_dst", "pair_sent", "pair_loss", "pair_p50_us", "pair_p99_us"):
            del g[name]
    with open_run(path) as r:
        m = r.pair_figures()
    order = np.lexsort((w.pair_dst, w.pair_src))  # the matrix's row-major order
    assert np.array_equal(m["src"], w.pair_src[order]) and np.array_equal(m["dst"], w.pair_dst[order])
    assert "sent" not in m
    for k in ("loss", "p50_us", "p99_us"):
        assert np.allclose(m[k], getattr(w, f"pair_{k}")[:, order], equal_nan=True)


def test_pair_indices_outside_the_nics_are_refused(tmp_path, run_data):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "a") as f:
        src = f["windows/pair_src"][()]
        src[0] = 10_000
        del f["windows/pair_src"]
        f["windows"].create_dataset("pair_src", data=src)
    with open_run(path) as r, pytest.raises(DataError, match="pair_src"):
        r.pair_figures()
