"""Snapshot directories made by hand (no torch): the files DCP and the Snapshotter write, with a
manifest built by the real code, so that verify/choose/prune are tested on the real format.

    from snapfixtures import make_snapshot
    path = make_snapshot(root, step=10, world=2)        # step_10/ committed, with MANIFEST.json
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetctl.snapshot import manifest
from fleetctl.snapshot.layout import step_name, write_latest


def make_snapshot(root: Path, step: int, world: int = 2, *, latest: bool = True, committed: bool = True,
                  with_manifest: bool = True, size: int = 4096) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{step_name(step)}.tmp"
    tmp.mkdir()
    files = {}
    for rank in range(world):
        names = [f"__{rank}_0.distcp", manifest.rank_state_name(rank)]
        if rank == 0:
            names.append(manifest.DCP_METADATA)
        for name in names:
            (tmp / name).write_bytes(os.urandom(size))
        files.update(manifest.digest_files(tmp, names, rank))
    if with_manifest:
        manifest.write(tmp, manifest.build(step, world, files, reason="test", request=None))
    if not committed:
        return tmp
    final = root / step_name(step)
    tmp.rename(final)
    if latest:
        write_latest(root, step)
    return final


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0xFF
    path.write_bytes(bytes(data))
