"""Optional parts of fleetctl and the pip extras that bring them (pyproject.toml).

A node-side install (`pip install fleetctl`: audit --local, the Slurm hooks, exec over srun or
locally, inventory, config) pulls none of them; a controller adds `[ssh]` and `[mesh]`:

    require("mesh", "audit --mesh")   # UsageError naming the extra when numpy/scipy/h5py are missing
"""

from __future__ import annotations

import importlib

from fleetctl.errors import UsageError

EXTRAS: dict[str, tuple[str, ...]] = {
    "ssh": ("paramiko",),  # the ssh transport
    "mesh": ("numpy", "scipy", "h5py"),  # NIC-mesh probing, triangulation, HDF5 run files
    "lens": ("prometheus_client",),  # fleetctl lens: the metrics endpoint
}


def install_hint(extra: str) -> str:
    return f"pip install 'fleetctl[{extra}]'"


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    return [m for m in EXTRAS[extra] if not _importable(m)]


def require(extra: str, what: str) -> None:
    """Raise a UsageError naming `extra` when any module it brings cannot be imported (the command
    imports them next anyway)."""
    missing = missing_modules(extra)
    if missing:
        raise UsageError(f"{what} needs {', '.join(missing)}, not installed here",
                         hint=install_hint(extra))


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
