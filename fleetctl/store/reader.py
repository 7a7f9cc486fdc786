"""Reading a run file back, refusing anything that is not a complete run of a known schema.

    with open_run("run.h5") as run:
        topo, paths = run.topology(), run.paths()
        stats = run.window_stats("p99")

Every problem is a DataError naming the file: not HDF5 or truncated, not a fleetctl run, written by
a newer fleetctl, incomplete (crashed or still being written), a dataset missing.

A run file is untrusted input (a copy from another cluster, a file in a shared directory): only a
regular file is opened (a FIFO would block forever), and every dataset's type, shape and declared
size is checked before it is read (a dataset may declare 1e11 rows in a few bytes), every index
before it is used (NIC, flow, path and element indices), and timestamps and window parameters are
kept within bounds that keep the analysis' arrays small. Limits: docs/hdf5-schema.md.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import h5py
import numpy as np

from fleetctl.errors import ConfigError, DataError
from fleetctl.model.fabric import FLOW_DTYPE, PAIR_DTYPE, PROBE_DTYPE, PathTable, Topology, WindowStats
from fleetctl.store.runfile import FORMAT, REQUIRED, SCHEMA_VERSION

MAX_DATASET_BYTES = 4 << 30  # declared size of one dataset, before it is read
MAX_ATTR_CHARS = 16 << 20  # a JSON root attribute
MAX_SPAN_NS = 86_400 * 10**9  # timestamps within a day of the run's epoch; a run lasts minutes
MAX_WINDOWS = 100_000  # run span / window length
MAX_HEALTH_FIELDS = 64  # columns of /health/rows (the agent has 20)
MAX_HEALTH_ROWS = 10_000_000  # agent x window rows: a day of 1 s windows on 100 hosts
MIN_WINDOW_S = 1e-3
MAX_EPOCH_NS = 2**62
# Root parameters that the analysis reads, with their bounds (others are shown, never used).
_PARAM_NUMBERS = {"window_s": (MIN_WINDOW_S, 86_400.0), "duration": (0.0, 86_400.0),
                  "linger": (0.0, 3_600.0)}
_ELEMENT_TYPES = ("link", "switch", "nic", "host")
_NAMED = {"nics": {"name": "S", "host": "S", "host_index": np.int32},
          "elements": {"type": "S", "id": "S", "direction": "S", "tier": np.int16},
          "links": {"id": "S", "a": "S", "b": "S", "a_port": "S", "b_port": "S"}}


def _open_regular(path: Path):
    """An h5py File on `path` if it is a regular file; never blocks on a FIFO or device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DataError(f"{path}: run file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot open run file: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError(f"{path}: not a regular file (a FIFO, device or directory is no run file)")
        # HDF5 opens the very file checked above (by its descriptor, not its name again).
        return fd, h5py.File(f"/proc/self/fd/{fd}", "r")
    except OSError as exc:
        os.close(fd)
        raise DataError(f"{path}: not a readable HDF5 file (truncated or corrupt?): "
                        f"{_short(exc)}") from None
    except BaseException:
        os.close(fd)
        raise


class Run:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd, self.f = _open_regular(self.path)
        self._cache: dict[str, np.ndarray] = {}
        try:
            self._validate()
        except BaseException:
            self.close()
            raise

    def _validate(self) -> None:
        a = self.f.attrs
        fmt = _attr(a, "format")
        if not isinstance(fmt, (str, bytes)) or _s(fmt) != FORMAT:
            raise DataError(f"{self.path}: not a fleetctl mesh run (format attribute "
                            f"{_shown(fmt)}, expected {FORMAT!r})")
        version = _attr(a, "schema_version")
        if version is None or isinstance(version, (bool, np.bool_)) \
                or not np.issubdtype(type(version), np.integer):
            raise DataError(f"{self.path}: schema_version attribute missing or not an integer")
        if int(version) > SCHEMA_VERSION:
            raise DataError(f"{self.path}: schema version {int(version)} was written by a newer "
                            f"fleetctl; this one reads up to version {SCHEMA_VERSION}")
        if int(version) < 1:
            raise DataError(f"{self.path}: invalid schema version {int(version)}")
        self.version = int(version)
        complete = _attr(a, "complete")
        if not isinstance(complete, (bool, np.bool_)) or not complete:
            raise DataError(f"{self.path}: incomplete run (`complete` attribute absent or not "
                            f"true: {_shown(complete)}; the writer crashed or is still writing)")
        epoch = _attr(a, "epoch_ns", 0)
        if isinstance(epoch, (bool, np.bool_)) or not np.issubdtype(type(epoch), np.integer) \
                or not 0 <= int(epoch) <= MAX_EPOCH_NS:
            raise DataError(f"{self.path}: epoch_ns attribute is not a time in ns: {_shown(epoch)}")
        for name in REQUIRED:
            try:
                present = name in self.f
            except (OSError, RuntimeError, KeyError, ValueError):  # damaged object headers
                present = False
            if not present:
                raise DataError(f"{self.path}: dataset /{name} is missing")

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _bad(self, name: str, what: str) -> DataError:
        return DataError(f"{self.path}: /{name}: {what}")

    def _read(self, name: str, ndim: int | None = 1):
        """The dataset's values, after checking it is a dataset of `ndim` dimensions whose declared
        size is bounded (nothing is allocated for a dataset that claims 1e11 rows)."""
        if name in self._cache:
            return self._cache[name]
        try:
            obj = self.f.get(name)
        except (OSError, RuntimeError, KeyError, ValueError) as exc:
            raise self._bad(name, f"cannot be read (corrupt?): {_short(exc)}") from None
        if obj is None:
            raise DataError(f"{self.path}: dataset /{name} is missing")
        if not isinstance(obj, h5py.Dataset):
            raise self._bad(name, "is a group, not a dataset")
        shape = obj.shape
        if shape is None or (ndim is not None and len(shape) != ndim):
            raise self._bad(name, f"has shape {shape}, expected {ndim} dimension(s)")
        size = math.prod(shape) * max(1, obj.dtype.itemsize)
        if size > MAX_DATASET_BYTES:
            raise self._bad(name, f"declares {math.prod(shape)} entries ({size} bytes), more than "
                                  f"the {MAX_DATASET_BYTES} bytes a run file may hold per dataset")
        try:
            data = obj[()]
        except (OSError, RuntimeError, ValueError, TypeError) as exc:
            raise self._bad(name, f"cannot be read (truncated or corrupt?): {_short(exc)}") from None
        self._cache[name] = data
        return data

    def _numbers(self, name: str, kinds: str, dtype, ndim: int = 1) -> np.ndarray:
        """A numeric dataset of one of `kinds` ('i' signed, 'u' unsigned, 'f' float, 'b' bool),
        converted to `dtype` only when every value fits (no silent truncation or wrap-around)."""
        data = np.asarray(self._read(name, ndim))
        return _convert(data, kinds, np.dtype(dtype), lambda what: self._bad(name, what))

    def _table(self, name: str, fields: dict) -> np.ndarray:
        """A compound dataset with (at least) `fields`: field -> numpy dtype, or "S" for a string."""
        data = np.asarray(self._read(name))
        names = data.dtype.names or ()
        missing = [f for f in fields if f not in names]
        if missing:
            raise self._bad(name, f"is not a table with the fields {', '.join(fields)} "
                                  f"(missing {', '.join(missing)})")
        out = {}
        for field, want in fields.items():
            col = data[field]
            where = f"field {field!r}"
            if isinstance(want, str):
                if col.dtype.kind not in "OSU":
                    raise self._bad(name, f"{where} is not text (dtype {col.dtype})")
                try:
                    out[field] = [_s(v) for v in col]
                except (UnicodeDecodeError, TypeError):
                    raise self._bad(name, f"{where} holds values that are not UTF-8 text") from None
            else:
                out[field] = _convert(col, "iu" if np.dtype(want).kind in "iu" else "iuf",
                                      np.dtype(want), lambda what, w=where: self._bad(name, f"{w} {what}"))
        return out

    def _structured(self, name: str, dtype: np.dtype) -> np.ndarray:
        """A compound dataset converted to fleetctl's own record dtype, field by field (checked)."""
        cols = self._table(name, {f: dtype[f] for f in dtype.names})
        out = np.empty(len(next(iter(cols.values()))) if cols else 0, dtype=dtype)
        for field in dtype.names:
            out[field] = cols[field]
        return out

    # ------------------------------------------------------------------ metadata
    @property
    def attrs(self) -> dict:
        out = {}
        for key in self.f.attrs:
            value = _plain(_attr(self.f.attrs, key))
            if isinstance(value, str) and len(value) > MAX_ATTR_CHARS:
                raise DataError(f"{self.path}: root attribute {key!r} is longer than "
                                f"{MAX_ATTR_CHARS} characters")
            out[key] = value
        try:
            params = json.loads(out.get("parameters") or "{}")
        except (TypeError, ValueError, RecursionError):
            raise DataError(f"{self.path}: root attribute 'parameters' is not JSON") from None
        if not isinstance(params, dict):
            raise DataError(f"{self.path}: root attribute 'parameters' is not a JSON object")
        for key, (low, high) in _PARAM_NUMBERS.items():
            v = params.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not low <= v <= high):
                raise DataError(f"{self.path}: parameter {key!r} must be a number from {low:g} to "
                                f"{high:g}, not {_shown(v)}")
        for key, allowed in (("solver", None), ("statistic", ("p50", "p99"))):
            v = params.get(key)
            if v is not None and (not isinstance(v, str) or (allowed and v not in allowed)
                                  or len(v) > 64):
                raise DataError(f"{self.path}: parameter {key!r} is not a valid name: {_shown(v)}")
        out["parameters"] = params
        for key in ("agents", "discovery", "switch_probes", "clock_truth"):
            if out.get(key) is not None:
                self._check_json_attr(key, out[key])
        return out

    def _check_json_attr(self, key: str, text) -> None:
        """The optional JSON root attributes analysis reads: objects of the documented shape."""
        try:
            value = json.loads(text) if isinstance(text, str) else text
        except (ValueError, RecursionError):
            raise DataError(f"{self.path}: root attribute {key!r} is not JSON") from None
        ok = value is None or isinstance(value, dict)
        if ok and key == "switch_probes" and value:
            ok = all(isinstance(v, bool) for v in value.values())
        if ok and key == "clock_truth" and value:
            hosts = value.get("hosts")
            ok = _finite(value.get("t0")) and isinstance(hosts, dict) and all(
                isinstance(h, dict) and all(_finite(h.get(k, 0.0)) for k in ("offset_ms", "drift_ppm"))
                for h in hosts.values())
        if not ok:
            raise DataError(f"{self.path}: root attribute {key!r} does not have the documented shape")

    # ------------------------------------------------------------------ tables
    def topology(self) -> Topology:
        nics = self._table("nics", _NAMED["nics"])
        els = self._table("elements", _NAMED["elements"])
        switches, links = {}, []
        rows = list(zip(els["type"], els["id"], els["direction"], els["tier"]))
        for t, i, d, tier in rows:
            if t not in _ELEMENT_TYPES:
                raise self._bad("elements", f"unknown element type {_shown(t)}")
            if t == "switch":
                switches[i] = int(tier)
            elif t == "link":
                a, _, b = d.partition("->")
                if not links or links[-1][0] != i:  # both directions are stored in a row
                    links.append((i, a, b))
        name = _s(_attr(self.f["elements"].attrs, "topology", _attr(self.f.attrs, "cluster", "")))
        ports = {}
        if "links" in self.f:  # optional in schema 1
            t = self._table("links", _NAMED["links"])
            ports = {i: (a, b) for i, a, b in zip(t["id"], t["a_port"], t["b_port"])}
        try:
            topo = Topology.build(name, list(zip(nics["name"], nics["host"])), switches, links, ports)
        except (ConfigError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{self.path}: the element table is inconsistent: "
                            f"{getattr(exc, 'message', exc)}") from None
        # Paths index the file's element rows: the rebuilt table must be the same, row for row.
        rebuilt = [(e.type, e.id, e.direction or "") for e in topo.elements]
        if rebuilt != [(t, i, d if t == "link" else "") for t, i, d, _ in rows]:
            raise self._bad("elements", "rows are not one switch, NIC, host and link-direction "
                                        "table in fleetctl's order (duplicates or rows out of place)")
        return topo

    def paths(self) -> PathTable:
        t = PathTable(self._numbers("paths/indptr", "iu", np.int64),
                      self._numbers("paths/elements", "iu", np.int64),
                      self._numbers("paths/weights", "iuf", np.float64),
                      self._numbers("paths/src_nic", "iu", np.int64),
                      self._numbers("paths/dst_nic", "iu", np.int64),
                      self._numbers("paths/traced", "iub", np.int64).astype(bool))
        n_el, n_nic = self._rows("elements"), self._rows("nics")
        p = len(t.indptr) - 1
        # In order, each test relying on the ones before it (lengths before indices).
        problems = [
            (lambda: p < 0 or t.indptr[0] != 0 or np.any(np.diff(t.indptr) < 0)
             or t.indptr[-1] != len(t.elements), "indptr is not a valid CSR pointer"),
            (lambda: len(t.weights) != len(t.elements), "weights and elements differ in length"),
            (lambda: not len(t.src_nic) == len(t.dst_nic) == len(t.traced) == p,
             "src_nic, dst_nic, traced do not have one entry per path"),
            (lambda: _outside(t.elements, 0, n_el), "an element index is outside /elements"),
            (lambda: _outside(t.src_nic, 0, n_nic) or _outside(t.dst_nic, -1, n_nic),
             "a NIC index is outside /nics"),
            (lambda: len(t.weights) and not (np.all(np.isfinite(t.weights)) and t.weights.min() >= 0
                                             and t.weights.max() <= 1),
             "a weight is not a probability from 0 to 1"),
        ]
        for bad, what in problems:
            if bad():
                raise DataError(f"{self.path}: /paths: {what}")
        return t

    def _rows(self, name: str) -> int:
        obj = self.f.get(name)
        if not isinstance(obj, h5py.Dataset) or obj.shape is None or len(obj.shape) != 1:
            raise self._bad(name, "is not a one-dimensional table")
        return obj.shape[0]

    def flows(self) -> np.ndarray:
        flows = self._structured("flows", FLOW_DTYPE)
        n_nic, n_path = self._rows("nics"), self._rows("paths/indptr") - 1
        problems = [
            (len(np.unique(flows["flow"])) != len(flows), "a flow id appears twice"),
            (_outside(flows["src_nic"], 0, n_nic), "a src_nic is outside /nics"),
            (_outside(flows["dst_nic"], -1, n_nic), "a dst_nic is outside /nics"),
            (_outside(flows["fwd_path"], -1, n_path) or _outside(flows["rev_path"], -1, n_path),
             "a path index is outside /paths"),
        ]
        for bad, what in problems:
            if bad:
                raise self._bad("flows", what)
        return flows

    def probes(self) -> np.ndarray:
        probes = self._structured("probes", PROBE_DTYPE)
        if probes.size == 0:
            return probes
        flows = self.flows()
        n_nic = self._rows("nics")
        epoch = int(_attr(self.f.attrs, "epoch_ns", 0))
        problems = [
            (not np.all(np.isin(probes["flow"], flows["flow"])), "a probe names a flow /flows lacks"),
            (_outside(probes["src_nic"], 0, n_nic), "a src_nic is outside /nics"),
            (_outside(probes["dst_nic"], -1, n_nic), "a dst_nic is outside /nics"),
            (int(probes["lost"].max()) > 3, "a lost value is not 0, 1, 2 or 3"),
            (not np.all(probes["t_send"] != 0), "a probe without a send time"),
        ]
        for key in ("t_send", "t_remote_rx", "t_remote_tx", "t_recv"):
            t = probes[key][probes[key] != 0]
            problems.append((t.size and (int(t.min()) < epoch - MAX_SPAN_NS
                                         or int(t.max()) > epoch + MAX_SPAN_NS),
                             f"a {key} is more than a day away from the run's epoch_ns"))
        for bad, what in problems:
            if bad:
                raise self._bad("probes", what)
        window = self.attrs["parameters"].get("window_s") or 5.0
        span_s = (int(probes["t_send"].max()) - int(probes["t_send"].min())) * 1e-9
        if span_s / window > MAX_WINDOWS:
            raise self._bad("probes", f"spans {span_s:.0f} s: more than {MAX_WINDOWS} windows of "
                                      f"{window:g} s")
        return probes

    def window_stats(self, statistic: str = "p50") -> WindowStats:
        if statistic not in ("p50", "p99"):
            raise DataError(f"unknown delay statistic {statistic!r} (p50 or p99)")
        sent = self._numbers("windows/path_sent", "iu", np.int64, ndim=2)
        lost = self._numbers("windows/path_lost", "iu", np.int64, ndim=2)
        delay = self._numbers(f"windows/path_{statistic}_us", "iuf", np.float64, ndim=2)
        n_path = self._rows("paths/indptr") - 1
        if not sent.shape == lost.shape == delay.shape or sent.shape[1] != n_path:
            raise self._bad("windows", f"per-path arrays are not windows x {n_path} paths alike")
        if sent.size and (sent.min() < 0 or lost.min() < 0 or np.any(lost > sent)):
            raise self._bad("windows", "negative counts, or more probes lost than sent")
        return WindowStats(sent=sent, lost=lost, delay=delay)

    def pair_figures(self) -> dict[str, np.ndarray]:
        """Per probed NIC pair (forward direction, row = source): `src`, `dst` (K,), and per
        window `loss`, `p50_us`, `p99_us` (W, K, NaN where a pair had no probe), `sent` (W, K;
        schema 2 only). A schema-1 file's N x N matrices are read as the pairs they probed."""
        n_nic = self._rows("nics")
        if self.version < 2:
            return self._pairs_of_matrices(n_nic)
        src = self._numbers("windows/pair_src", "iu", np.int64)
        dst = self._numbers("windows/pair_dst", "iu", np.int64)
        if len(src) != len(dst) or _outside(src, 0, n_nic) or _outside(dst, 0, n_nic):
            raise self._bad("windows/pair_src", f"pair_src and pair_dst are not {n_nic} NICs' "
                                                 f"indices alike")
        out = {"src": src, "dst": dst,
               "sent": self._numbers("windows/pair_sent", "iu", np.int64, ndim=2)}
        for k in ("loss", "p50_us", "p99_us"):
            out[k] = self._numbers(f"windows/pair_{k}", "iuf", np.float32, ndim=2)
        for k in ("sent", "loss", "p50_us", "p99_us"):
            if out[k].shape[1] != len(src) or out[k].shape[0] != out["sent"].shape[0]:
                raise self._bad(f"windows/pair_{k}", f"is not windows x {len(src)} pairs")
        return out

    def _pairs_of_matrices(self, n_nic: int) -> dict[str, np.ndarray]:
        dense = {}
        for new, old in (("loss", "loss"), ("p50_us", "delay_p50_us"), ("p99_us", "delay_p99_us")):
            m = self._numbers(f"windows/{old}", "iuf", np.float32, ndim=3)
            if m.shape[1:] != (n_nic, n_nic):
                raise self._bad(f"windows/{old}", f"is not windows x {n_nic} x {n_nic} NICs")
            dense[new] = m
        src, dst = np.nonzero(np.isfinite(dense["loss"]).any(axis=0))
        return {"src": src, "dst": dst, **{k: m[:, src, dst] for k, m in dense.items()}}

    def clock(self) -> dict[str, np.ndarray]:
        n_host = self._rows("hosts")
        out = {"offset_s": self._numbers("clock/offset_s", "iuf", np.float64),
               "drift": self._numbers("clock/drift", "iuf", np.float64),
               "component": self._numbers("clock/component", "iu", np.int32),
               "pairs": self._structured("clock/pairs", PAIR_DTYPE)}
        if any(len(out[k]) != n_host for k in ("offset_s", "drift", "component")):
            raise self._bad("clock", f"offset_s, drift and component do not have {n_host} rows")
        if _outside(out["pairs"]["a"], 0, n_host) or _outside(out["pairs"]["b"], 0, n_host):
            raise self._bad("clock/pairs", "a host index is outside /hosts")
        return out

    def findings(self) -> list[dict]:
        if "findings" not in self.f:
            return []
        raw = self._read("findings/json")
        if raw.dtype.kind not in "OSU":
            raise self._bad("findings/json", f"is not text (dtype {raw.dtype})")
        out = []
        for i, text in enumerate(raw):
            try:
                finding = json.loads(_s(text))
            except (ValueError, RecursionError, UnicodeDecodeError, TypeError):
                raise self._bad("findings/json", f"row {i} is not JSON") from None
            if not isinstance(finding, dict):
                raise self._bad("findings/json", f"row {i} is not a JSON object")
            out.append(finding)
        return out


    def health(self) -> dict:
        """The agents' health tables back as {node: {"fields", "windows", "window_s"}} ({} when
        the run has none): field names bounded and unique, host indexes inside /hosts, values
        finite and counters at least -1 (unknown)."""
        if "health" not in self.f:
            return {}
        g = self.f["health"]
        if not isinstance(g, h5py.Group):
            raise self._bad("health", "is not a group")
        try:
            fields = json.loads(_s(_attr(g.attrs, "fields", "[]")))
            window_s = float(_attr(g.attrs, "window_s", 0.0))
        except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
            raise self._bad("health", "attribute fields or window_s is unreadable") from None
        if not isinstance(fields, list) or not 1 <= len(fields) <= MAX_HEALTH_FIELDS or any(
                not isinstance(f, str) or not f or len(f) > 64 for f in fields) \
                or len(set(fields)) != len(fields):
            raise self._bad("health", f"fields must be 1 to {MAX_HEALTH_FIELDS} distinct names")
        if not (_finite(window_s) and 0 <= window_s <= 3600):
            raise self._bad("health", f"window_s {window_s!r} is outside 0..3600")
        host = self._numbers("health/host", "iu", np.int64)
        rows = self._numbers("health/rows", "iuf", np.float64, ndim=2)
        n_host = self._rows("hosts")
        if rows.shape != (host.size, len(fields)):
            raise self._bad("health/rows", f"is not {host.size} rows x {len(fields)} fields")
        if host.size > MAX_HEALTH_ROWS:
            raise self._bad("health", f"holds {host.size} rows, more than {MAX_HEALTH_ROWS}")
        if _outside(host, 0, n_host):
            raise self._bad("health/host", "a host index is outside /hosts")
        if rows.size and (not np.isfinite(rows).all() or rows.min() < -1):
            raise self._bad("health/rows", "values must be finite and at least -1")
        names = [_s(h) for h in self._read("hosts")]
        out: dict = {}
        for i in np.unique(host):
            out[names[int(i)]] = {"fields": list(fields), "window_s": window_s,
                                  "windows": rows[host == i].tolist()}
        return out


