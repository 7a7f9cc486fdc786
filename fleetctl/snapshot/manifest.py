"""The manifest of a snapshot (written last, by rank 0) and end-to-end verification against it.

A snapshot is complete only when MANIFEST.json exists, names every file in the directory with its
size and sha256, lists the per-rank state of every rank, and each file still hashes to its digest.
`verify` says, in one line per problem, what is wrong: a flipped byte, a missing shard, a missing or
malformed manifest, an unexpected file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.errors import SnapshotError
from fleetctl.filekit import read_json
from fleetctl.snapshot.layout import MANIFEST, parse_step

FORMAT = "fleetctl-snapshot/1"
MAX_MANIFEST = 16 * 1024 * 1024
MAX_FILES = 100_000
MAX_RANKS = 1_000_000
CHUNK = 4 * 1024 * 1024
DCP_METADATA = ".metadata"
_FILE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")  # plain names only: no '/', no '..'
_HEX_RE = re.compile(r"^[0-9a-f]{64}$")


def rank_state_name(rank: int) -> str:
    return f"rank_{rank}.pt"


def sha256_file(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a regular file, read in chunks (hashlib releases the GIL)."""
    h = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
                size += len(chunk)
    finally:
        os.close(fd)
    return size, h.hexdigest()


def digest_files(directory: Path, names: list[str], rank: int) -> dict[str, dict]:
    """{name: {size, sha256, rank}} for the files one rank wrote."""
    out = {}
    for name in names:
        size, digest = sha256_file(directory / name)
        out[name] = {"size": size, "sha256": digest, "rank": rank}
    return out


def build(step: int, world_size: int, files: dict[str, dict], **info) -> dict:
    return {"format": FORMAT, "step": step, "world_size": world_size, "created": time.time(),
            **info, "files": dict(sorted(files.items()))}


def write(directory: Path, manifest: dict) -> None:
    """The manifest, written atomically and fsynced: its presence is what marks the data complete.
    Each rank has fsynced the files it wrote before confirming them (DCP sync_files, rank state)."""
    write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1) + "\n", mkdir=False)


@dataclass
class Verdict:
    path: str
    step: int | None
    ok: bool
    problems: list[str] = field(default_factory=list)
    manifest: dict | None = None
    bytes: int = 0

    @property
    def reason(self) -> str:
        return "; ".join(self.problems) if self.problems else "ok"

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("manifest")
        if self.manifest:
            out["created"] = self.manifest.get("created")
            out["world_size"] = self.manifest.get("world_size")
            out["reason_taken"] = self.manifest.get("reason")
            out["request"] = self.manifest.get("request")
        return out


def load(directory: Path) -> dict:
    """The parsed and schema-checked manifest of `directory`; SnapshotError naming what is wrong."""
    path = directory / MANIFEST
    try:
        data = read_json(path, MANIFEST, max_bytes=MAX_MANIFEST, error=SnapshotError)
    except SnapshotError as exc:
        # The verdict names the file, not the whole path: the snapshot directory is already shown.
        raise SnapshotError(exc.message.replace(f"{path}: ", "", 1).replace(f"no such {MANIFEST}",
                            f"no {MANIFEST}: not a complete snapshot")) from None
    _check_schema(data)
    return data


def _check_schema(data) -> None:
    def bad(what: str):
        raise SnapshotError(f"{MANIFEST}: {what}")

    if not isinstance(data, dict):
        bad("not a JSON object")
    if data.get("format") != FORMAT:
        bad(f"format is {str(data.get('format'))[:40]!r}, expected {FORMAT!r}")
    step, world = data.get("step"), data.get("world_size")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        bad("step is not a non-negative integer")
    if not isinstance(world, int) or isinstance(world, bool) or not 1 <= world <= MAX_RANKS:
        bad(f"world_size is not an integer in 1..{MAX_RANKS}")
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        bad("files is missing or empty")
    if len(files) > MAX_FILES:
        bad(f"more than {MAX_FILES} files")
    for name, entry in files.items():
        if not _FILE_RE.match(name) or name in (".", ".."):
            bad(f"file name {name[:80]!r} is not a plain file name")
        if not isinstance(entry, dict):
            bad(f"entry of {name} is not an object")
        size, digest, rank = entry.get("size"), entry.get("sha256"), entry.get("rank")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            bad(f"size of {name} is not a non-negative integer")
        if not isinstance(digest, str) or not _HEX_RE.match(digest):
            bad(f"sha256 of {name} is not 64 hex digits")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world:
            bad(f"rank of {name} is not in 0..{world - 1}")


def verify(directory: Path, *, digests: bool = True) -> Verdict:
    """Check a committed snapshot directory end to end (sizes always, sha256 when `digests`)."""
    directory = Path(directory)
    step = parse_step(directory.name)
    verdict = Verdict(str(directory), step, False)
    try:
        st = os.lstat(directory)
    except OSError as exc:
        verdict.problems.append(f"cannot read the snapshot directory: {exc.strerror}")
        return verdict
    if not stat.S_ISDIR(st.st_mode):
        verdict.problems.append("not a directory (a link or file is never taken as a snapshot)")
        return verdict
    try:
        manifest = load(directory)
    except SnapshotError as exc:
        verdict.problems.append(exc.message)
        return verdict
    verdict.manifest = manifest
    if step is not None and manifest["step"] != step:
        verdict.problems.append(f"{MANIFEST} says step {manifest['step']}, the directory is step_{step}")
    if step is None:
        verdict.step = manifest["step"]
    files = manifest["files"]
    missing_ranks = [r for r in range(manifest["world_size"]) if rank_state_name(r) not in files]
    if missing_ranks:
        verdict.problems.append(f"{MANIFEST} lists no state for rank(s) {_ranks(missing_ranks)}")
    if DCP_METADATA not in files:
        verdict.problems.append(f"{MANIFEST} lists no {DCP_METADATA} (the checkpoint's index)")
    present = set(os.listdir(directory)) - {MANIFEST}
    for name, entry in files.items():
        if name not in present:
            verdict.problems.append(f"missing shard {name} (rank {entry['rank']})")
            continue
        path = directory / name
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                verdict.problems.append(f"{name} is not a regular file")
                continue
            if st.st_size != entry["size"]:
                verdict.problems.append(f"{name}: {st.st_size} bytes, the manifest says {entry['size']}")
                continue
            verdict.bytes += st.st_size
            if digests:
                _, digest = sha256_file(path)
                if digest != entry["sha256"]:
                    verdict.problems.append(f"{name}: sha256 {digest[:12]}... does not match the "
                                            f"manifest's {entry['sha256'][:12]}... (corrupted)")
        except OSError as exc:
            verdict.problems.append(f"{name}: cannot read: {exc.strerror or exc}")
    extra = sorted(present - set(files))
    if extra:
        verdict.problems.append(f"file(s) not in the manifest: {', '.join(extra[:5])}"
                                + (f" and {len(extra) - 5} more" if len(extra) > 5 else ""))
    verdict.ok = not verdict.problems
    return verdict


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
