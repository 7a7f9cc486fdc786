"""The HDF5 run store: one file per probe run, schema in docs/hdf5-schema.md.

Crash safety: a run is written to a private temporary file beside the target (fleetctl.atomic:
created with O_EXCL|O_NOFOLLOW, never a predictable `<file>.tmp` a planted link could redirect);
`close()` writes the `complete` attribute last, flushes, fsyncs and renames the file into place
(then fsyncs the directory). A crash or kill leaves at most a `.<file>.*.tmp` file, and a file
without `complete` is refused by the reader.

Write errors (a full disk): HDF5 left in a failed state by a write error could not close the file,
and freeing its objects at exit crashed the interpreter (exit 139). So HDF5 writes through
`_FailSafeIO`, which records the first OSError and from then on accepts and drops every write: HDF5
never sees a failure and closes cleanly; the writer then removes the temporary file and raises a
DataError naming the target.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

from fleetctl.atomic import AtomicFile
from fleetctl.errors import DataError, FleetctlError
from fleetctl.model.fabric import FLOW_DTYPE, PAIR_DTYPE, PROBE_DTYPE, PathTable, Topology

FORMAT = "fleetctl-mesh-run"
SCHEMA_VERSION = 2  # 2: /windows per NIC pair (K pairs), no longer N x N matrices
STR = h5py.string_dtype("utf-8")
REQUIRED = ("nics", "hosts", "elements", "paths/indptr", "paths/elements", "paths/weights",
            "paths/src_nic", "paths/dst_nic", "paths/traced", "flows", "probes")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _FailSafeIO:
    """The file object HDF5 writes through (h5py's fileobj driver): the first OSError of a write,
    truncate or flush is kept in `error`, and every later one is a no-op, so HDF5 always closes."""

    def __init__(self, raw):
        self.raw = raw
        self.error: OSError | None = None

    def _safe(self, fn, *args):
        if self.error is not None:
            return None
        try:
            return fn(*args)
        except OSError as exc:
            self.error = exc
            return None

    def write(self, data):
        self._safe(self._write_all, memoryview(data).cast("B"))
        return len(data)

    def _write_all(self, view) -> None:
        while len(view):
            n = self.raw.write(view)  # unbuffered: a short count or OSError (ENOSPC) on a full disk
            if not n:
                raise OSError(28, os.strerror(28))
            view = view[n:]

    def truncate(self, size=None):
        self._safe(self.raw.truncate, size)
        return size

    def flush(self):
        self._safe(self.raw.flush)

    def seek(self, *args):
        return self.raw.seek(*args)

    def tell(self):
        return self.raw.tell()

    def readinto(self, buf):
        return self.raw.readinto(buf)

    def read(self, size=-1):
        return self.raw.read(size)


@contextlib.contextmanager
def aborting(abort, what: str, interrupt_aborts: bool = True):
    """A write step: any failure inside calls `abort` (the half-written file goes) and an OS or
    HDF5 error becomes a DataError naming `what` (h5py raises OSError, RuntimeError, ValueError,
    TypeError or KeyError for a full disk, a bad dtype or a damaged file alike). An interrupt
    (KeyboardInterrupt, SystemExit) aborts too unless `interrupt_aborts` is False: a lens segment
    cut short is finalized at the next start instead."""
    try:
        yield
    except FleetctlError:
        abort()
        raise
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as exc:
        abort()
        raise DataError(f"{what}: {_first_line(exc)}") from None
    except BaseException:
        if interrupt_aborts:
            abort()
        raise


def _guarded(method):
    """Any failure inside a write step discards the temporary file and becomes a DataError."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self.f is None:
            raise DataError(f"{self.path}: run file already closed or discarded")
        with aborting(self.abort, f"{self.path}: cannot write run file"):
            out = method(self, *args, **kwargs)
            self._check()
            return out

    return wrapper


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)  # h5py's errors carry a whole HDF5 error stack
    return text.splitlines()[0][:200] if text else type(exc).__name__


