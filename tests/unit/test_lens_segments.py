"""Rolling lens segments: windows of real (synthetic) probe records appended, rolled by time into
complete run files that the store reader and `fleetctl audit analyze` read; a crash's partial file
finalized or removed; retention by count and age; one writer per directory."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from fleetctl.cli import run as cli_run
from fleetctl.config.site import parse_site
from fleetctl.errors import DataError, UsageError
from fleetctl.lab.sitefile import site_document, to_toml
from fleetctl.lab.topology import LabParams, build_layout
from fleetctl.lens.segments import SegmentLayout, SegmentPolicy, SegmentWriter
from fleetctl.mesh.health import HEALTH_FIELDS
from fleetctl.mesh.pairs import select_pairs
from fleetctl.model.fabric import Topology
from fleetctl.store.reader import open_run
from tests.support.synthetic import Fault
from tests.support.synthetic_run import EPOCH_NS, synthetic_run

DURATION = 20.0
WINDOW_S = 5.0
T0 = EPOCH_NS / 1e9
PARAMS = {"window_s": WINDOW_S, "solver": "nnls", "statistic": "p50"}


@pytest.fixture(scope="module")
def fabric():
    layout = build_layout(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, gpus_per_host=0,
                                    clock_skew=False, slurm=False, ssh=False))
    site = parse_site(to_toml(site_document(layout, Path("/nonexistent-lab"), slurm_conf="",
                                            ssh={}, cpus=2)))
    topo = Topology.from_site(site)
    pairs = [(topo.nics[a], topo.nics[b]) for a, b in select_pairs(topo).pairs]
    syn = synthetic_run(topo, pairs, [Fault("leaf1->spine2", "loss", 0.05)], sports=8,
                        duration=DURATION, rate_hz=20.0, seed=3)
    return topo, syn


def windows(syn):
    """The run's records cut into WINDOW_S windows by send time, as lens would receive them."""
    t = (syn.probes["t_send"] - EPOCH_NS) * 1e-9
    n = int(DURATION / WINDOW_S)
    for i in range(n):
        sel = (t >= i * WINDOW_S if i else t < np.inf) & (t < (i + 1) * WINDOW_S if i < n - 1
                                                          else t < np.inf)
        yield i, syn.probes[sel], T0 + (i + 1) * WINDOW_S


def health(syn, i):
    """One 1 s health row per host and second of window i (all quiet)."""
    out = {}
    for h in syn.hosts:
        rows = []
        for s in range(int(WINDOW_S)):
            row = dict.fromkeys(HEALTH_FIELDS, 0)
            row.update(t_start_ns=EPOCH_NS + int((i * WINDOW_S + s) * 1e9), duration_s=1.0,
                       sent=100, cpu_s=0.01)
            rows.append([row[f] for f in HEALTH_FIELDS])
        out[h] = {"fields": list(HEALTH_FIELDS), "windows": rows, "window_s": 1.0}
    return out


def writer(directory, topo, syn, **kw):
    kw = {"cluster": "lab", "parameters": PARAMS, "segment_s": 10.0, "clock": lambda: T0, **kw}
    policy = SegmentPolicy(**{k: kw.pop(k) for k in ("segment_s", "retention", "retention_s", "prefix")
                              if k in kw})
    return SegmentWriter(directory, SegmentLayout(topo, syn.paths, syn.flows), policy=policy, **kw)


def test_segments_roll_and_read_back(tmp_path, fabric, capsys):
    topo, syn = fabric
    seg = writer(tmp_path, topo, syn)
    for i, probes, t_end in windows(syn):
        seg.append(probes, health(syn, i), {"t_end": t_end})
        assert not list(tmp_path.glob("*.h5")) or i >= 2  # the first roll comes with window 2
    last = seg.close()
    files = seg.segments()
    assert len(files) == 2 and files[-1] == last and seg.written == files
    assert not list(tmp_path.glob(".*.tmp"))  # nothing partial left behind
    back = []
    for f in files:
        with open_run(f) as run:
            assert run.attrs["complete"] and run.attrs["cluster"] == "lab"
            assert run.topology().elements == topo.elements
            back.append(run.probes())
            assert set(run.health()) == set(syn.hosts)
            assert len(run.health()[syn.hosts[0]]["windows"]) == 2 * int(WINDOW_S)
            assert json.loads(run.f.attrs["lens"])["windows"] == 2
            assert 9.0 < run.attrs["parameters"]["duration"] < 10.1  # host clocks differ by ms
    assert np.array_equal(np.sort(np.concatenate(back), order=["flow", "seq"]),
                          np.sort(syn.probes, order=["flow", "seq"]))
    for f in files:  # each segment on its own names the lossy link, as a probe run would
        rc = cli_run(["audit", "analyze", str(f), "--format", "json"])
        data = json.loads(capsys.readouterr().out)
        assert rc == 2 and data["run_id"] == f.stem
        assert data["findings"][0]["element"]["id"] == "leaf1--spine2"
        assert data["summary"]["integrity"]["hosts_with_health"] == len(syn.hosts)
    assert cli_run(["audit", "analyze", str(files[0]), "--no-color"]) == 2  # the human view
    assert "leaf1--spine2 (leaf1->spine2)" in capsys.readouterr().out


