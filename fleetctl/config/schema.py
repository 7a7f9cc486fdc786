"""Validate a parsed TOML document against schema.toml and fill in defaults.

Errors name the file, the key (with array indexes: `node_classes[1].nics[0].mtu`) and what was
expected. Unknown keys are errors: a typo must never silently fall back to a default.
"""

from __future__ import annotations

import copy
import difflib
import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from fleetctl.errors import ConfigError, UsageError
from fleetctl.nodeset import parse_nodeset

CONTAINER_TYPES = {"table", "array"}
SCALAR_TYPES = {"string", "integer", "number", "boolean", "nodeset", "enum", "string-list", "string-map"}


@dataclass(frozen=True)
class KeySpec:
    path: str
    type: str
    doc: str = ""
    required: bool = False
    default: Any = None
    choices: tuple = ()
    min: float | None = None
    max: float | None = None
    children: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1].removesuffix("[]")


@lru_cache(maxsize=1)
def load_schema() -> tuple[dict[str, KeySpec], list[KeySpec]]:
    """Return (root children by name, all specs in file order)."""
    text = resources.files("fleetctl.config").joinpath("schema.toml").read_text()
    raw = tomllib.loads(text)["key"]
    specs: list[KeySpec] = []
    by_path: dict[str, KeySpec] = {}
    root: dict[str, KeySpec] = {}
    for entry in raw:
        entry = dict(entry)
        entry["choices"] = tuple(entry.get("choices", ()))
        typ = entry["type"]
        if typ not in CONTAINER_TYPES | SCALAR_TYPES:
            raise AssertionError(f"schema.toml: {entry['path']}: unknown type {typ}")
        spec = KeySpec(**entry)
        if typ in ("integer", "number") and (spec.min is None or spec.max is None):
            raise AssertionError(f"schema.toml: {spec.path}: a number needs both min and max")
        parent_path, _, _ = spec.path.rpartition(".")
        parent_path = parent_path.removesuffix("[]")
        siblings = root if not parent_path else by_path[parent_path].children
        siblings[spec.name] = spec
        by_path[spec.path.removesuffix("[]")] = spec
        specs.append(spec)
    return root, specs


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


class Validator:
    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, path=self.source, key=key or None)

    def table(self, value: Any, children: dict[str, KeySpec], where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {_type_name(value)}")
        out: dict = {}
        for key, item in value.items():
            if key not in children:
                near = difflib.get_close_matches(key, list(children), n=1)
                hint = f" (did you mean '{near[0]}'?)" if near else ""
                allowed = ", ".join(sorted(children)) or "none"
                raise self.fail(_join(where, key), f"unknown key{hint}; allowed here: {allowed}")
        for name, spec in children.items():
            key = _join(where, name)
            if name in value:
                out[name] = self.value(value[name], spec, key)
            elif spec.required:
                raise self.fail(key, f"missing required key ({spec.type}: {spec.doc})")
            elif spec.type == "table":
                out[name] = self.table({}, spec.children, key)
            elif spec.type == "array":
                out[name] = []
            elif spec.type == "number" and spec.default is not None:
                out[name] = float(spec.default)  # same type whether given or defaulted
            else:
                out[name] = copy.deepcopy(spec.default)
        return out

    def value(self, value: Any, spec: KeySpec, key: str) -> Any:
        typ = spec.type
        if typ == "table":
            return self.table(value, spec.children, key)
        if typ == "array":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise self.fail(key, f"expected an array of tables ([[{key}]]), got {_type_name(value)}")
            return [self.table(item, spec.children, f"{key}[{i}]") for i, item in enumerate(value)]
        if typ in ("string", "nodeset", "enum"):
            if not isinstance(value, str):
                raise self.fail(key, f"expected a string, got {_type_name(value)} {value!r}")
            if typ == "enum" and value not in spec.choices:
                raise self.fail(key, f"expected one of {', '.join(spec.choices)}; got {value!r}")
            if typ == "nodeset":
                try:
                    if len(parse_nodeset(value)) == 0:
                        raise UsageError(f"invalid node set {value!r}: empty node set")
                except UsageError as exc:
                    raise self.fail(key, exc.message) from None
            return value
        if typ == "boolean":
            if not isinstance(value, bool):
                raise self.fail(key, f"expected true or false, got {_type_name(value)} {value!r}")
            return value
        if typ in ("integer", "number"):
            ok = isinstance(value, int) and not isinstance(value, bool)
            if typ == "number":
                ok = ok or isinstance(value, float)
            if not ok:
                raise self.fail(key, f"expected {'an integer' if typ == 'integer' else 'a number'}, "
                                     f"got {_type_name(value)} {value!r}")
            if not math.isfinite(value):
                raise self.fail(key, f"expected a finite number, got {value}")
            if spec.min is not None and value < spec.min:
                raise self.fail(key, f"must be >= {spec.min}, got {value}")
            if spec.max is not None and value > spec.max:
                raise self.fail(key, f"must be <= {spec.max}, got {value}")
            return float(value) if typ == "number" else value
        if typ == "string-list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(key, f"expected a list of strings, got {value!r}")
            return list(value)
        if typ == "string-map":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise self.fail(key, f"expected a table of strings (name = \"value\"), got {value!r}")
            return dict(value)
        raise AssertionError(typ)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def validate(document: dict, source: str) -> dict:
    """Return a copy of `document` with defaults filled in, or raise ConfigError."""
    root, _ = load_schema()
    return Validator(source).table(document, root, "")
