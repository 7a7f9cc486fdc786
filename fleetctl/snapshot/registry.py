"""Where a Slurm job's snapshots live: one small file per job, written by the job itself.

    $FLEETCTL_SNAPSHOT_REGISTRY/<jobid>.json            (default /var/lib/fleetctl/snapshots/)
    $FLEETCTL_SNAPSHOT_REGISTRY/<jobid>.<random>.json   (when <jobid>.json is somebody else's)
    {"job_id": "4242", "directory": "/shared/ckpt/run7", "world_size": 16, "updated": 1790000000.0}

Rank 0 of the job writes it when its Snapshotter starts (and again after a requeue). The CLI maps a
JOBID to its directory through it; anything that is not a job id is taken as a directory path. The
registry must sit on a filesystem the CLI host shares with the nodes, mode 1777 (sticky: users cannot
replace each other's entries).

Any user can create a file in a 1777 directory, so an entry proves nothing by its name. A user who
pre-creates `<jobid>.json` for somebody else's future job can neither stop that job registering (it
then writes `<jobid>.<random>.json`) nor redirect it: `lookup` takes only entries owned by the job's
owner (or root) when the caller knows the owner (act and root's CLI ask Slurm; a user's CLI is that
user), and refuses to choose between entries of different owners when it does not. An entry is
hostile input besides: bounded, schema-checked, and refused when the directory it names is a link or
belongs to another user than the entry.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import time
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import DataError, SnapshotError
from fleetctl.filekit import read_json
from fleetctl.snapshot.layout import MAX_SMALL_FILE, check_not_link

ENV_REGISTRY = "FLEETCTL_SNAPSHOT_REGISTRY"
DEFAULT_REGISTRY = "/var/lib/fleetctl/snapshots"
MAX_ENTRIES = 10_000  # names read from the registry directory
_JOB_RE = re.compile(r"^\d{1,12}(_\d{1,8})?$")
_ENTRY_RE = re.compile(r"^(\d{1,12}(?:_\d{1,8})?)(?:\.([0-9a-f]{8,32}))?\.json$")


def registry_dir(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get(ENV_REGISTRY) or DEFAULT_REGISTRY)


def is_job_id(text: str) -> bool:
    return bool(_JOB_RE.match(text))


def register(job_id: str, directory: Path, world_size: int, registry: str | None = None) -> Path:
    """Write (or refresh) this job's entry. When `<jobid>.json` exists and is not this user's (a
    squatter's, in the sticky registry), the entry goes to `<jobid>.<random>.json` instead."""
    if not is_job_id(job_id):
        raise SnapshotError(f"job id {job_id[:40]!r} is not a Slurm job id")
    reg = registry_dir(registry)
    entry = {"job_id": job_id, "directory": str(Path(directory).resolve()), "world_size": world_size,
             "updated": time.time()}
    path = reg / f"{job_id}.json"
    mine = _own_entry(reg, job_id)
    if mine is not None:
        path = mine
    else:
        try:
            foreign = os.lstat(path).st_uid != os.geteuid()
        except FileNotFoundError:
            foreign = False
        if foreign:
            path = reg / f"{job_id}.{secrets.token_hex(8)}.json"
    try:
        write_atomic(path, json.dumps(entry) + "\n", mkdir=False)
    except DataError as exc:
        raise SnapshotError(exc.message) from None
    return path


def _own_entry(reg: Path, job_id: str) -> Path | None:
    """This user's existing entry for `job_id` (so a requeued job refreshes it, not a new one)."""
    for path in _entry_paths(reg, job_id):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return path
    return None


def _entry_paths(reg: Path, job_id: str | None = None) -> list[Path]:
    try:
        with os.scandir(reg) as it:
            names = [e.name for _, e in zip(range(MAX_ENTRIES), it)]
    except FileNotFoundError:
        raise SnapshotError(f"{reg}: no such snapshot registry",
                            hint=f"create it (mode 1777) on a shared filesystem, or set ${ENV_REGISTRY}"
                            ) from None
    except NotADirectoryError:
        raise SnapshotError(f"{reg}: the snapshot registry is not a directory") from None
    except OSError as exc:
        raise SnapshotError(f"{reg}: cannot read the snapshot registry: {exc.strerror}") from None
    out = []
    for name in sorted(names):
        m = _ENTRY_RE.match(name)
        if m and (job_id is None or m.group(1) == job_id):
            out.append(reg / name)
    return out


def lookup(job_id: str, registry: str | None = None, *, owner: int | None = None) -> Path:
    """The snapshot directory of a job, checked; SnapshotError naming the entry otherwise.

    `owner`: the uid that owns the job (from Slurm, or the calling user): only entries written by it
    or by root count. None: the owner is not known, and entries of different owners are refused as
    ambiguous rather than one of them trusted."""
    if not is_job_id(job_id):
        raise SnapshotError(f"{job_id[:40]!r} is not a Slurm job id")
    reg = registry_dir(registry)
    candidates = []
    for path in _entry_paths(reg, job_id):
        try:
            uid = os.lstat(path).st_uid
        except OSError:
            continue
        if owner is None or uid in (owner, 0):
            candidates.append((path, uid))
    if not candidates:
        raise SnapshotError(f"job {job_id}: no registry entry in {reg}"
                            + (f" written by uid {owner}" if owner is not None else ""),
                            hint=f"the job's Snapshotter writes it at start (registry: ${ENV_REGISTRY} "
                                 f"or {DEFAULT_REGISTRY}); or give the snapshot directory itself")
    uids = sorted({uid for _, uid in candidates})
    if len(uids) > 1 and owner is None:
        raise SnapshotError(f"job {job_id}: registry entries written by uids {', '.join(map(str, uids))}: "
                            "cannot tell which is the job's", hint="give the snapshot directory itself")
    best = None
    for path, _ in candidates:
        target, updated = _read_entry(path, job_id)
        if best is None or updated > best[1]:
            best = (target, updated)
    return best[0]


def _read_entry(path: Path, job_id: str) -> tuple[Path, float]:
    entry = read_json(path, "registry entry", max_bytes=MAX_SMALL_FILE, kind=dict, error=SnapshotError)
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
    updated = entry.get("updated")
    ok = isinstance(updated, (int, float)) and not isinstance(updated, bool) and 0 <= updated < 1e11
    return target, float(updated) if ok else 0.0


def job_owner(backend, job_id: str) -> int | None:
    """The uid owning `job_id` as Slurm says (None when Slurm does not list it, or its user is not
    known on this host)."""
    import pwd

    jobs = backend.jobs(job_ids=[job_id], states=["PENDING", "RUNNING", "SUSPENDED", "COMPLETING",
                                                   "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"])
    user = next((j.user for j in jobs if j.job_id == job_id), "")
    try:
        return pwd.getpwnam(user).pw_uid if user else None
    except KeyError:
        return None


def resolve(target: str, registry: str | None = None, *, owner: int | None = None) -> tuple[Path, str | None]:
    """(snapshot directory, job id or None) for a CLI argument: a job id or a directory path. A
    directory given by path must not be a symbolic link (root would act on wherever it points)."""
    if is_job_id(target):
        return lookup(target, registry, owner=owner), target
    path = Path(target).expanduser()
    if not path.exists() and not path.is_symlink():
        raise SnapshotError(f"{target}: neither a job id nor an existing snapshot directory")
    check_not_link(path)
    return path, None


def entries(registry: str | None = None) -> list[dict]:
    """Registry entries (bounded), one per job, for `fleetctl snapshot list` without an argument."""
    reg = registry_dir(registry)
    jobs = sorted({_ENTRY_RE.match(p.name).group(1) for p in _entry_paths(reg)},
                  key=lambda j: [int(x) for x in j.split("_")])
    out = []
    for job in jobs:
        try:
            out.append({"job_id": job, "directory": str(lookup(job, str(reg))), "problem": None})
        except SnapshotError as exc:
            out.append({"job_id": job, "directory": None, "problem": exc.message})
    return out
