"""What a snapshot directory holds, which snapshot a restart takes, and keep-N retention."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.errors import SnapshotError
from fleetctl.snapshot import manifest
from fleetctl.snapshot.layout import Entry, parse_step, parse_tmp_step, read_latest, scan


@dataclass
class Choice:
    """The snapshot a restart takes (None: start from scratch) and why newer ones were passed over."""

    step: int | None
    path: str | None
    skipped: list[dict] = field(default_factory=list)  # {"step", "path", "reason"}, newest first

    def to_dict(self) -> dict:
        return {"step": self.step, "path": self.path, "skipped": self.skipped}


def choose(root: Path, *, digests: bool = True, owner: int | None = None, below: int | None = None) -> Choice:
    """The newest committed snapshot that verifies; each newer one that does not is named with why.

    Only step_N directories are candidates (a step_N.tmp is an interrupted or running write). LATEST
    is not trusted blindly: a newer committed directory that verifies was confirmed by every rank
    before its rename (the job died before moving LATEST), and a LATEST that fails falls back.
    `owner`: the uid whose snapshot a restore may load (the job's user): a snapshot holding a
    directory or file owned by someone else, or writable by anyone but its owner, is passed over
    (DCP's index is a pickle: loading it runs whatever its writer put there). `below`: only steps
    below this one (a restore falling back past a snapshot that verified but failed to load)."""
    root = Path(root)
    choice = Choice(None, None)
    for entry in scan(root):
        if not entry.committed or (below is not None and entry.step >= below):
            continue
        problem = trust_problem(entry.path, owner) if owner is not None else None
        if problem is None:
            verdict = manifest.verify(entry.path, digests=digests)
            problem = None if verdict.ok else verdict.reason
        if problem is None:
            choice.step, choice.path = entry.step, str(entry.path)
            return choice
        choice.skipped.append({"step": entry.step, "path": str(entry.path), "reason": problem})
    return choice


def trust_problem(directory: Path, owner: int) -> str | None:
    """Why a snapshot directory is not `owner`'s alone to have written (None when it is): the
    directory and every entry in it must belong to `owner` and be writable by nobody else."""
    def check(path: Path, st) -> str | None:
        if st.st_uid != owner:
            return f"{path.name} belongs to uid {st.st_uid}, not the job's uid {owner}"
        if st.st_mode & 0o022:
            return f"{path.name} is writable by {'others' if st.st_mode & 0o002 else 'its group'} " \
                   f"(mode {stat.S_IMODE(st.st_mode):04o})"
        return None

    try:
        why = check(directory, os.lstat(directory))
        if why:
            return why
        with os.scandir(directory) as it:
            for n, item in enumerate(it):
                if n >= manifest.MAX_FILES:
                    return f"more than {manifest.MAX_FILES} files"
                why = check(Path(item.path), item.stat(follow_symlinks=False))
                if why:
                    return why
    except OSError as exc:
        return f"cannot check ownership: {exc.strerror or exc}"
    return None


def single_snapshot(path: Path) -> list[manifest.Verdict] | None:
    """The verdict of `path` when it names one snapshot (step_N, step_N.tmp, or a directory with a
    manifest); None when it is a directory of snapshots."""
    path = Path(path)
    tmp_step = parse_tmp_step(path.name)
    if parse_step(path.name) is None and tmp_step is None and not (path / manifest.MANIFEST).exists():
        return None
    if not (path.exists() or path.is_symlink()):
        raise SnapshotError(f"{path}: no such snapshot directory")
    if tmp_step is not None:
        return [manifest.Verdict(str(path), tmp_step, False, ["a step_N.tmp directory is an unfinished or "
                                                              "interrupted write, never a snapshot"])]
    return [manifest.verify(path)]


def verify_all(root: Path) -> tuple[list[manifest.Verdict], int | None]:
    """Every committed snapshot under `root`, verified, and the one a restore would use."""
    verdicts = [manifest.verify(e.path) for e in scan(root) if e.committed]
    return verdicts, (choose(root).step if verdicts else None)


def describe(root: Path, *, digests: bool = False) -> dict:
    """Every snapshot directory under `root` with its state, for `fleetctl snapshot list`."""
    root = Path(root)
    try:
        latest = read_latest(root)
        latest_problem = None
    except SnapshotError as exc:
        latest, latest_problem = None, exc.message
    rows = []
    for entry in scan(root):
        row = {"step": entry.step, "path": str(entry.path), "latest": entry.step == latest and entry.committed}
        if entry.committed:
            verdict = manifest.verify(entry.path, digests=digests)
            row.update(state="ok" if verdict.ok else "bad", bytes=verdict.bytes, problems=verdict.problems,
                       created=(verdict.manifest or {}).get("created"),
                       reason=(verdict.manifest or {}).get("reason"))
        else:
            row.update(state="partial", bytes=_size(entry.path), problems=["step_N.tmp: being written or "
                                                                         "interrupted; never restored"],
                       created=None, reason=None)
        rows.append(row)
    return {"directory": str(root), "latest": latest, "latest_problem": latest_problem,
            "snapshots": rows, "verified_digests": digests}


def prune_plan(root: Path, keep: int, *, digests: bool = True, newest_good: int | None = None) -> list[Entry]:
    """Directories retention removes: committed snapshots beyond the newest `keep`, never the one
    LATEST names and never the newest one that verifies (a corrupt newest snapshot must not push
    the last good one out), and step_N.tmp leftovers older than the newest committed snapshot (a
    write in progress is always newer than every committed one). `newest_good`: the step already
    known to verify (the Snapshotter has just published it), else found by `choose`."""
    if keep < 1:
        raise SnapshotError(f"keep must be at least 1, not {keep}")
    root = Path(root)
    entries = scan(root)
    try:
        latest = read_latest(root)
    except SnapshotError:
        latest = None
    if newest_good is None:
        newest_good = choose(root, digests=digests).step
    committed = [e for e in entries if e.committed]
    newest = committed[0].step if committed else None
    doomed = [e for e in committed[keep:] if e.step not in (latest, newest_good)]
    if newest is not None:
        doomed += [e for e in entries if not e.committed and e.step <= newest]
    return doomed


def remove(entry: Entry) -> None:
    """Remove one snapshot directory; a link in its place is removed, never followed."""
    try:
        st = os.lstat(entry.path)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SnapshotError(f"cannot remove {entry.path}: {exc.strerror or exc}") from None


def prune(root: Path, keep: int, *, newest_good: int | None = None) -> list[str]:
    removed = []
    for entry in prune_plan(root, keep, newest_good=newest_good):
        remove(entry)
        removed.append(str(entry.path))
    return removed


def _size(path: Path) -> int:
    total = 0
    try:
        for name in os.listdir(path):
            try:
                st = os.lstat(path / name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    except OSError:
        pass
    return total