def test_roll_on_demand_layout_change_and_empty(tmp_path, fabric):
    topo, syn = fabric
    seg = writer(tmp_path, topo, syn, segment_s=3600)
    assert seg.roll() is None  # nothing open
    seg.append(syn.probes[:0], None, {"t_end": T0})
    assert seg.roll() is None  # no empty segment
    seg.append(syn.probes[:0], health(syn, 0), {"t_end": T0})
    assert seg.roll() is None and not list(tmp_path.glob("*.h5"))  # health alone: no segment
    _, probes, t_end = next(windows(syn))
    seg.append(probes, None, {"t_end": t_end})
    first = seg.set_layout(topo, syn.paths, syn.flows)
    seg.append(probes, None, {"t_end": t_end + 1})  # same start second: a distinct name
    second = seg.close()
    assert first != second and first.exists() and second.exists()
    with open_run(second) as run:
        assert run.probes().size == probes.size


def test_invalid_records_are_dropped_and_counted(tmp_path, fabric):
    topo, syn = fabric
    seg = writer(tmp_path, topo, syn)
    _, probes, t_end = next(windows(syn))
    bad = probes[:4].copy()
    bad["flow"][0] = 10**6
    bad["src_nic"][1] = -5
    bad["t_send"][2] = 0
    bad["t_recv"][3] = EPOCH_NS + 10**15  # eleven days later
    seg.append(np.concatenate([probes, bad]), None, {"t_end": t_end})
    path = seg.close()
    with open_run(path) as run:
        assert run.probes().size == probes.size
        assert json.loads(run.f.attrs["lens"])["records_dropped"] == 4
    with pytest.raises(DataError):
        SegmentWriter(tmp_path / "x", SegmentLayout(topo, syn.paths, syn.flows),
                      cluster="lab").append(np.zeros(3, dtype=[("a", "f4")]))


def _crash(directory: str, topo, syn, windows_before: int, torn: bool) -> None:
    """A lens that dies without closing (os._exit: no cleanup, no atexit). Forked: the arguments
    are the parent's objects, never pickled."""
    seg = writer(directory, topo, syn, segment_s=3600)
    for i, probes, t_end in list(windows(syn))[:windows_before]:
        seg.append(probes, health(syn, i), {"t_end": t_end})
    if torn:  # the crash hit between a resize and its write: zero rows at the end
        seg._wr._probes.resize((seg._wr._probes.shape[0] + 100,))
        seg._wr.f["health/host"].resize((seg._wr.f["health/host"].shape[0] + 3,))
        seg._wr.f.flush()
    os._exit(0)


