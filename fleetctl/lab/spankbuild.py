"""spank_fleetctl.so for a Debian root's Slurm (docs/slurm-versions.md, docs/failover.md).

A SPANK plugin loads only into the Slurm release whose headers it was compiled with: srun and slurmstepd
compare its `plugin_version` (SLURM_VERSION_NUMBER from slurm/slurm_version.h) with their own. So a lab
running a root's Slurm needs a build against that root's headers (libslurm-dev, installed in the root).
It is compiled here with this machine's gcc: the SPANK API is plain C headers and the plugin links no
Slurm library (srun and slurmstepd provide the spank_* functions at load time). The root's slurm/
directory alone goes on the include path, so nothing else of the root's (its libc headers) mixes in.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from fleetctl.errors import LabError
from fleetctl.lab import slurmroot

SPANK_DIR = Path(__file__).resolve().parents[2] / "spank_plugin"
MAKE_TIMEOUT = 300.0


def root_slurm_version(root: Path) -> str:
    """The root's Slurm version as its stamp file records it (`24.11.5`)."""
    try:
        stamp = (root / slurmroot.STAMP).read_text(errors="replace")
    except OSError as exc:
        raise LabError(f"spank plugin: {root}: no complete Debian root ({exc.strerror})") from None
    m = re.search(r"^slurm=(\d{1,4}\.\d{1,4}\.\d{1,4})$", stamp, re.M)
    if not m:
        raise LabError(f"spank plugin: {root / slurmroot.STAMP}: no Slurm version in it")
    return m.group(1)


def build_dir(root: Path) -> Path:
    """Per Slurm version, so a rebuilt root with a newer Slurm never finds the old one's build."""
    return SPANK_DIR / "build" / f"slurm-{root_slurm_version(root)}"


def plugin_for(root: Path) -> Path:
    """Where the build for the root's Slurm lies (it may not exist yet)."""
    return build_dir(root) / "spank_fleetctl.so"


def build(root: Path) -> Path:
    """Compile (make: only what changed) spank_fleetctl.so against the root's Slurm headers; returns it."""
    version = root_slurm_version(root)
    if not slurmroot.has_headers(root):
        raise LabError(f"spank plugin: {root / slurmroot.SPANK_HEADER} missing: the root has no "
                       f"{slurmroot.HEADERS_PACKAGE}",
                       hint="`fleetctl lab up` on that Slurm adds it (or remove the root to rebuild it)")
    out = build_dir(root)
    include = out / "include"
    include.mkdir(parents=True, exist_ok=True)
    link, target = include / "slurm", str(root / "usr/include/slurm")
    if not link.is_symlink() or os.readlink(link) != target:
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    _check_headers(include, version)
    _run(["make", "-s", "-C", str(SPANK_DIR), f"SLURM_INCLUDE={include}", f"BUILD={out}"], "make")
    return plugin_for(root)


def _check_headers(include: Path, version: str) -> None:
    """The compiler must find the root's slurm_version.h, not this machine's /usr/include/slurm (the
    version symbol, and so whether Slurm loads the plugin at all, comes from it)."""
    probe = "#include <slurm/slurm_version.h>\nSLURM_VERSION_NUMBER\n"
    out = _run(["gcc", "-E", "-P", f"-I{include}", "-x", "c", "-"], "gcc -E", input=probe)
    found = (out.strip().splitlines() or [""])[-1].strip()
    major, minor, micro = (int(n) for n in version.split("."))
    if not re.fullmatch(r"0x[0-9a-fA-F]{1,8}", found) \
            or int(found, 16) != (major << 16) + (minor << 8) + micro:
        raise LabError(f"spank plugin: {include}/slurm: SLURM_VERSION_NUMBER is {found[:40]!r}, the "
                       f"root's Slurm is {version}")


def _run(cmd: list[str], step: str, input: str | None = None) -> str:
    try:
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=MAKE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"spank plugin: {step}: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"spank plugin: {step} failed: {detail[-1][:200] if detail else proc.returncode}")
    return proc.stdout
