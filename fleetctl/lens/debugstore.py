"""The sampled debug records on disk: `<state_dir>/debug-records/`, read by `fleetctl lens records`
(docs/lens.md, "Sampled debug records").

    store = DebugStore(state_dir / "debug-records", counters=coordinator_counters)
    store.set_layout(flows, topo.nics, topo.nic_host)   # each plan (writes what is buffered)
    store.append(probes, a, b)                          # each closed window [a, b)
    store.flush()                                       # on stop

Closed windows are buffered and written as one file per FILE_S seconds of windows (or sooner, at
MAX_FILE_RECORDS records): `debug-<UTC start>.h5`, made whole in memory and written with
fleetctl.atomic (a private temporary file, fsync, rename): a file under its final name is always
whole. It holds the PROBE_DTYPE records (`/probes`), the FLOW_DTYPE rows of the flows they name
(`/flows`) and those flows' NICs (`/nic_index`, `/nic_id`, `/nic_host`), so it is read without the
plan. Retention after each write: at most MAX_FILES files and MAX_BYTES bytes, the oldest removed
first. A write that fails (a full disk) is the caller's DataError; the buffered records are
dropped (counted), never retried without bound.

The reader treats every file as planted: regular files only, bounded sizes, the exact dtypes, and
a file that fails is skipped with its reason, never a traceback.
"""

from __future__ import annotations

import io
import os
import re
import stat
import time
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

from fleetctl.atomic import write_atomic
from fleetctl.errors import DataError
from fleetctl.filekit import open_regular
from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE
from fleetctl.nodeset import NodeSet, contains

DIRECTORY = "debug-records"
FORMAT = "fleetctl-lens-debug-records"
VERSION = 1
FILE_S = 60.0  # a file per minute of windows
MAX_FILE_RECORDS = 250_000  # or sooner: ~15 MB of records before compression
MAX_FILES = 1440  # a day of one-minute files
MAX_BYTES = 512 << 20  # on disk, all files together
MAX_READ_BYTES = 256 << 20  # a larger file is not one of ours
MAX_NICS = 1 << 20
NAME = re.compile(r"debug-(\d{8}T\d{6}Z)(?:-(\d{1,6}))?\.h5")
TEMPORARY = re.compile(r"\.debug-\d{8}T\d{6}Z(?:-\d{1,6})?\.h5\.[^/]+\.tmp")
COUNTERS = ("debug_records_written", "debug_records_unwritten", "debug_files_written",
            "debug_files_removed")
