"""The triangulation solvers by name (fleetctl.registry). A new solver is one module with a
`@register` Solver subclass (registered under its `name`), and that module in MODULES."""

from __future__ import annotations

from fleetctl.analysis.solvers.base import Problem, Solver
from fleetctl.registry import Registry

MODULES = tuple(f"fleetctl.analysis.solvers.{m}" for m in ("tomography", "vote", "netbouncer", "flock"))
solvers = Registry("solver", modules=MODULES)


def register(cls: type[Solver]) -> type[Solver]:
    """Class decorator: `solvers.register(cls.name)`, the name being the solver's own."""
    return solvers.register(cls.name)(cls)


def get_solver(name: str) -> Solver:
    return solvers.get(name)()


def solver_names() -> list[str]:
    return solvers.names()


__all__ = ["Problem", "Solver", "get_solver", "register", "solver_names", "solvers"]
