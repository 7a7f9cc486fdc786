"""Package attributes imported on first use (PEP 562), so that importing one module of a package does
not import its siblings: the Slurm hooks import fleetctl.audit.hooks on every Prolog and must not pay
for the audit report or the fleet checks.

    __getattr__ = lazy_exports(__name__, {"build_report": "report", "collect": "runner"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package` that imports `package.<exports[name]>` when `name` is first
    read, and keeps the value in the package's namespace (later reads are plain lookups)."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
