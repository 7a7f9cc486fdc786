"""Where a Slurm job's snapshots live: one small file per job, written by the job itself.

    $FLEETCTL_SNAPSHOT_REGISTRY/<jobid>.json   (default /var/lib/fleetctl/snapshots/<jobid>.json)
    {"job_id": "4242", "directory": "/shared/ckpt/run7", "world_size": 16, "updated": 1790000000.0}

Rank 0 of the job writes it when its Snapshotter starts (and again after a requeue). The CLI maps a
JOBID to its directory through it; anything that is not a job id is taken as a directory path. The
registry must sit on a filesystem the CLI host shares with the nodes, mode 1777 (sticky: users cannot
replace each other's entries). An entry is hostile input: bounded, schema-checked, and refused when
the directory it names is a link or belongs to another user than the entry.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.snapshot import SnapshotError
from fleetctl.snapshot.layout import read_json_object

ENV_REGISTRY = "FLEETCTL_SNAPSHOT_REGISTRY"
DEFAULT_REGISTRY = "/var/lib/fleetctl/snapshots"
_JOB_RE = re.compile(r"^\d{1,12}(_\d{1,8})?$")


def registry_dir(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get(ENV_REGISTRY) or DEFAULT_REGISTRY)


def is_job_id(text: str) -> bool:
    return bool(_JOB_RE.match(text))


def register(job_id: str, directory: Path, world_size: int, registry: str | None = None) -> Path:
    if not is_job_id(job_id):
        raise SnapshotError(f"job id {job_id[:40]!r} is not a Slurm job id")
    path = registry_dir(registry) / f"{job_id}.json"
    entry = {"job_id": job_id, "directory": str(Path(directory).resolve()), "world_size": world_size,
             "updated": time.time()}
    write_atomic(path, json.dumps(entry) + "\n", mkdir=False)
    return path


def lookup(job_id: str, registry: str | None = None) -> Path:
    """The snapshot directory of a job, checked; SnapshotError naming the entry otherwise."""
    if not is_job_id(job_id):
        raise SnapshotError(f"{job_id[:40]!r} is not a Slurm job id")
    reg = registry_dir(registry)
    path = reg / f"{job_id}.json"
    entry = read_json_object(path, "registry entry")
    if entry is None:
        raise SnapshotError(f"job {job_id}: no registry entry {path}",
                            hint=f"the job's Snapshotter writes it at start (registry: ${ENV_REGISTRY} "
                                 f"or {DEFAULT_REGISTRY}); or give the snapshot directory itself")
    if entry.get("job_id") != job_id:
        raise SnapshotError(f"{path}: names job {str(entry.get('job_id'))[:40]!r}, not {job_id}")
    directory = entry.get("directory")
    if not isinstance(directory, str) or not directory.startswith("/") or len(directory) > 4096 \
            or "\x00" in directory:
        raise SnapshotError(f"{path}: directory is not an absolute path")
    target = Path(directory)
    try:
        st_dir = os.lstat(target)
        st_entry = os.lstat(path)
    except OSError as exc:
        raise SnapshotError(f"job {job_id}: snapshot directory {target}: {exc.strerror}") from None
    if not stat.S_ISDIR(st_dir.st_mode):
        raise SnapshotError(f"job {job_id}: {target} is not a directory (links are not followed)")
    if st_entry.st_uid not in (0, st_dir.st_uid):
        raise SnapshotError(f"{path}: written by uid {st_entry.st_uid} but {target} belongs to uid "
                            f"{st_dir.st_uid}: refused")
    return target


def resolve(target: str, registry: str | None = None) -> tuple[Path, str | None]:
    """(snapshot directory, job id or None) for a CLI argument: a job id or a directory path."""
    if is_job_id(target):
        return lookup(target, registry), target
    path = Path(target).expanduser()
    if not path.exists():
        raise SnapshotError(f"{target}: neither a job id nor an existing snapshot directory")
    return path, None


def entries(registry: str | None = None, limit: int = 10_000) -> list[dict]:
    """Registry entries (bounded), for `fleetctl snapshot list` without an argument."""
    reg = registry_dir(registry)
    try:
        names = sorted(os.listdir(reg))[:limit]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SnapshotError(f"{reg}: cannot read the snapshot registry: {exc.strerror}") from None
    out = []
    for name in names:
        job = name[:-5] if name.endswith(".json") else ""
        if not is_job_id(job):
            continue
        try:
            out.append({"job_id": job, "directory": str(lookup(job, str(reg))), "problem": None})
        except SnapshotError as exc:
            out.append({"job_id": job, "directory": None, "problem": exc.message})
    return out
