"""Every number in a site file and on the command line has a range; nan and inf are refused
(docs/security.md). Before: `connect_timeout = 1e308` passed `config check` and failed every node."""

from __future__ import annotations

import copy
import math

import pytest

from fleetctl.config import parse_site
from fleetctl.config.schema import load_schema, validate
from fleetctl.errors import ConfigError

BASE = {
    "cluster": {"name": "t"},
    "node_classes": [{"name": "c", "nodes": "n[1-2]", "nics": [{"name": "eth0"}]}],
    "fabric": {"switches": [{"id": "leaf1", "tier": 1}], "links": [{"a": "n1:eth0", "b": "leaf1"}]},
}
NUMERIC = [s for s in load_schema()[1] if s.type in ("integer", "number")]


def with_value(path: str, value) -> dict:
    """BASE with `value` at a schema path (`[]` = the first element)."""
    doc = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        name = part.removesuffix("[]")
        node = node.setdefault(name, [{}] if part.endswith("[]") else {})
        if part.endswith("[]"):
            node = node[0]
    node[last] = value
    return doc


def test_base_document_is_valid():
    validate(BASE, "t.toml")


def test_every_number_in_the_schema_has_both_bounds_and_a_default_inside_them():
    assert NUMERIC
    for spec in NUMERIC:
        assert spec.min is not None and spec.max is not None, spec.path
        assert math.isfinite(spec.min) and math.isfinite(spec.max) and spec.min <= spec.max, spec.path
        if spec.default is not None:
            assert spec.min <= spec.default <= spec.max, spec.path


@pytest.mark.parametrize("spec", NUMERIC, ids=lambda s: s.path)
def test_out_of_range_and_non_finite_values_are_refused(spec):
    key = spec.path.replace("[]", "[0]")
    too_big = int(spec.max) + 1 if spec.type == "integer" else spec.max * 2 + 1
    too_small = int(spec.min) - 1 if spec.type == "integer" else spec.min - 1
    for value, message in ((too_big, "must be <="), (too_small, "must be >=")):
        with pytest.raises(ConfigError, match=rf"^t\.toml: {__import__('re').escape(key)}: {message}"):
            validate(with_value(spec.path, value), "t.toml")
    if spec.type == "number":
        for value in (math.nan, math.inf, -math.inf, 1e308):
            with pytest.raises(ConfigError):
                validate(with_value(spec.path, value), "t.toml")
    validate(with_value(spec.path, spec.max), "t.toml")  # the bounds themselves are allowed
    validate(with_value(spec.path, spec.min), "t.toml")


@pytest.mark.parametrize("line", ["connect_timeout = 1e308", "connect_timeout = nan",
                                  "command_timeout = inf", "concurrency = 99999999999999999"])
def test_toml_specials_in_a_site_file(line):
    with pytest.raises(ConfigError, match=r"access\.(connect|command)_timeout|access\.concurrency"):
        parse_site(f'[cluster]\nname = "t"\n[access]\n{line}\n', source="t.toml")


def test_prolog_budget_is_bounded():
    with pytest.raises(ConfigError, match=r"thresholds\.prolog_budget_s: must be <= 600"):
        parse_site('[cluster]\nname = "t"\n[thresholds]\nprolog_budget_s = 1e308\n', source="t.toml")
