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


# The Debian packages of each module, for fleetctl installed from its .deb (debian/control).
DEBIAN_PACKAGES = {"paramiko": "python3-paramiko", "numpy": "python3-numpy", "scipy": "python3-scipy",
                   "h5py": "python3-h5py", "prometheus_client": "python3-prometheus-client"}
DEB_INSTALLER = "debian"  # the INSTALLER the .deb writes into fleetctl's dist-info (debian/dist-info)


def install_hint(extra: str) -> str:
    """How to add `extra` the way this fleetctl was installed: apt for the .deb, else pip."""
    if installed_by() == DEB_INSTALLER:
        return "apt install " + " ".join(DEBIAN_PACKAGES[m] for m in EXTRAS[extra])
    return f"pip install 'fleetctl[{extra}]'"


def installed_by() -> str:
    """The INSTALLER of fleetctl's distribution (pip, debian, ...), or "" when it has none."""
    from importlib import metadata

    try:
        return (metadata.distribution("fleetctl").read_text("INSTALLER") or "").strip()
    except metadata.PackageNotFoundError:
        return ""


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
