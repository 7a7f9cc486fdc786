"""Run files are untrusted input: every damaged or hostile file gives a DataError naming the file,
never a traceback, a MemoryError, silent truncation or a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

from fleetctl.errors import DataError
from fleetctl.meshrun.analyze import read_run
from fleetctl.store.reader import open_run

from test_store_hdf5 import run_data, write  # noqa: F401  (the module-scoped fixture)


def read_all(path):
    """Everything `audit analyze` reads, and every table of the reader API."""
    with open_run(path) as r:
        r.attrs, r.topology(), r.paths(), r.flows(), r.probes(), r.findings()
        if "windows" in r.f:
            r.window_stats("p50"), r.pair_figures()
        if "clock" in r.f:
            r.clock()
    read_run(path)


def damaged(tmp_path, run_data, change):
    path = write(tmp_path / "run.h5", run_data)
    with h5py.File(path, "a") as f:
        change(f)
    return path


def replace(name, data, **kw):
    def change(f):
        del f[name]
        f.create_dataset(name, data=data, **kw)
    return change


def set_field(name, field, value, row=0):
    def change(f):
        table = f[name][()]
        table[field][row] = value
        f[name][...] = table
    return change


def attr(name, value):
    def change(f):
        f.attrs[name] = value
    return change


def huge_probes(f):
    """A chunked dataset that declares 1e11 records and stores none: a few bytes on disk."""
    dtype = f["probes"].dtype
    del f["probes"]
    f.create_dataset("probes", shape=(10**11,), dtype=dtype, chunks=(1024,))


CASES = [
    ("complete is a string", attr("complete", "no"), "incomplete run"),
    ("complete is 0", attr("complete", 0), "incomplete run"),
    ("format is an array", attr("format", np.arange(3)), "not a fleetctl mesh run"),
    ("epoch_ns is text", attr("epoch_ns", "yesterday"), "epoch_ns attribute is not a time"),
    ("float indptr", lambda f: replace("paths/indptr", f["paths/indptr"][()].astype(np.float64) + 0.5)(f),
     "/paths/indptr: has dtype float64, expected an integer"),
    ("string elements", replace("paths/elements", np.array([b"a", b"b"])), "/paths/elements: has dtype"),
    ("a NIC index out of range in /flows", set_field("flows", "src_nic", 10**6), "/flows: a src_nic is outside"),
    ("a path index out of range in /flows", set_field("flows", "fwd_path", 10**6), "/flows: a path index"),
    ("a NIC index out of range in /probes", set_field("probes", "dst_nic", 10**6), "/probes: a dst_nic"),
    ("a negative NIC index in /probes", set_field("probes", "src_nic", -7), "/probes: a src_nic"),
    ("an unknown flow in /probes", set_field("probes", "flow", 10**8), "a probe names a flow"),
    ("an absurd lost code", set_field("probes", "lost", 200), "a lost value is not"),
    ("an absurd timestamp", set_field("probes", "t_send", 2**62), "more than a day away"),
    ("a negative timestamp", set_field("probes", "t_recv", -5), "more than a day away"),
    ("probes declare 1e11 rows", huge_probes, "/probes: declares 100000000000 entries"),
    ("nics is a group", lambda f: (f.__delitem__("nics"), f.create_group("nics")), "/nics: is a group"),
    ("nics without a host field", replace("nics", np.array([(b"a",)], dtype=[("name", "S4")])),
     "missing host"),
    ("a 2-D indptr", replace("paths/indptr", np.zeros((2, 2), dtype=np.int64)), "expected 1 dimension"),
    ("parameters a list", attr("parameters", "[1, 2]"), "'parameters' is not a JSON object"),
    ("a window of a nanosecond", attr("parameters", json.dumps({"window_s": 1e-9})), "'window_s' must be"),
    ("solver is a number", attr("parameters", json.dumps({"solver": 3})), "'solver' is not a valid name"),
    ("switch_probes not booleans", attr("switch_probes", json.dumps({"a": "yes"})), "documented shape"),
    ("clock_truth without hosts", attr("clock_truth", json.dumps({"t0": 1})), "documented shape"),
    ("deeply nested agents", attr("agents", "[" * 100_000), "'agents' is not JSON"),
    ("element rows out of order", lambda f: f["elements"].__setitem__(
        slice(None), f["elements"][()][::-1]), "/elements: rows are not"),
    ("an unknown element type", set_field("elements", "type", b"cable"), "unknown element type"),
    ("a finding that is not an object", replace("findings/json", np.array(["[1]"], dtype=object),
                                                dtype=h5py.string_dtype()), "row 0 is not a JSON object"),
    ("a weight above one", lambda f: f["paths/weights"].__setitem__(0, 7.0), "a weight is not a probability"),
    ("pairs naming an unknown host", set_field("clock/pairs", "a", 999), "/clock/pairs: a host index"),
    ("windows of the wrong width", replace("windows/path_sent", np.zeros((1, 3), dtype=np.int32)),
     "per-path arrays are not"),
]


@pytest.mark.parametrize("what,change,message", CASES, ids=[c[0] for c in CASES])
def test_hostile_run_file_is_a_data_error(tmp_path, run_data, what, change, message):
    path = damaged(tmp_path, run_data, change)
    with pytest.raises(DataError, match=None) as info:
        read_all(path)
    assert str(path) in info.value.message
    assert message in info.value.message, info.value.message


def test_undamaged_file_reads_whole(tmp_path, run_data):
    read_all(write(tmp_path / "run.h5", run_data))


def test_fifo_does_not_hang(tmp_path):
    # Before: h5py's open of a FIFO blocked forever waiting for a writer.
    fifo = tmp_path / "run.h5"
    os.mkfifo(fifo)
    code = textwrap.dedent(f"""
        from fleetctl.errors import DataError
        from fleetctl.store.reader import open_run
        try:
            open_run({str(fifo)!r})
        except DataError as exc:
            print(exc.message)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.stdout.strip() == f"{fifo}: not a regular file (a FIFO, device or directory is no run file)"


def test_directory_and_device_are_refused(tmp_path):
    with pytest.raises(DataError, match="not a regular file"):
        open_run(tmp_path)
    with pytest.raises(DataError, match="not a regular file"):
        open_run("/dev/zero")
