"""Property-based tests over the two kinds of untrusted input the controller parses: node result
documents and HDF5 run files. Whatever they hold, the controller gives a verdict or a DataError,
never another exception, and never hangs. Bounded to a few seconds (max_examples below)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from fleetctl.audit.actions import apply_actions, plan_actions
from fleetctl.audit.export import changes_since, prometheus_text
from fleetctl.audit.report import AuditReport
from fleetctl.audit.runner import _outcome
from fleetctl.checks.document import ACTIONS, STATUSES
from fleetctl.errors import DataError
from fleetctl.fanout.result import HostResult
from fleetctl.slurm.base import NodeLookup, SlurmNode

from test_run_file_hostile import read_all
from test_store_hdf5 import run_data, write  # noqa: F401  (module-scoped fixture)

# FLEETCTL_FUZZ=10 runs ten times as many examples (a longer hunt before a release).
SCALE = int(os.environ.get("FLEETCTL_FUZZ", "1"))
FAST = settings(max_examples=100 * SCALE, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


def maybe(strategy):
    return strategy | json_values


result_docs = st.fixed_dictionaries(
    {"code": maybe(st.sampled_from(["xid.79", "gpu.ecc", "nic.link", "host.disk"])),
     "status": maybe(st.sampled_from(STATUSES)), "action": maybe(st.sampled_from(ACTIONS)),
     "message": maybe(st.text(max_size=30))},
    optional={"subject": maybe(st.text(max_size=10)), "evidence": json_values,
              "simulated": json_values})

facts = st.fixed_dictionaries({}, optional={
    "gpu": st.fixed_dictionaries({}, optional={"count": json_values, "models": json_values,
                                               "driver_version": json_values}) | json_values,
    "host": st.fixed_dictionaries({}, optional={"cpus": json_values, "memory_gb": json_values}),
    "nics": st.dictionaries(st.sampled_from(["eth0", "mlx5_0"]), st.fixed_dictionaries(
        {}, optional={"mtu": json_values, "firmware": json_values, "ports": json_values})),
    "deep": st.fixed_dictionaries({}, optional={"nccl_busbw_gbs": json_values,
                                                "ib_write_bw_gbps": json_values})}) | json_values

documents = st.fixed_dictionaries(
    {"schema": maybe(st.just("fleetctl.checks/1")), "status": maybe(st.sampled_from(STATUSES)),
     "action": maybe(st.sampled_from(ACTIONS)), "results": st.lists(result_docs, max_size=4) | json_values},
    optional={"facts": facts, "complete": json_values, "level": maybe(st.sampled_from(["quick"]))})


class Backend:
    """The Slurm side for the planning code: n1 drained by fleetctl, n2 idle, n3 unknown."""

    drain_prefix = "fleetctl"

    def lookup(self, nodes):
        known = {"n1": SlurmNode("n1", "IDLE", ["DRAIN"], reason="fleetctl:xid.79 x"),
                 "n2": SlurmNode("n2", "IDLE")}
        return NodeLookup({n: known[n] for n in nodes if n in known}, [n for n in nodes if n not in known])

    def drain(self, nodes, code, text=""):
        from fleetctl.slurm.base import DrainResult
        return DrainResult(f"fleetctl:{code} {text}", drained=list(nodes))

    def resume(self, nodes):
        from fleetctl.slurm.base import ResumeResult
        return ResumeResult(resumed=list(nodes))


def _controller(outputs: dict[str, str]) -> None:
    """Everything the controller does with what nodes printed: outcome, report, fleet consistency,
    drain/resume plan, Prometheus text, history diff, JSON and the human view."""
    from rich.console import Console

    from fleetctl.checks import fleet_consistency
    from fleetctl.cli.audit.render import render

    outcomes = {n: _outcome(HostResult(n, "ok", stdout=text, exit_code=0)) for n, text in outputs.items()}
    for o in outcomes.values():
        assert o.doc is not None or o.error.startswith(("malformed result document", "node payload"))
    docs = {n: o.doc for n, o in outcomes.items()}
    report = AuditReport("t", "quick", 0.0, outcomes, fleet=fleet_consistency(docs))
    plan = plan_actions(report, Backend(), drain=True, resume=True)
    report.actions = apply_actions(plan, Backend()).to_dict()
    prometheus_text(report)
    data = report.to_dict()
    report.changes = changes_since(json.loads(json.dumps(data, default=str)), report)
    render(Console(file=io.StringIO(), width=120), report, report.to_dict())


@FAST
@given(st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), documents, min_size=1))
def test_any_node_document_gives_a_verdict_or_an_error(docs):
    _controller({n: json.dumps(d) for n, d in docs.items()})


@FAST
@given(st.dictionaries(st.sampled_from(["n1", "n2"]), json_values.map(json.dumps) | st.text(max_size=50),
                       min_size=1))
def test_any_output_gives_a_verdict_or_an_error(outputs):
    _controller(outputs)


# ---------------------------------------------------------------- run files

@pytest.fixture(scope="module")
def good_run(run_data, tmp_path_factory):
    return write(tmp_path_factory.mktemp("fuzz") / "good.h5", run_data)


DATASETS = ["nics", "hosts", "elements", "links", "paths/indptr", "paths/elements", "paths/weights",
            "paths/src_nic", "paths/dst_nic", "paths/traced", "flows", "probes", "windows/path_sent",
            "windows/loss", "clock/offset_s", "clock/pairs", "findings/json"]
DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64, np.bool_, "S3", h5py.string_dtype(),
          np.dtype([("flow", "<f8"), ("src_nic", "<i8")]), np.dtype([("x", "<i4")])]
ATTRS = ["format", "schema_version", "complete", "epoch_ns", "parameters", "agents", "switch_probes",
         "clock_truth", "discovery"]

attr_values = (st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=30) | st.booleans()
               | st.binary(max_size=10) | st.lists(st.integers(-5, 5), min_size=1, max_size=4)
               | json_values.map(json.dumps))


@st.composite
def arrays(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    size = int(np.prod(shape)) if shape else 1
    if dtype.kind == "O":
        data = np.array(draw(st.lists(st.text(max_size=5), min_size=size, max_size=size)), dtype=object)
    elif dtype.names:
        data = np.zeros(size, dtype=dtype)
        for name in dtype.names:
            data[name] = draw(st.lists(st.integers(-3, 10**9), min_size=size, max_size=size))
    else:
        raw = draw(st.binary(min_size=size * dtype.itemsize, max_size=size * dtype.itemsize))
        data = np.frombuffer(raw, dtype=dtype).copy()
    return data.reshape(shape)


mutations = st.one_of(
    st.tuples(st.just("dataset"), st.sampled_from(DATASETS), arrays()),
    st.tuples(st.just("attr"), st.sampled_from(ATTRS), attr_values),
    st.tuples(st.just("delete"), st.sampled_from(DATASETS + ATTRS), st.none()),
    st.tuples(st.just("cell"), st.sampled_from(["flows", "probes", "paths/indptr", "paths/elements",
                                                "nics", "elements"]), st.integers(-2**31, 2**31 - 1)),
)


def mutate(f, kind, name, value):
    if kind == "dataset":
        if name in f:
            del f[name]
        f.create_dataset(name, data=value, dtype=h5py.string_dtype() if value.dtype.kind == "O" else None)
    elif kind == "attr":
        f.attrs[name] = value
    elif kind == "delete":
        if name in f:
            del f[name]
        elif name in f.attrs:
            del f.attrs[name]
    else:
        data = f[name][()]
        if data.size == 0:
            return
        if data.dtype.names:
            field = next(n for n in data.dtype.names if data.dtype[n].kind in "iu")
            data[field][0] = np.array(value).astype(data.dtype[field])
        else:
            data[0] = np.array(value).astype(data.dtype)
        f[name][...] = data


@settings(max_examples=40 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(mutations, min_size=1, max_size=3))
def test_any_damaged_run_file_reads_or_is_a_data_error(good_run, changes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.h5"
        shutil.copy(good_run, path)
        with h5py.File(path, "a") as f:
            for kind, name, value in changes:
                try:
                    mutate(f, kind, name, value)
                except (TypeError, ValueError, OverflowError, KeyError):
                    reject()  # a change h5py cannot even store: not an interesting file
        try:
            read_all(path)
        except DataError as exc:
            assert str(path) in exc.message or exc.message.startswith("attribute ")
