"""Reading a run file back, refusing anything that is not a complete run of a known schema.

    with open_run("run.h5") as run:
        topo, paths = run.topology(), run.paths()
        stats = run.window_stats("p99")

Every problem is a DataError naming the file: not HDF5 or truncated, not a fleetctl run, written by
a newer fleetctl, incomplete (crashed or still being written), a dataset missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from fleetctl.analysis.signals import WindowStats
from fleetctl.errors import ConfigError, DataError
from fleetctl.mesh.store import FORMAT, REQUIRED, SCHEMA_VERSION
from fleetctl.mesh.topology import PathTable, Topology


class Run:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(f"{self.path}: run file not found")
        try:
            self.f = h5py.File(self.path, "r")
        except OSError as exc:
            raise DataError(f"{self.path}: not a readable HDF5 file (truncated or corrupt?): "
                            f"{_short(exc)}") from None
        try:
            self._validate()
        except Exception:
            self.f.close()
            raise

    def _validate(self) -> None:
        a = self.f.attrs
        if a.get("format") != FORMAT:
            raise DataError(f"{self.path}: not a fleetctl mesh run (format attribute "
                            f"{a.get('format')!r}, expected {FORMAT!r})")
        version = a.get("schema_version")
        if version is None or not np.issubdtype(type(version), np.integer):
            raise DataError(f"{self.path}: schema_version attribute missing or not an integer")
        if int(version) > SCHEMA_VERSION:
            raise DataError(f"{self.path}: schema version {int(version)} was written by a newer "
                            f"fleetctl; this one reads up to version {SCHEMA_VERSION}")
        if int(version) < 1:
            raise DataError(f"{self.path}: invalid schema version {int(version)}")
        if not a.get("complete", False):
            raise DataError(f"{self.path}: incomplete run (no `complete` attribute: the writer "
                            "crashed or is still writing)")
        for name in REQUIRED:
            try:
                present = name in self.f
            except (OSError, RuntimeError, KeyError):  # damaged object headers
                present = False
            if not present:
                raise DataError(f"{self.path}: dataset /{name} is missing")

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.f.close()

    def _read(self, name: str):
        if name not in self.f:
            raise DataError(f"{self.path}: dataset /{name} is missing")
        try:
            return self.f[name][()]
        except (OSError, RuntimeError, ValueError) as exc:
            raise DataError(f"{self.path}: dataset /{name} cannot be read (truncated or "
                            f"corrupt?): {_short(exc)}") from None

    # ------------------------------------------------------------------ metadata
    @property
    def attrs(self) -> dict:
        out = {k: _plain(v) for k, v in self.f.attrs.items()}
        try:
            out["parameters"] = json.loads(out.get("parameters") or "{}")
        except (TypeError, ValueError):
            raise DataError(f"{self.path}: root attribute 'parameters' is not JSON") from None
        return out

    # ------------------------------------------------------------------ tables
    def topology(self) -> Topology:
        nics = self._read("nics")
        els = self._read("elements")
        switches, links = {}, []
        for t, i, d, tier in els:
            t, i, d = _s(t), _s(i), _s(d)
            if t == "switch":
                switches[i] = int(tier)
            elif t == "link":
                a, _, b = d.partition("->")
                if not links or links[-1][0] != i:  # both directions are stored in a row
                    links.append((i, a, b))
        name = _s(self.f["elements"].attrs.get("topology", self.f.attrs.get("cluster", "")))
        ports = {}
        if "links" in self.f:  # optional in schema 1
            ports = {_s(r["id"]): (_s(r["a_port"]), _s(r["b_port"])) for r in self._read("links")}
        try:
            return Topology.build(name, [(_s(n["name"]), _s(n["host"])) for n in nics],
                                  switches, links, ports)
        except (ConfigError, ValueError, KeyError) as exc:
            raise DataError(f"{self.path}: the element table is inconsistent: "
                            f"{getattr(exc, 'message', exc)}") from None

    def paths(self) -> PathTable:
        t = PathTable(self._read("paths/indptr").astype(np.int64),
                      self._read("paths/elements").astype(np.int64),
                      self._read("paths/weights").astype(np.float64),
                      self._read("paths/src_nic").astype(np.int64),
                      self._read("paths/dst_nic").astype(np.int64),
                      self._read("paths/traced").astype(bool))
        n_el, n_nic = len(self.f["elements"]), len(self.f["nics"])
        p = len(t.indptr) - 1
        problems = [
            (p < 0 or t.indptr[0] != 0 or np.any(np.diff(t.indptr) < 0)
             or t.indptr[-1] != len(t.elements), "indptr is not a valid CSR pointer"),
            (len(t.weights) != len(t.elements), "weights and elements differ in length"),
            (not len(t.src_nic) == len(t.dst_nic) == len(t.traced) == p,
             "src_nic, dst_nic, traced do not have one entry per path"),
            (len(t.elements) and (t.elements.min() < 0 or t.elements.max() >= n_el),
             "an element index is outside /elements"),
            (p and (min(t.src_nic.min(), t.dst_nic.min()) < 0
                    or max(t.src_nic.max(), t.dst_nic.max()) >= n_nic),
             "a NIC index is outside /nics"),
        ]
        for bad, what in problems:
            if bad:
                raise DataError(f"{self.path}: /paths: {what}")
        return t

    def flows(self) -> np.ndarray:
        return self._read("flows")

    def probes(self) -> np.ndarray:
        return self._read("probes")

    def window_stats(self, statistic: str = "p50") -> WindowStats:
        if statistic not in ("p50", "p99"):
            raise DataError(f"unknown delay statistic {statistic!r} (p50 or p99)")
        return WindowStats(sent=self._read("windows/path_sent"),
                           lost=self._read("windows/path_lost"),
                           delay=self._read(f"windows/path_{statistic}_us").astype(np.float64))

    def matrices(self) -> dict[str, np.ndarray]:
        return {k: self._read(f"windows/{k}") for k in ("delay_p50_us", "delay_p99_us", "loss")}

    def clock(self) -> dict[str, np.ndarray]:
        return {k: self._read(f"clock/{k}") for k in ("offset_s", "drift", "component", "pairs")}

    def findings(self) -> list[dict]:
        if "findings" not in self.f:
            return []
        return [json.loads(_s(s)) for s in self._read("findings/json")]


def open_run(path: str | os.PathLike) -> Run:
    return Run(path)


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