RESULT = {0: "answered", 1: "lost out", 2: "lost back", 3: "lost (loop)"}


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def debug_files(directory: Path) -> list[Path]:
    """The store's files (regular, by name), oldest first."""
    try:
        names = [p for p in directory.iterdir() if NAME.fullmatch(p.name)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DataError(f"{directory}: cannot list the debug records: {exc.strerror}") from None
    out = []
    for p in names:
        try:
            if stat.S_ISREG(os.lstat(p).st_mode):
                out.append(p)
        except OSError:  # gone meanwhile
            continue
    m = {p: NAME.fullmatch(p.name) for p in out}
    return sorted(out, key=lambda p: (m[p].group(1), int(m[p].group(2) or 0)))


class DebugStore:
    """One coordinator writes (its pid lock keeps a second out of the state directory)."""

    def __init__(self, directory: str | os.PathLike, *, file_s: float = FILE_S,
                 max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES,
                 counters: dict | None = None):
        self.directory = Path(directory)
        self.file_s, self.max_files, self.max_bytes = file_s, max_files, max_bytes
        self.counters = counters if counters is not None else {}
        for name in COUNTERS:
            self.counters.setdefault(name, 0)
        self.flows = np.zeros(0, FLOW_DTYPE)
        self.nic_id: list[str] = []
        self.nic_host: list[str] = []
        self._reset()
        self._remove_temporaries()

    def _reset(self) -> None:
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.windows = 0
        self.t_start: float | None = None
        self.t_end: float | None = None

    def _remove_temporaries(self) -> None:
        """A crash between the temporary file and its rename left it: never a final file."""
        try:
            found = [p for p in self.directory.iterdir() if TEMPORARY.fullmatch(p.name)]
        except OSError:
            return
        for p in found:
            try:
                if stat.S_ISREG(os.lstat(p).st_mode):
                    os.unlink(p)
            except OSError:
                pass

    def set_layout(self, flows: np.ndarray, nic_id: list[str], nic_host: list[str]) -> None:
        """A new plan: what is buffered is written with the old flows first."""
        self.flush()
        self.flows, self.nic_id, self.nic_host = flows, list(nic_id), list(nic_host)

    def append(self, probes: np.ndarray, a: float, b: float) -> Path | None:
        """One closed window [a, b)'s sampled records (PROBE_DTYPE, flows of the layout); the
        file written, if this window completed one."""
        written = None
        if self.n and self.n + probes.size > MAX_FILE_RECORDS:
            try:
                written = self.flush()
            except BaseException:  # this window's records are lost with the buffer's
                self.counters["debug_records_unwritten"] += probes.size
                raise
        if probes.size > MAX_FILE_RECORDS:  # never from the collector (MAX_PENDING is lower)
            self.counters["debug_records_unwritten"] += probes.size - MAX_FILE_RECORDS
            probes = probes[:MAX_FILE_RECORDS]
        if self.t_start is None:
            self.t_start = a
        self.t_end = b
        self.windows += 1
        if probes.size:
            self.parts.append(probes)
            self.n += probes.size
        if b - self.t_start >= self.file_s:
            written = self.flush() or written
        return written

    def flush(self) -> Path | None:
        """Write the buffered windows as one file (none when they hold no record); retention."""
        parts, t0, t1, windows = self.parts, self.t_start, self.t_end, self.windows
        self._reset()
        if not parts:
            return None
        probes = np.concatenate(parts)
        path = self._name(t0)
        try:
            write_atomic(path, self._encode(probes, t0, t1, windows))
        except BaseException:
            self.counters["debug_records_unwritten"] += probes.size
            raise
        self.counters["debug_records_written"] += probes.size
        self.counters["debug_files_written"] += 1
        self._retain(keep=path)
        return path

    def _name(self, t: float) -> Path:
        base, n = f"debug-{_stamp(t)}", 0
        path = self.directory / f"{base}.h5"
        while path.exists() or path.is_symlink():
            n += 1
            path = self.directory / f"{base}-{n}.h5"
        return path

    def _encode(self, probes: np.ndarray, t0: float, t1: float, windows: int) -> bytes:
        """The whole file, made in memory: written in one atomic step."""
        flows = self.flows[np.unique(probes["flow"])]
        nics = np.unique(np.concatenate([flows["src_nic"], flows["dst_nic"]]))
        nics = nics[(nics >= 0) & (nics < len(self.nic_id))]
        buf = io.BytesIO()
        with h5py.File(buf, "w") as f:
            f.attrs.update({"format": FORMAT, "version": VERSION, "t_start": float(t0),
                            "t_end": float(t1), "windows": int(windows),
                            "written": time.time()})
            f.create_dataset("probes", data=probes, compression="gzip", shuffle=True)
            f.create_dataset("flows", data=flows)
            f.create_dataset("nic_index", data=nics.astype(np.int32))
            text = h5py.string_dtype()
            f.create_dataset("nic_id", data=[self.nic_id[i] for i in nics], dtype=text)
            f.create_dataset("nic_host", data=[self.nic_host[i] for i in nics], dtype=text)
        return buf.getvalue()

    def _retain(self, keep: Path) -> None:
        """At most max_files files and max_bytes bytes: the oldest go (never the one just
        written)."""
        files = debug_files(self.directory)
        sizes = {}
        for p in files:
            try:
                sizes[p] = os.lstat(p).st_size
            except OSError:
                sizes[p] = 0
        count, total = len(files), sum(sizes.values())
        for p in files:
            if p == keep or (count <= self.max_files and total <= self.max_bytes):
                break
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            count, total = count - 1, total - sizes[p]
            self.counters["debug_files_removed"] += 1


# ---------------------------------------------------------------------- reading
def read_file(path: Path) -> tuple[np.ndarray, dict, float, float]:
    """(records, flow id -> (src NIC id, src host, dst NIC id, dst host, sport), t_start, t_end)
    of one file; DataError naming what is wrong."""
    try:
        fd = open_regular(path, what="debug records file")
    except OSError as exc:
        raise DataError(f"{path}: cannot open: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > MAX_READ_BYTES:
            raise DataError(f"{path}: larger than {MAX_READ_BYTES >> 20} MiB: not a debug records file")
        try:
            with h5py.File(fh, "r") as f:
                return _contents(f, path)
        except DataError:
            raise
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, UnicodeDecodeError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise DataError(f"{path}: not a readable debug records file: {first}") from None


def _dataset(f, name: str, path: Path, *, dtype=None, kind: str | None = None,
             limit: int = MAX_FILE_RECORDS) -> np.ndarray:
    """A one-dimensional dataset of at most `limit` rows: of exactly `dtype`, of an integer
    `kind`, or else of strings (read as str)."""
    ds = f.get(name)
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or ds.shape[0] > limit:
        raise DataError(f"{path}: /{name} is missing, not one-dimensional or over {limit} rows")
    text = dtype is None and kind is None
    if (dtype is not None and ds.dtype != dtype) or (kind is not None and ds.dtype.kind != kind) \
            or (text and h5py.check_string_dtype(ds.dtype) is None):
        raise DataError(f"{path}: /{name} has dtype {ds.dtype}")
    return ds.asstr()[()] if text else ds[()]


def _contents(f, path: Path) -> tuple[np.ndarray, dict, float, float]:
    a = f.attrs
    if a.get("format") != FORMAT or int(a.get("version", 0)) != VERSION:
        raise DataError(f"{path}: not a version-{VERSION} {FORMAT} file")
    t0, t1 = float(a.get("t_start", np.nan)), float(a.get("t_end", np.nan))
    if not (np.isfinite(t0) and np.isfinite(t1)):
        raise DataError(f"{path}: t_start / t_end are not times")
    probes = _dataset(f, "probes", path, dtype=PROBE_DTYPE)
    flows = _dataset(f, "flows", path, dtype=FLOW_DTYPE)
    index = _dataset(f, "nic_index", path, kind="i", limit=MAX_NICS)
    ids = _dataset(f, "nic_id", path, limit=MAX_NICS)
    hosts = _dataset(f, "nic_host", path, limit=MAX_NICS)
    if not len(index) == len(ids) == len(hosts):
        raise DataError(f"{path}: the NIC tables differ in length")
    nic = {int(i): (str(n), str(h)) for i, n, h in zip(index, ids, hosts)}
    loop = ("loop", "")
    table = {int(r["flow"]): (*nic.get(int(r["src_nic"]), ("?", "")),
                              *(loop if r["dst_nic"] < 0 else nic.get(int(r["dst_nic"]), ("?", ""))),
                              int(r["sport"])) for r in flows}
    return probes, table, t0, t1


def _iso_ns(t_ns: int) -> str:
    """ISO-8601 UTC with milliseconds; "-" for a time no calendar holds (a planted file)."""
    try:
        return datetime.fromtimestamp(t_ns / 1e9, timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (ValueError, OverflowError, OSError):
        return "-"


def _row(p, table: dict) -> dict:
    """One record as printed: raw one-way times are two clocks apart (the offset included)."""
    src, src_host, dst, dst_host, _sport = table.get(int(p["flow"]), ("?", "", "?", "", 0))
    t1, t2, t3, t4, lost = (int(p[k]) for k in ("t_send", "t_remote_rx", "t_remote_tx", "t_recv",
                                                 "lost"))
    ok = lost == 0 and t4 > 0
    loop = dst == "loop"
    return {"time": _iso_ns(t1), "t_send_ns": t1, "flow": int(p["flow"]), "src": src, "src_host": src_host,
            "dst": dst, "dst_host": dst_host, "sport": int(p["sport"]), "seq": int(p["seq"]),
            "result": RESULT.get(lost, str(lost)),
            "rtt_us": round(((t4 - t1) - (0 if loop else t3 - t2)) / 1e3, 3) if ok else None,
            "fwd_raw_us": round((t2 - t1) / 1e3, 3) if ok and not loop else None,
            "back_raw_us": round((t4 - t3) / 1e3, 3) if ok and not loop else None,
            "t_remote_rx_ns": t2, "t_remote_tx_ns": t3, "t_recv_ns": t4}


def read_records(directory: Path, *, since: float | None = None, nodes: NodeSet | None = None,
                 flow: int | None = None, limit: int = 100) -> dict:
    """The newest `limit` sampled records that match (sent at or after `since`, epoch seconds;
    from or to a node of `nodes`; of `flow`), oldest first, with the files read and those
    skipped (and why)."""
    files = debug_files(directory)
    picked: list[dict] = []
    read, skipped = 0, []
    since_ns = None if since is None else int(since * 1e9)
    for path in reversed(files):  # newest first: stop once `limit` are found
        if len(picked) >= limit:
            break
        try:
            probes, table, t0, _t1 = read_file(path)
        except DataError as exc:
            skipped.append({"file": path.name, "error": exc.message})
            continue
        read += 1
        keep = np.ones(probes.size, bool)
        if since_ns is not None:
            keep &= probes["t_send"] >= since_ns
        if flow is not None:
            keep &= probes["flow"] == flow
        sel = probes[keep]
        if nodes is not None and sel.size:  # decided once per flow, not per record
            flows = np.unique(sel["flow"])
            mine = flows[np.array([_touches(table.get(int(f)), nodes) for f in flows], bool)]
            sel = sel[np.isin(sel["flow"], mine)]
        sel = sel[np.argsort(sel["t_send"], kind="stable")][-(limit - len(picked)):]
        picked.extend(_row(p, table) for p in sel[::-1])
        if since is not None and t0 <= since:
            break  # the older files end before this one starts
    picked.sort(key=lambda r: r["t_send_ns"])
    return {"directory": str(directory), "records": picked, "files": len(files),
            "files_read": read, "skipped": skipped}


def _touches(entry, nodes: NodeSet) -> bool:
    return entry is not None and (contains(nodes, entry[1]) or
                                  (bool(entry[3]) and contains(nodes, entry[3])))
