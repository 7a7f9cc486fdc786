"""One registry shape for every backend axis: CLI commands, transports, Slurm backends, solvers.

    transports = Registry("transport")
    transports.register("ssh", "fleetctl.fanout.ssh:SshTransport")     # lazy: imported when chosen

    solvers = Registry("solver", modules=("fleetctl.analysis.solvers.vote",))
    @solvers.register("vote")                                          # by decorator, in its module
    class VoteSolver(Solver): ...

    transports.get("ssh")   # the class; UsageError naming the choices for an unknown name

A backend whose import fails still has its name registered: the failure (a missing optional
dependency, say) is raised only when that backend is chosen, never when another one is (ReFrame's
core/backends.py does the same). This module imports nothing heavy: `fleetctl --help` uses it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from fleetctl.errors import FleetctlError, UsageError


@dataclass
class _Entry:
    target: str | None = None  # "module:attribute", imported on first use
    obj: Any = None
    error: BaseException | str | None = None  # why the backend cannot be used (shown when chosen)
    meta: dict = field(default_factory=dict)


class Registry:
    """Names -> backends of one kind, registered by decorator or as a lazy "module:attribute" path.

    kind: what a name names ("transport"), for messages. error: the FleetctlError raised for an
    unknown or unusable name (with `key` for a ConfigError naming the site-file key). modules:
    modules whose import registers backends by decorator; imported on the first lookup.
    """

    def __init__(self, kind: str, *, error: type[FleetctlError] = UsageError, modules: tuple[str, ...] = (),
                 **error_kwargs):
        self.kind = kind
        self._error = error
        self._error_kwargs = error_kwargs
        self._modules = modules
        self._loaded = not modules
        self._load_failures: dict[str, BaseException] = {}
        self._entries: dict[str, _Entry] = {}

    # ---- registering
    def register(self, name: str, target: str | None = None, *, error: BaseException | str | None = None,
                 **meta):
        """Register `target` ("module:attribute") under `name`, or return a decorator registering
        the decorated object. `error`: the backend is known but unusable (shown when chosen).
        `meta`: free fields (a command's one-line help) readable without importing the backend."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if target is not None:
            if ":" not in target:
                raise ValueError(f"{self.kind} {name!r}: target {target!r} is not 'module:attribute'")
            self._entries[name] = _Entry(target=target, error=error, meta=meta)
            return None

        def decorate(obj):
            self._entries[name] = _Entry(obj=obj, error=error, meta=meta)
            return obj

        return decorate

    # ---- looking up
    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries

    def meta(self, name: str) -> dict:
        """The registration's free fields, without importing the backend."""
        return self._entry(name).meta

    def get(self, name: str):
        """The backend registered as `name`: imported now if registered by path."""
        entry = self._entry(name)
        if entry.obj is None and entry.error is None:
            module, _, attr = entry.target.partition(":")
            try:
                entry.obj = getattr(importlib.import_module(module), attr)
            except ImportError as exc:
                entry.error = exc
        if entry.error is not None:
            hint = entry.meta.get("install_hint")  # a string, or a callable asked only now
            raise self._fail(f"{self.kind} {name!r} is not available: {_why(entry.error)}",
                             hint=hint() if callable(hint) else hint)
        return entry.obj

    def _entry(self, name: str) -> _Entry:
        self._load()
        entry = self._entries.get(name)
        if entry is None:
            message = f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names()) or '(none)'}"
            if self._load_failures:
                message += "; not loaded: " + ", ".join(f"{m} ({_why(e)})" for m, e in self._load_failures.items())
            raise self._fail(message)
        return entry

    def _fail(self, message: str, hint: str | None = None) -> FleetctlError:
        return self._error(message, hint=hint, **self._error_kwargs)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for module in self._modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:  # its names stay unknown; the lookup error says why
                self._load_failures[module] = exc


def _why(error: BaseException | str) -> str:
    return error if isinstance(error, str) else (str(error) or type(error).__name__)
