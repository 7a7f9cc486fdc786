"""The one registry of triangulation solvers. A new solver is one module with a @register class."""

from __future__ import annotations

from fleetctl.analysis.solvers.base import Problem, Solver
from fleetctl.errors import UsageError

_REGISTRY: dict[str, type[Solver]] = {}


def register(cls: type[Solver]) -> type[Solver]:
    _REGISTRY[cls.name] = cls
    return cls


def get_solver(name: str) -> Solver:
    _load()
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise UsageError(f"unknown solver {name!r} (known: {', '.join(solver_names())})") from None


def solver_names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def _load() -> None:
    # Imported here, not at the top: the solver modules import `register` from this module.
    from fleetctl.analysis.solvers import flock, netbouncer, tomography, vote  # noqa: F401


__all__ = ["Problem", "Solver", "get_solver", "register", "solver_names"]
