"""Property-based fuzzing of site loading (docs/security.md): random documents, random values at every
schema key, and mutated site-file text never raise anything but fleetctl's own errors, and never hang.

Bounded for CI: a fixed number of examples per property, a per-example deadline, no example database.
"""

from __future__ import annotations

import copy
import json
import math
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.config import parse_site
from fleetctl.config.schema import load_schema, validate
from fleetctl.errors import ConfigError
from fleetctl.nodeset import MAX_NODES, is_node_name

FUZZ = settings(max_examples=150, deadline=timedelta(seconds=2), database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

SPECS = load_schema()[1]
SCALARS = [s for s in SPECS if s.type not in ("table", "array")]

VALID = """\
[cluster]
name = "fz"
[access]
transport = "local"
connect_timeout = 5.0
[access.ssh]
addresses = { n1 = "10.0.0.1" }
[thresholds]
gpu_temp_warn_c = 80
[checks]
xid_policy = { "63" = "fail:reset-gpu" }
[[node_classes]]
name = "c"
nodes = "n[1-4]"
cpus = 8
mounts = ["/home"]
[node_classes.gpus]
count = 2
[[node_classes.nics]]
name = "eth0"
rate_gbps = 100
[[fabric.switches]]
id = "leaf1"
tier = 1
[[fabric.switches]]
id = "spine1"
tier = 2
[[fabric.links]]
a = "n1:eth0"
b = "leaf1"
[[fabric.links]]
a = "leaf1"
b = "spine1"
"""

# Text close to TOML and to node sets, so random strings reach past the first syntax error.
TOML_ALPHABET = st.sampled_from(list('abcnode[]{}=,."\'\\#\n 0123456789-+_@!&^:/e$;`') + ["\x00", "é", "\t"])


def scalar_values():
    return st.one_of(
        st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=40), st.text(TOML_ALPHABET, max_size=40),
        st.sampled_from(["gpu[1-9999999]", "@x", "../../x", "n[1-4]", "n1:eth0", "leaf1", "", "1e308"]),
    )


def values():
    return st.recursive(scalar_values(), lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(TOML_ALPHABET, max_size=8), inner, max_size=4)),
        max_leaves=12)


def toml_value(value) -> str:
    """Python value -> TOML text (inline tables and arrays only)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return ("nan" if math.isnan(value) else repr(value).replace("inf", "inf")) if isinstance(value, float) \
            else str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    return '""'  # None: TOML has no null


def to_toml(document: dict) -> str:
    return "\n".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in document.items())


def load_or_config_error(text: str) -> None:
    """Either a ConfigError, or a site whose every number is in range and every node name valid."""
    try:
        site = parse_site(text, source="fuzz.toml")
    except ConfigError as exc:
        assert exc.message and "\n" not in exc.message.split(": ", 1)[0]
        return
    assert len(site.nodes) <= MAX_NODES and all(is_node_name(n) for n in site.nodes)
    for spec in SCALARS:
        if spec.type in ("integer", "number"):
            for value in values_at(site.data, spec.path):
                assert math.isfinite(value) and spec.min <= value <= spec.max, (spec.path, value)


def values_at(data, path: str):
    """The values at a schema path in validated data (every element of arrays)."""
    nodes = [data]
    for part in path.split("."):
        name = part.removesuffix("[]")
        nodes = [n[name] for n in nodes if isinstance(n, dict) and name in n]
        if part.endswith("[]"):
            nodes = [item for n in nodes for item in n]
    return nodes


BASE = {
    "cluster": {"name": "t"},
    "node_classes": [{"name": "c", "nodes": "n[1-2]", "nics": [{"name": "eth0"}]}],
    "fabric": {"switches": [{"id": "leaf1", "tier": 1}], "links": [{"a": "n1:eth0", "b": "leaf1"}]},
}


def set_at(doc: dict, path: str, value) -> dict:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        name = part.removesuffix("[]")
        node = node.setdefault(name, [{}] if part.endswith("[]") else {})
        if part.endswith("[]"):
            node = node[0] if isinstance(node, list) and node else {}
    if isinstance(node, dict):
        node[last] = value
    return doc


def test_the_valid_example_loads():
    assert len(parse_site(VALID, source="fuzz.toml").nodes) == 4


@FUZZ
@given(st.text(TOML_ALPHABET, max_size=300))
def test_random_text(text):
    load_or_config_error(text)


@FUZZ
@given(st.dictionaries(st.sampled_from(["cluster", "access", "slurm", "node_classes", "fabric", "checks",
                                        "thresholds", "lab", "x"]), values(), max_size=5))
def test_random_documents(document):
    load_or_config_error(to_toml(document))


@FUZZ
@given(st.sampled_from(SCALARS), values())
def test_any_value_at_any_key(spec, value):
    doc = set_at(BASE, spec.path, value)
    try:
        validate(doc, "fuzz.toml")
    except ConfigError:
        pass
    load_or_config_error(to_toml(doc))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["insert", "delete", "replace", "duplicate"]),
                          st.integers(min_value=0, max_value=len(VALID)), st.text(TOML_ALPHABET, min_size=1,
                                                                                  max_size=12)),
                min_size=1, max_size=6))
def test_mutated_site_files(edits):
    text = VALID
    for op, pos, chunk in edits:
        pos = min(pos, len(text))
        if op == "insert":
            text = text[:pos] + chunk + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + len(chunk):]
        elif op == "replace":
            text = text[:pos] + chunk + text[pos + len(chunk):]
        else:  # repeat a line: duplicate keys, tables and array entries
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end + 1
            text = text[:end] + text[start:end] * (1 + len(chunk)) + text[end:]
    load_or_config_error(text)


@pytest.mark.parametrize("text", [
    "a" + ".a" * 100_000 + " = 1",  # quadratic in tomllib without the key-depth bound
    "[" + "a." * 100_000 + "a]",
    "a = " + "[" * 100_000,  # RecursionError inside tomllib
    "a = " + "{b = " * 5_000,
    '[[node_classes]]\nname = "c"\nnodes = "n[1-99999999999]"\n[cluster]\nname = "t"\n',
])
def test_pathological_documents_fail_fast(text):
    import time

    start = time.monotonic()
    with pytest.raises(ConfigError):
        parse_site(text, source="fuzz.toml")
    assert time.monotonic() - start < 2
