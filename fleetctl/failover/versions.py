"""NCCL versions: parsing, what each failover mode needs, and finding the installed libnccl.

The IB resiliency variables are undocumented in NCCL's env docs; the versions come from NCCL's
release notes (docs/failover.md): port failover inside a merged virtual NIC from 2.29.7, fail-back
from 2.30. The fleet plugin's oldest ABI table (ncclNetPlugin_v8) is looked up from NCCL 2.20.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from fleetctl.errors import UsageError

Version = tuple[int, int, int]

PLUGIN_MIN: Version = (2, 20, 0)  # ncclNetPlugin_v8
IB_FAILOVER_MIN: Version = (2, 29, 7)  # NCCL_IB_RESILIENCY_PORT_FAILOVER
IB_RECOVERY_MIN: Version = (2, 30, 0)  # NCCL_IB_RESILIENCY_PORT_RECOVERY (fail-back)

_VERSION = re.compile(r"^(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[-+][A-Za-z0-9.+-]{0,40})?$")
_LIB_NAME = re.compile(r"libnccl\.so\.(\d{1,3})\.(\d{1,3})\.(\d{1,4})$")
_IN_BINARY = re.compile(rb"NCCL version (\d{1,3})\.(\d{1,3})\.(\d{1,4})")

# Where libnccl usually lives: distribution packages, CUDA and HPC-SDK trees, pip's nvidia-nccl wheels.
SEARCH = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
          "/usr/local/lib", "/usr/local/cuda*/lib*", "/usr/local/nccl*/lib", "/opt/nccl*/lib",
          "/opt/nvidia/hpc_sdk/*/*/comm_libs/*/nccl/lib",
          "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib",
          "/usr/lib/python3*/site-packages/nvidia/nccl/lib")
MAX_SCAN_BYTES = 512 << 20  # a libnccl is ~200-400 MB; never read more than this of one file
MAX_CANDIDATES = 64


def parse(text: str, *, what: str = "NCCL version") -> Version:
    """'2.29.7', '2.30', '2.21.5+cuda12.4' -> (2, 29, 7); a UsageError naming `what` otherwise."""
    m = _VERSION.match(str(text).strip())
    if not m:
        raise UsageError(f"{what} {text!r}: expected a version like 2.29.7")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def show(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "unknown"


def from_library(path: str | os.PathLike) -> Version | None:
    """The version of one libnccl: from its real file name (libnccl.so.2.21.5), else from the
    "NCCL version X.Y.Z" string compiled into it (pip wheels ship a bare libnccl.so.2)."""
    real = Path(os.path.realpath(path))
    m = _LIB_NAME.search(real.name)
    if m:
        return int(m.group(1)), int(m.group(2)), int(m.group(3))
    try:
        with open(real, "rb") as fh:
            tail, read = b"", 0
            while read < MAX_SCAN_BYTES:
                block = fh.read(1 << 20)
                if not block:
                    break
                read += len(block)
                hit = _IN_BINARY.search(tail + block)
                if hit:
                    return int(hit.group(1)), int(hit.group(2)), int(hit.group(3))
                tail = block[-32:]
    except OSError:
        return None
    return None


def detect(extra: list[str] | None = None) -> tuple[Version | None, str]:
    """(newest version found, its path) among the libnccl files of this machine; (None, '') if none.
    NCCL_LIBRARY style overrides can be given as `extra` files or directories."""
    candidates: list[str] = []
    for pattern in [*(extra or []), *SEARCH]:
        for entry in sorted(glob.glob(pattern))[:MAX_CANDIDATES]:
            if os.path.isdir(entry):
                candidates += sorted(glob.glob(os.path.join(entry, "libnccl.so*")))[:MAX_CANDIDATES]
            elif os.path.basename(entry).startswith("libnccl.so"):
                candidates.append(entry)
    best: tuple[Version | None, str] = (None, "")
    seen: set[str] = set()
    for path in candidates[:MAX_CANDIDATES]:
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        version = from_library(real)
        if version and (best[0] is None or version > best[0]):
            best = (version, real)
    return best