@pytest.mark.parametrize("torn", [False, True])
def test_crash_leaves_a_partial_that_a_restart_finalizes(tmp_path, fabric, capsys, torn):
    topo, syn = fabric
    p = multiprocessing.get_context("fork").Process(target=_crash, args=(str(tmp_path), topo, syn, 2, torn))
    p.start()
    p.join(60)
    partial = list(tmp_path.glob(".lens-*.h5.*.tmp"))
    assert p.exitcode == 0 and len(partial) == 1 and not list(tmp_path.glob("*.h5"))
    with pytest.raises(DataError, match="incomplete"):
        open_run(partial[0])
    junk = tmp_path / ".lens-20270101T000000Z.h5.abcdefgh.tmp"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(3000))  # died inside HDF5's first write
    seg = writer(tmp_path, topo, syn)
    assert [p.name for p in seg.removed] == [junk.name] and len(seg.recovered) == 1
    seg.close()
    assert not list(tmp_path.glob(".*.tmp"))
    path = seg.recovered[0]
    sent = (syn.probes["t_send"] - EPOCH_NS) * 1e-9 < 2 * WINDOW_S  # windows 0 and 1
    with open_run(path) as run:
        assert run.attrs["recovered"] and run.probes().size == int(sent.sum())
        assert len(run.health()[syn.hosts[0]]["windows"]) == 2 * int(WINDOW_S)
    assert cli_run(["audit", "analyze", str(path), "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["findings"][0]["element"]["id"] == "leaf1--spine2"


def test_retention_by_count_and_age(tmp_path, fabric):
    topo, syn = fabric
    now = [T0]
    seg = writer(tmp_path, topo, syn, segment_s=5.0, retention=3, clock=lambda: now[0])
    for i, probes, t_end in windows(syn):  # every window a segment of its own
        seg.append(probes, None, {"t_end": t_end})
    seg.close()
    kept = seg.segments()
    assert len(kept) == 3 and kept == seg.written[-3:]
    for k, p in enumerate(kept):  # closed 3, 2 and 1 hours ago
        os.utime(p, (T0 - (3 - k) * 3600, T0 - (3 - k) * 3600))
    seg = writer(tmp_path, topo, syn, retention_s=2.5 * 3600)
    assert seg.segments() == kept[1:]
    seg.close()


def test_one_writer_per_directory_and_bounds(tmp_path, fabric):
    topo, syn = fabric
    seg = writer(tmp_path, topo, syn)
    with pytest.raises(DataError, match="in use"):
        writer(tmp_path, topo, syn)
    seg.close()
    writer(tmp_path, topo, syn).close()  # released by close
    for bad in ({"segment_s": 0.5}, {"segment_s": 10**6}, {"retention": 0},
                {"retention_s": 1}, {"prefix": "../x"}):
        with pytest.raises(UsageError):
            writer(tmp_path / "b", topo, syn, **bad)


def test_partial_file_is_chunked_and_resizable(tmp_path, fabric):
    topo, syn = fabric
    seg = writer(tmp_path, topo, syn)
    _, probes, t_end = next(windows(syn))
    seg.append(probes, health(syn, 0), {"t_end": t_end})
    with h5py.File(seg._wr.tmp, "r") as f:  # what a crash would leave is readable right now
        assert f["probes"].shape == probes.shape and f["probes"].maxshape == (None,)
        assert f["health/rows"].chunks is not None
    seg.abort()
    assert not list(tmp_path.glob(".*.tmp"))


def _damaged(path: Path, how: str) -> None:
    """A partial segment as a crash, a bug or a user could leave it."""
    from fleetctl.store.runfile import FORMAT

    with h5py.File(path, "w") as f:
        f.attrs["format"] = FORMAT
        if how == "probes is a group":
            f.create_group("probes").create_dataset("x", data=[1, 2, 3])
        elif how == "probes without t_send":
            f.create_dataset("probes", data=np.arange(10), maxshape=(None,))
        elif how == "probes of strings":
            f.create_dataset("probes", data=np.array([b"a", b"b"]), maxshape=(None,))
        elif how == "nested parameters":
            f.create_dataset("probes", data=np.ones(4, dtype=[("t_send", "<i8")]),
                             maxshape=(None,))
            f.attrs["parameters"] = "[" * 60_000
        elif how == "health is a dataset":
            f.create_dataset("probes", data=np.ones(4, dtype=[("t_send", "<i8")]),
                             maxshape=(None,))
            f.create_dataset("health", data=[1])


DAMAGE = ["probes is a group", "probes without t_send", "probes of strings", "nested parameters",
          "health is a dataset"]


def test_any_damaged_partial_segment_is_set_aside_never_a_failed_start(tmp_path, fabric):
    topo, syn = fabric
    partials = []
    for i, how in enumerate(DAMAGE):
        p = tmp_path / f".lens-2027010{i + 1}T000000Z.h5.abcdefgh.tmp"
        _damaged(p, how)
        partials.append(p)
    fifo = tmp_path / ".lens-20270201T000000Z.h5.fifo0000.tmp"
    os.mkfifo(fifo)  # not a regular file: never opened, never removed
    logs: list[str] = []
    seg = writer(tmp_path, topo, syn, log=logs.append)
    assert sorted(seg.removed) == sorted(partials) and not seg.recovered
    assert not any(p.exists() for p in partials) and fifo.exists()
    assert len(logs) == len(DAMAGE) and all("damaged partial segment" in m for m in logs)
    _, probes, t_end = next(windows(syn))
    seg.append(probes, None, {"t_end": t_end})  # and the writer works
    assert seg.close().exists()
