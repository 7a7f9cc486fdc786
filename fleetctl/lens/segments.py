"""Rolling HDF5 segments of `fleetctl lens`: the probe records, window by window, as run files.

    seg = SegmentWriter(state_dir / "segments", SegmentLayout(topo, paths, flows), cluster="lab",
                        parameters={"window_s": 5.0, "solver": "nnls"},
                        policy=SegmentPolicy(segment_s=3600, retention=48))
    seg.append(probes, health, {"t_end": t})     # every window
    seg.close()                                   # the last segment, complete

A segment is a complete run file of docs/hdf5-schema.md (topology, paths, flows, probes, the agents'
health), so `fleetctl audit analyze SEGMENT.h5` analyses it like any probe run. It is written by the
store's RunWriter into its private temporary file beside the target (`.lens-<start>.h5.XXXXXXXX.tmp`,
O_EXCL|O_NOFOLLOW: the partial segment), appended window by window into resizable chunked datasets
and flushed after each window (the data reaches the OS, so a crash of lens loses nothing written).
roll() marks it complete, fsyncs it and renames it to `lens-<UTC start>.h5` atomically: a file under
a final name is always whole. Segments roll after `segment_s` seconds (by the windows' `t_end`), when
the layout changes (set_layout) and on close().

After a crash the partial segment is *finalized* by the next SegmentWriter on the directory, not
removed: it is opened, cut back to its last whole window (probe rows without a send time and
health rows without a host, from a write the crash interrupted), marked complete with `recovered`
set, validated with the store reader and renamed like any segment. A partial file that cannot be
opened or does not validate (a crash inside HDF5's own metadata write, or a file somebody damaged
or planted: `probes` a group, fields missing, attributes that are not JSON) is removed and logged,
never a failed start; either way the directory never holds a file the reader refuses under a
final name. A flock on
`.lens-segments.lock` keeps a second writer (which would "recover" the first one's open segment)
out of the directory.

Retention after each roll: at most `retention` closed segments (the oldest go first) and none
older than `retention_s` seconds (by modification time, i.e. when it was closed).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from datetime import datetime, timezone
from pathlib import Path

import h5py
from dataclasses import dataclass, field

import numpy as np

from fleetctl.atomic import fsync_dir
from fleetctl.errors import DataError, FleetctlError, UsageError
from fleetctl.filekit import clean_text, loads_json, open_regular
from fleetctl.filekit.locks import open_lock
from fleetctl.mesh.health import HEALTH_FIELDS
from fleetctl.model.fabric import PROBE_DTYPE, PathTable, Topology
from fleetctl.store.reader import MAX_SPAN_NS, MAX_WINDOWS, open_run
from fleetctl.store.runfile import FORMAT, RunWriter, aborting

DEFAULT_SEGMENT_S = 3600.0
MAX_SEGMENT_S = 43_200.0  # the reader wants every timestamp within a day of the epoch
HEALTH_CHUNK = 4096
LOCK_NAME = ".lens-segments.lock"
_PREFIX = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def _utc_stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _iso(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, timezone.utc) \
        .isoformat(timespec="seconds")


@dataclass(frozen=True)
class SegmentLayout:
    """What every segment of one plan holds besides its records: the fabric and the flows."""

    topo: Topology
    paths: PathTable
    flows: np.ndarray
    switch_results: dict = field(default_factory=dict)
    discovery: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SegmentPolicy:
    """When a segment rolls and how many are kept (by count and by age), and their name."""

    segment_s: float = DEFAULT_SEGMENT_S
    retention: int | None = None
    retention_s: float | None = None
    prefix: str = "lens"


class SegmentWriter:
    """Not thread-safe: one lens coordinator appends."""

    def __init__(self, directory: str | os.PathLike, layout: SegmentLayout, *, cluster: str,
                 parameters: dict | None = None, policy: SegmentPolicy = SegmentPolicy(),
                 clock=time.time, log=lambda _m: None):
        segment_s, retention, retention_s, prefix = (policy.segment_s, policy.retention,
                                                     policy.retention_s, policy.prefix)
        if not 1.0 <= segment_s <= MAX_SEGMENT_S:
            raise UsageError(f"lens segment_s {segment_s:g}: between 1 and {MAX_SEGMENT_S:g} s")
        if retention is not None and not 1 <= retention <= 1_000_000:
            raise UsageError(f"lens segment retention {retention}: between 1 and 1000000 segments")
        if retention_s is not None and not 60 <= retention_s <= 10 * 365 * 86_400:
            raise UsageError(f"lens segment retention_s {retention_s:g}: 60 s to ten years")
        if not _PREFIX.fullmatch(prefix):
            raise UsageError(f"lens segment prefix {prefix!r}: lower-case letters, digits, - and _")
        self.directory = Path(directory)
        self.prefix, self.cluster, self.clock, self.log = prefix, cluster, clock, log
        self.parameters = dict(parameters or {})
        window_s = float(self.parameters.get("window_s") or 5.0)
        # a segment spans at most MAX_WINDOWS analysis windows, or the reader refuses it
        self.segment_s = min(float(segment_s), 0.9 * MAX_WINDOWS * window_s)
        self.retention, self.retention_s = retention, retention_s
        self.extra_attrs = {"switch_probes": layout.switch_results, "discovery": layout.discovery}
        self.topo, self.paths, self.flows = layout.topo, layout.paths, layout.flows
        self._hosts = layout.topo.hosts
        self._wr: RunWriter | None = None
        self._started = self._epoch = None
        self._windows = self._dropped = 0
        self._t_min = self._t_max = None
        self.written: list[Path] = []  # segments this writer closed
        self.recovered: list[Path] = []  # partial segments of a crashed writer, finalized
        self.removed: list[Path] = []  # partial segments that could not be finalized
        self._lock_fd = self._lock()
        try:
            self._recover()
            self._retain()
        except BaseException:
            self._unlock()
            raise

    # ------------------------------------------------------------ directory
    def _lock(self) -> int:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = open_lock(self.directory / LOCK_NAME)
        except OSError as exc:
            raise DataError(f"{self.directory}: cannot use segment directory: {exc.strerror}") \
                from None
        if fd is None:
            raise DataError(f"{self.directory}: segment directory in use by another lens")
        return fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def segments(self) -> list[Path]:
        """Closed segments, oldest first (the UTC start time in the name sorts them)."""
        pat = re.compile(rf"{re.escape(self.prefix)}-\d{{8}}T\d{{6}}Z(-\d+)?\.h5")
        out = []
        for p in self.directory.iterdir():
            if pat.fullmatch(p.name) and stat.S_ISREG(os.lstat(p).st_mode):
                out.append(p)
        return sorted(out, key=lambda p: (p.name[:len(self.prefix) + 17], len(p.name), p.name))

    def _final_name(self, t: float) -> Path:
        base = f"{self.prefix}-{_utc_stamp(t)}"
        path, n = self.directory / f"{base}.h5", 1
        while path.exists() or path.is_symlink() or any(
                self.directory.glob(f".{path.name}.*.tmp")):
            path, n = self.directory / f"{base}-{n}.h5", n + 1
        return path

    # ------------------------------------------------------------ writing
    def _open(self, probes: np.ndarray, meta: dict) -> None:
        now = float(meta.get("t_end") or self.clock())
        epoch = meta.get("epoch_ns")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch <= 0:
            sent = probes["t_send"][probes["t_send"] > 0]
            epoch = int(sent.min()) if sent.size else int(now * 1e9)
        self._wr = RunWriter(self._final_name(now), run_id=self._final_name(now).stem,
                             cluster=self.cluster, parameters=self.parameters, epoch_ns=epoch,
                             started_at=_iso(now))
        self._started, self._epoch = now, epoch
        self._windows = self._dropped = 0
        self._t_min = self._t_max = None
        wr = self._wr
        wr.write_topology(self.topo)
        wr.write_paths(self.paths)
        wr.write_flows(self.flows)
        wr.set_attrs(**{k: json.dumps(v, sort_keys=True) for k, v in self.extra_attrs.items()})

    def append(self, probes: np.ndarray, health: dict | None = None,
               meta: dict | None = None) -> None:
        """One window: its probe records (PROBE_DTYPE), the agents' health rows (node -> a table
        {"fields", "windows", "window_s"} or a list of rows of mesh.health.HEALTH_FIELDS), and its
        meta ({"t_end": seconds since 1970, "epoch_ns": optional}). Records that the segment could
        not hold (unknown flow or NIC, no send time, too far from the segment's epoch) are dropped
        and counted in the segment's `lens` attribute."""
        meta = dict(meta or {})
        try:
            probes = np.asarray(probes, dtype=PROBE_DTYPE)
        except (TypeError, ValueError) as exc:
            raise DataError(f"lens segment: probe records are not PROBE_DTYPE: {exc}") from None
        now = float(meta.get("t_end") or self.clock())
        if self._wr is not None and now - self._started >= self.segment_s:
            self.roll()
        if self._wr is None:
            if not probes.size and not health:
                return  # nothing yet: no empty segment
            self._open(probes, meta)
        wr = self._wr
        keep = self._valid(probes)
        self._dropped += int((~keep).sum())
        probes = probes[keep]
        with aborting(self._lost, f"{wr.path}: cannot write lens segment", interrupt_aborts=False):
            self._append_health(health or {})  # before the probes: see _finalize_partial
            if probes.size:
                wr.append_probes(probes)
                t = probes["t_send"]
                lo, hi = int(t.min()), int(t.max())
                self._t_min = lo if self._t_min is None else min(self._t_min, lo)
                self._t_max = hi if self._t_max is None else max(self._t_max, hi)
            self._windows += 1
            wr.f.flush()
            wr._check()

    def _lost(self) -> None:
        if self._wr is not None:
            self._wr.abort()
            self._wr = None

    def _valid(self, p: np.ndarray) -> np.ndarray:
        n_nic = len(self.topo.nics)
        ok = np.isin(p["flow"], self.flows["flow"]) & (p["src_nic"] >= 0) & \
            (p["src_nic"] < n_nic) & (p["dst_nic"] >= -1) & (p["dst_nic"] < n_nic) & \
            (p["lost"] <= 3) & (p["t_send"] != 0)
        for key in ("t_send", "t_remote_rx", "t_remote_tx", "t_recv"):
            t = p[key]
            ok &= (t == 0) | ((t >= self._epoch - MAX_SPAN_NS // 2) & (t <= self._epoch + MAX_SPAN_NS // 2))
        return ok

    def _append_health(self, health: dict) -> None:
        rows, hosts = [], []
        hpos = {h: i for i, h in enumerate(self._hosts)}
        g = self._wr.f.get("health")
        for node, table in health.items():
            if node not in hpos:
                continue
            if isinstance(table, dict):
                fields, windows = list(table.get("fields") or []), table.get("windows")
                windows = [] if windows is None else windows
                if isinstance(windows, np.ndarray):  # lens's ingest keeps the rows as arrays
                    windows = windows.tolist()
                window_s = table.get("window_s")
            else:
                fields, windows, window_s = list(HEALTH_FIELDS), table, None
            if g is None:
                g = self._health_group(fields, window_s)
            want = json.loads(g.attrs["fields"])
            pos = {f: i for i, f in enumerate(fields)}
            for row in windows:
                if not isinstance(row, (list, tuple)) or len(row) != len(fields):
                    continue
                vals = [float(row[pos[f]]) if f in pos else -1.0 for f in want]
                if all(np.isfinite(vals)) and min(vals, default=0) >= -1:
                    rows.append(vals)
                    hosts.append(hpos[node])
        if not rows:
            return
        for name, data in (("rows", np.asarray(rows, dtype=np.float64)),
                           ("host", np.asarray(hosts, dtype=np.int32))):
            ds = g[name]
            n = ds.shape[0]
            ds.resize(n + len(data), axis=0)
            ds[n:] = data

    def _health_group(self, fields: list, window_s) -> h5py.Group:
        g = self._wr.f.create_group("health")
        g.attrs["fields"] = json.dumps([str(f) for f in fields])
        g.attrs["window_s"] = float(window_s) if isinstance(window_s, (int, float)) and \
            0 <= window_s <= 3600 else 1.0
        g.create_dataset("host", shape=(0,), maxshape=(None,), dtype=np.int32,
                         chunks=(HEALTH_CHUNK,))
        g.create_dataset("rows", shape=(0, len(fields)), maxshape=(None, len(fields)),
                         dtype=np.float64, chunks=(HEALTH_CHUNK, len(fields)),
                         compression="gzip", shuffle=True)
        return g

    def _lens_attrs(self) -> dict:
        span = ((self._t_max - self._t_min) * 1e-9) if self._t_min is not None else 0.0
        return {"parameters": json.dumps({**self.parameters, "duration": round(min(span, 86_400), 3)},
                                         sort_keys=True),
                "lens": json.dumps({"segment_s": self.segment_s, "windows": self._windows,
                                    "records_dropped": self._dropped, "recovered": False})}

    def roll(self) -> Path | None:
        """Close the current segment (complete, fsync, atomic rename), apply retention; its path,
        or None when no segment was open or it held no probe record (it is discarded)."""
        wr, self._wr = self._wr, None
        if wr is None:
            return None
        if self._t_min is None:  # health without one probe: audit analyze could not use it
            wr.abort()
            return None
        wr.set_attrs(**self._lens_attrs())
        path = wr.close(ended_at=_iso(self.clock()))
        self.written.append(path)
        self._retain()
        return path

    def set_layout(self, topo: Topology, paths: PathTable, flows: np.ndarray) -> Path | None:
        """New flows or paths (a re-trace): the current segment rolls, the next uses them."""
        out = self.roll()
        self.topo, self.paths, self.flows = topo, paths, flows
        self._hosts = topo.hosts
        return out

    def close(self) -> Path | None:
        try:
            return self.roll()
        finally:
            self._unlock()

    def abort(self) -> None:
        """Drop the open segment (its temporary file) and release the directory."""
        self._lost()
        self._unlock()

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # ------------------------------------------------------------ retention
    def _retain(self) -> None:
        segs = self.segments()
        doomed = set()
        if self.retention is not None and len(segs) > self.retention:
            doomed.update(segs[:len(segs) - self.retention])
        if self.retention_s is not None:
            cut = self.clock() - self.retention_s
            doomed.update(p for p in segs if os.lstat(p).st_mtime < cut)
        for p in doomed:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        if doomed:
            fsync_dir(self.directory)

    # ------------------------------------------------------------ crash recovery
    def _recover(self) -> None:
        """Finalize every partial segment of a crashed writer; one that cannot be finalized, for
        whatever reason (HDF5 metadata cut by the crash, or a file somebody damaged or planted),
        is removed and logged: never a failed start."""
        pat = re.compile(rf"\.({re.escape(self.prefix)}-\d{{8}}T\d{{6}}Z(-\d+)?\.h5)\.[^/]+\.tmp")
        for p in sorted(self.directory.iterdir()):
            m = pat.fullmatch(p.name)
            try:
                if not m or not stat.S_ISREG(os.lstat(p).st_mode):
                    continue
            except OSError:  # gone meanwhile
                continue
            final = self.directory / m.group(1)
            try:
                if final.exists() or final.is_symlink():
                    raise DataError("a segment of that name exists")
                _finalize_partial(p, _iso(self.clock()))
                os.rename(p, final)
                self.recovered.append(final)
            except Exception as exc:  # noqa: BLE001 - any damage: the partial file is set aside
                self._set_aside(p, exc)
        if self.recovered or self.removed:
            fsync_dir(self.directory)

    def _set_aside(self, path: Path, exc: Exception) -> None:
        why = exc.message if isinstance(exc, FleetctlError) else f"{type(exc).__name__}: {exc}"
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            self.log(f"{path}: damaged partial segment ({clean_text(why, 200)}) not removed: "
                     f"{err.strerror}")
            return
        self.removed.append(path)
        self.log(f"{path}: damaged partial segment removed ({clean_text(why, 200)})")


def _finalize_partial(path: Path, ended_at: str) -> None:
    """Make a crashed writer's partial segment a complete run file in place, or raise."""
    fd = open_regular(path, os.O_RDWR, what="partial segment")
    with os.fdopen(fd, "r+b", buffering=0) as fh:
        with h5py.File(fh, "r+") as f:
            if f.attrs.get("format") != FORMAT or not isinstance(f.get("probes"), h5py.Dataset) \
                    or "health" in f and not isinstance(f["health"], h5py.Group):
                raise DataError(f"{path}: not a partial lens segment")
            probes = f["probes"]
            n = _whole_rows(probes)
            if n == 0:
                raise DataError(f"{path}: no probe record")
            probes.resize((n,))
            if "health" in f:
                g = f["health"]
                rows = min(g["host"].shape[0], g["rows"].shape[0])
                g["host"].resize((rows,))
                g["rows"].resize(rows, axis=0)
            t = probes.fields("t_send")[()]
            params = loads_json(f.attrs.get("parameters") or "{}", f"{path}: parameters",
                                kind=dict)
            params["duration"] = round(min((int(t.max()) - int(t.min())) * 1e-9, 86_400), 3)
            f.attrs["parameters"] = json.dumps(params, sort_keys=True)
            f.attrs["lens"] = json.dumps({"recovered": True, "windows": None})
            f.attrs["recovered"] = True
            f.attrs["ended_at"] = ended_at
            f.attrs["complete"] = True
        os.fsync(fd)
        os.fchmod(fd, 0o644)
    with open_run(path) as run:  # the reader's whole validation, or the partial file goes
        run.topology()
        run.flows()
        run.probes()
        run.health()


def _whole_rows(probes) -> int:
    """Rows up to the last one with a send time: a resize whose write the crash cut off leaves
    zero rows at the end."""
    n = probes.shape[0]
    step = 65_536
    while n > 0:
        lo = max(0, n - step)
        t = probes.fields("t_send")[lo:n]
        nz = np.flatnonzero(t)
        if nz.size:
            return lo + int(nz[-1]) + 1
        n = lo
    return 0
