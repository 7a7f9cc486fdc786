#!/usr/bin/env python3
"""Snapshot figures: blocking and total time per GB of training state, fleetctl.snapshot against plain
torch.save and DCP's own save in the same run, and restore times. Prints JSON.

    python benchmarks/snapshot.py [--sizes 0.1,0.5,1] [--dir /tmp/fleetctl-snapbench] [--repeat 2]

State of S GB = fp32 parameters (S/3) + Adam's two moments (2S/3), one process (one rank's share; the
coordination collectives of a multi-rank job are a few small gloo messages and are not measured here).
- fleetctl async: `Snapshotter.step(force=True)` returns after DCP has staged (copied) the state:
  that is the blocking time; total = until the snapshot is published (written, fsynced, sha256 of
  every file, manifest, rename, LATEST) via `wait()`.
- fleetctl sync: the same with use_async=False.
- torch.save: one file per rank, then fsync (what the published snapshot also guarantees).
- dcp.save / dcp.async_save: DCP alone, no digests, no manifest, no LATEST.
- restore: `Snapshotter.restore()` (verifies every sha256 first, then dcp.load), torch.load, dcp.load.
The files are usually still in the page cache when read back: restore figures are warm-cache figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from fleetctl.snapshot import Snapshotter

CHUNK = 16 * 1024 * 1024  # floats per parameter tensor (64 MiB)


def make_state(gb: float):
    floats = int(gb * 1e9 / 4 / 3)
    sizes = [CHUNK] * (floats // CHUNK) + ([floats % CHUNK] if floats % CHUNK else [])
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n)) for n in sizes])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()  # materialise both moments
    for p in model.parameters():
        p.grad = None
    nbytes = sum(t.numel() * 4 for t in model.parameters()) * 3
    return model, opt, nbytes


def fsync_tree(path: Path) -> None:
    for name in os.listdir(path):
        fd = os.open(path / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def bench_size(gb: float, base: Path, repeat: int) -> dict:
    model, opt, nbytes = make_state(gb)
    per_gb = nbytes / 1e9
    runs: dict[str, list[dict]] = {}

    def record(name: str, blocking: float, total: float) -> None:
        runs.setdefault(name, []).append({"blocking_s": blocking, "total_s": total})

    for i in range(repeat):
        for use_async in (True, False):
            d = fresh(base / "fleetctl")
            snap = Snapshotter(model, opt, directory=d, keep=1, periodic=False, use_async=use_async,
                               signal_number=None)
            t0 = time.perf_counter()
            snap.step(i, force=True)
            t1 = time.perf_counter()
            snap.wait()
            t2 = time.perf_counter()
            snap.close()
            record("fleetctl_async" if use_async else "fleetctl_sync", t1 - t0, t2 - t0)
        d = fresh(base / "torchsave")
        t0 = time.perf_counter()
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, d / "rank_0.pt")
        fsync_tree(d)
        t1 = time.perf_counter()
        record("torch_save", t1 - t0, t1 - t0)
        d = fresh(base / "dcp")
        state = {"model": model.state_dict(), "optim": opt.state_dict()}
        t0 = time.perf_counter()
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(d)), no_dist=True)
        t1 = time.perf_counter()
        record("dcp_save", t1 - t0, t1 - t0)
        d = fresh(base / "dcp_async")
        t0 = time.perf_counter()
        fut = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(str(d)), no_dist=True)
        t1 = time.perf_counter()
        getattr(fut, "upload_completion", fut).result()
        t2 = time.perf_counter()
        record("dcp_async_save", t1 - t0, t2 - t0)

    # Restore, from what the last round wrote.
    restore: dict[str, float] = {}
    d = base / "fleetctl"
    snap = Snapshotter(model, opt, directory=d, keep=1, periodic=False, signal_number=None)
    t0 = time.perf_counter()
    step = snap.restore()
    restore["fleetctl_restore_verified_s"] = time.perf_counter() - t0
    assert step is not None
    t0 = time.perf_counter()
    loaded = torch.load(base / "torchsave" / "rank_0.pt", weights_only=True)
    model.load_state_dict(loaded["model"])
    opt.load_state_dict(loaded["optim"])
    restore["torch_load_s"] = time.perf_counter() - t0
    del loaded
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    t0 = time.perf_counter()
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(base / "dcp")), no_dist=True)
    restore["dcp_load_s"] = time.perf_counter() - t0

    out = {"gb_requested": gb, "bytes": nbytes, "methods": {}, "restore": {}}
    for name, rs in runs.items():
        b = statistics.median(r["blocking_s"] for r in rs)
        t = statistics.median(r["total_s"] for r in rs)
        out["methods"][name] = {"blocking_s": round(b, 4), "total_s": round(t, 4),
                                "blocking_s_per_gb": round(b / per_gb, 4), "total_s_per_gb": round(t / per_gb, 4),
                                "runs": len(rs)}
    for name, value in restore.items():
        out["restore"][name] = round(value, 4)
        out["restore"][name.replace("_s", "_s_per_gb") if name.endswith("_s") else name] = round(value / per_gb, 4)
    shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.1,0.5,1")
    ap.add_argument("--dir", default="/tmp/fleetctl-snapbench")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    results = []
    for gb in (float(s) for s in args.sizes.split(",")):
        results.append(bench_size(gb, Path(args.dir), args.repeat))
    print(json.dumps({"torch": torch.__version__, "python": platform.python_version(),
                      "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
                      "directory": args.dir, "sizes": results}, indent=1))


if __name__ == "__main__":
    main()