class RunWriter:
    """Writes one run. Use as a context manager: an exception discards the temporary file."""

    def __init__(self, path: str | os.PathLike, *, run_id: str, cluster: str,
                 parameters: dict | None = None, epoch_ns: int = 0, started_at: str | None = None):
        self.path = Path(path)
        self.f = None
        self._io = None
        self._out = AtomicFile(self.path, buffered=False)
        self.tmp = self._out.tmp
        try:
            # h5py's file-object driver: HDF5 writes through our O_EXCL descriptor, by no name.
            self._io = _FailSafeIO(self._out.file)
            self.f = h5py.File(self._io, "w")
            self._start(run_id, cluster, parameters, epoch_ns, started_at)
            self._check()
        except BaseException as exc:
            self.abort()
            if isinstance(exc, (OSError, RuntimeError, ValueError)):
                raise DataError(f"{self.path}: cannot create run file: {_first_line(exc)}") from None
            raise

    def _check(self) -> None:
        """Raise the write error HDF5 was shielded from (the caller's guard discards the file)."""
        if self._io is not None and self._io.error is not None:
            raise self._io.error

    def _start(self, run_id, cluster, parameters, epoch_ns, started_at) -> None:
        a = self.f.attrs
        a["format"] = FORMAT
        a["schema_version"] = SCHEMA_VERSION
        a["run_id"] = run_id
        a["cluster"] = cluster
        a["started_at"] = started_at or _now()
        a["epoch_ns"] = np.int64(epoch_ns)
        a["parameters"] = json.dumps(parameters or {}, sort_keys=True)
        self._probes = self.f.create_dataset("probes", shape=(0,), maxshape=(None,),
                                             dtype=PROBE_DTYPE, chunks=(65536,),
                                             compression="gzip", compression_opts=4,
                                             shuffle=True)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        write_error = self._io.error if self._io is not None else None
        self.abort()
        if write_error is not None:  # the caller's error came from a failed write: say so
            raise DataError(f"{self.path}: cannot write run file: {_first_line(write_error)}") from None

    @_guarded
    def write_topology(self, topo: Topology) -> None:
        hosts = topo.hosts
        hpos = {h: i for i, h in enumerate(hosts)}
        nics = np.array([(n, h, hpos[h]) for n, h in zip(topo.nics, topo.nic_host)],
                        dtype=[("name", STR), ("host", STR), ("host_index", "<i4")])
        self.f.create_dataset("nics", data=nics)
        self.f.create_dataset("hosts", data=np.array(hosts, dtype=object), dtype=STR)
        els = np.array([(e.type, e.id, e.direction, topo.switch_tier.get(e.id, 0)
                         if e.type == "switch" else 0) for e in topo.elements],
                       dtype=[("type", STR), ("id", STR), ("direction", STR), ("tier", "<i2")])
        self.f.create_dataset("elements", data=els)
        self.f["elements"].attrs["topology"] = topo.name
        # optional: the site file's port names of each link end (`leaf2:swp7`), for findings
        links = np.array([(lid, a, b, *topo.link_ports.get(lid, ("", "")))
                          for lid, (a, b) in topo.links.items()],
                         dtype=[("id", STR), ("a", STR), ("b", STR), ("a_port", STR),
                                ("b_port", STR)])
        self.f.create_dataset("links", data=links)

    @_guarded
    def write_paths(self, paths: PathTable) -> None:
        g = self.f.create_group("paths")
        g.create_dataset("indptr", data=paths.indptr.astype(np.int64))
        g.create_dataset("elements", data=paths.elements.astype(np.int32), compression="gzip")
        g.create_dataset("weights", data=paths.weights.astype(np.float32), compression="gzip")
        g.create_dataset("src_nic", data=paths.src_nic.astype(np.int32))
        g.create_dataset("dst_nic", data=paths.dst_nic.astype(np.int32))
        g.create_dataset("traced", data=paths.traced.astype(np.uint8))

    @_guarded
    def write_flows(self, flows: np.ndarray) -> None:
        self.f.create_dataset("flows", data=np.asarray(flows, dtype=FLOW_DTYPE))

    @_guarded
    def append_probes(self, records: np.ndarray) -> None:
        records = np.asarray(records, dtype=PROBE_DTYPE)
        n = self._probes.shape[0]
        self._probes.resize((n + len(records),))
        self._probes[n:] = records

    WINDOW_FIELDS = (("path_sent", np.int32), ("path_lost", np.int32), ("path_p50_us", np.float32),
                     ("path_p99_us", np.float32), ("pair_src", np.int32), ("pair_dst", np.int32),
                     ("pair_sent", np.int32), ("pair_loss", np.float32), ("pair_p50_us", np.float32),
                     ("pair_p99_us", np.float32))

    @_guarded
    def write_windows(self, w) -> None:
        """Per window (`w`: analysis.windows.Windows built with its pair figures): per-path figures
        (W x P) and per probed NIC pair (K pairs; W x K, NaN where a pair had no probe). Delays in
        microseconds; one_way False means half round trip."""
        if w.pair_src is None:
            raise DataError(f"{self.path}: windows without their NIC-pair figures")
        g = self.f.create_group("windows")
        g.attrs["window_s"] = float(w.window_s)
        g.attrs["one_way"] = bool(w.one_way)
        g.create_dataset("start_ns", data=np.asarray(w.start_ns, dtype=np.int64))
        for name, dt in self.WINDOW_FIELDS:
            g.create_dataset(name, data=np.asarray(getattr(w, name), dtype=dt), compression="gzip")

    @_guarded
    def write_clock(self, model) -> None:
        """A fleetctl.analysis.clock.ClockModel."""
        g = self.f.create_group("clock")
        g.create_dataset("offset_s", data=model.offset)
        g.create_dataset("drift", data=model.drift)
        g.create_dataset("component", data=model.component.astype(np.int32))
        pairs = np.array([(p.a, p.b, p.t0, p.offset, p.drift, p.margin, p.span, p.probes, r)
                          for p, r in zip(model.pairs, model.residual)], dtype=PAIR_DTYPE)
        g.create_dataset("pairs", data=pairs, dtype=PAIR_DTYPE)

    @_guarded
    def write_findings(self, findings: list[dict], solver: str) -> None:
        g = self.f.create_group("findings")
        g.attrs["solver"] = solver
        table = np.array([(f["element"]["type"], f["element"]["id"],
                           f["element"].get("direction", ""), f["metric"], f["severity"],
                           f["confidence"]) for f in findings],
                         dtype=[("type", STR), ("id", STR), ("direction", STR), ("metric", STR),
                                ("severity", STR), ("confidence", "<f4")])
        g.create_dataset("table", data=table)
        g.create_dataset("json", data=np.array([json.dumps(f, sort_keys=True) for f in findings],
                                               dtype=object), dtype=STR)

    @_guarded
    def write_health(self, health: dict, hosts: list[str]) -> None:
        """The agents' per-window health tables (docs/hdf5-schema.md, "agent health records"):
        `health` maps a node to {"fields", "windows", "window_s"}. Columns follow the first
        table's fields; a node whose agent named other fields gets -1 (unknown) where it lacks
        one."""
        tables = {n: t for n, t in health.items() if n in hosts and t.get("fields")}
        if not tables:
            return
        first = next(iter(tables.values()))
        fields = [str(f) for f in first["fields"]]
        window_s = first.get("window_s")
        hpos = {h: i for i, h in enumerate(hosts)}
        host_col, rows = [], []
        for node, t in tables.items():
            pos = {f: i for i, f in enumerate(t["fields"])}
            for row in t.get("windows") or []:
                host_col.append(hpos[node])
                rows.append([float(row[pos[f]]) if f in pos else -1.0 for f in fields])
        g = self.f.create_group("health")
        g.attrs["fields"] = json.dumps(fields)
        g.attrs["window_s"] = float(window_s) if isinstance(window_s, (int, float)) else 0.0
        g.create_dataset("host", data=np.asarray(host_col, dtype=np.int32))
        g.create_dataset("rows", data=np.asarray(rows, dtype=np.float64).reshape(
            len(rows), len(fields)), compression="gzip")

    @_guarded
    def set_attrs(self, **attrs) -> None:
        """Extra root attributes (strings, numbers)."""
        for name, value in attrs.items():
            self.f.attrs[name] = value

    @_guarded
    def close(self, ended_at: str | None = None) -> Path:
        """Mark complete, flush, fsync, rename into place. Returns the final path."""
        self.f.attrs["ended_at"] = ended_at or _now()
        self.f.attrs["complete"] = True  # written last: the reader's proof of a whole file
        self.f.flush()
        self.f.close()
        self.f = None
        self._check()
        out, self._out = self._out, None
        return out.commit()  # fsync, rename, fsync the directory; removes the file on failure

    def abort(self) -> None:
        """Drop the run: close what can be closed, remove the temporary file. Never raises."""
        f, self.f = self.f, None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001 - the write error that got us here is what matters
                pass
        if self._out is not None:
            self._out.discard()
            self._out = None