def open_run(path: str | os.PathLike) -> Run:
    return Run(path)


def _convert(data: np.ndarray, kinds: str, dtype: np.dtype, bad) -> np.ndarray:
    """`data` as `dtype` if its kind is one of `kinds` and every value fits; else bad(what)."""
    if data.dtype.kind not in kinds:
        raise bad(f"has dtype {data.dtype}, expected {'an integer' if kinds in ('iu', 'iub') else 'a number'} "
                  f"type ({dtype})")
    if data.dtype.kind == "f" and dtype.kind == "f":
        return data.astype(dtype)
    if dtype.kind in "iu" and data.size:
        info = np.iinfo(dtype)
        if int(data.min()) < info.min or int(data.max()) > info.max:
            raise bad(f"holds values outside {dtype} ({int(data.min())}..{int(data.max())})")
    return data.astype(dtype)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _outside(values: np.ndarray, low: int, high: int) -> bool:
    """Any value outside [low, high)."""
    return bool(values.size) and (int(values.min()) < low or int(values.max()) >= high)


def _attr(attrs, key: str, default=None):
    """An attribute's value, or `default`; an unreadable one (an odd HDF5 type) is a DataError."""
    try:
        return attrs.get(key, default)
    except (OSError, RuntimeError, TypeError, ValueError) as exc:
        raise DataError(f"attribute {key!r} cannot be read: {_short(exc)}") from None


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _shown(v) -> str:
    text = repr(_plain(v))
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(v):
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return repr(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
