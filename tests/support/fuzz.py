"""Shared budgets and strategies of the property (hypothesis) tests over untrusted input.

    @fuzz_settings(100)             # 100 examples in CI, derandomized (the same ones every run)
    @given(doc=mutations(VALID))    # a valid document with a few random changes

CI runs each property in a few seconds: few examples, a fixed seed. FLEETCTL_FUZZ=N runs N times
as many examples, randomized, for a longer hunt (before a release, or nightly):
`FLEETCTL_FUZZ=50 pytest tests/unit/test_lens_fuzz.py`. The older properties of
test_fuzz_untrusted.py and the C fuzzers (test_c_fuzz.py, as a multiple of their time) read the
same knob the same way.
"""

from __future__ import annotations

import copy
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ENV = "FLEETCTL_FUZZ"


def scale() -> int:
    """FLEETCTL_FUZZ as a multiple of the CI budget (1 when unset)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return 1
    try:
        wanted = int(value)
    except ValueError:
        raise ValueError(f"{ENV}={value!r}: a whole number (a multiple of the CI budget)") from None
    return max(1, wanted)


def examples(default: int) -> int:
    """`default` examples, times FLEETCTL_FUZZ."""
    return default * scale()


def fuzz_settings(default: int, deadline_s: float = 5.0) -> settings:
    """Settings of one property: `default` examples (see examples()); derandomized unless
    FLEETCTL_FUZZ asks for a hunt; `deadline_s` per example (a slow path fails the property)."""
    return settings(max_examples=examples(default), deadline=deadline_s * 1000, database=None,
                    derandomize=scale() == 1,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


# Any JSON value (hostile strings included: markup, control characters, bidi overrides).
hostile_text = st.text(max_size=20) | st.sampled_from(
    ["[/b]", "[red]x", "\x1b[2J", "\x1b]0;t\x07", "\r\n", "\u202e", "", "a" * 600])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12)


def _slots(doc) -> list[tuple[object, object]]:
    """(container, key or index) of every value inside `doc`, iteratively."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for key, value in items:
            out.append((node, key))
            stack.append(value)
    return out


def _apply(doc, ops):
    doc = copy.deepcopy(doc)
    for pick, op, value in ops:
        slots = _slots(doc)
        if not slots:
            return value
        node, key = slots[pick % len(slots)]
        if op == "replace":
            node[key] = value
        elif op == "drop":
            del node[key]
        else:  # wrap: the right value at the wrong depth
            node[key] = [node[key]]
    return doc


def mutations(doc, max_changes: int = 3):
    """`doc` with up to `max_changes` random changes: a value replaced by any JSON value, a key
    or item dropped, a value wrapped in a list."""
    ops = st.lists(st.tuples(st.integers(0, 2**20), st.sampled_from(["replace", "drop", "wrap"]),
                             json_values), max_size=max_changes)
    return ops.map(lambda o: _apply(doc, o))


def byte_mutations(data: bytes):
    """`data` cut and spliced at random places (truncations, insertions, garbage)."""
    return st.tuples(st.integers(0, len(data)), st.integers(0, len(data)),
                     st.binary(max_size=16)).map(lambda t: data[:t[0]] + t[2] + data[t[1]:])
