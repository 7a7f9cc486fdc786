"""Bounded numeric option types: every numeric option has a range, and nan/inf are refused.

click's FloatRange lets nan through (every comparison with nan is false) and has no default upper
bound; a `--budget nan` or `--timeout 1e308` would otherwise reach time arithmetic on every node.
"""

from __future__ import annotations

import math

import click


class FiniteFloatRange(click.FloatRange):
    """A float within [min, max]; nan and inf are refused."""

    def __init__(self, min: float, max: float):
        super().__init__(min=min, max=max)

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def seconds(low: float, high: float) -> FiniteFloatRange:
    """A duration option in seconds, `low <= s <= high`."""
    return FiniteFloatRange(low, high)


MAX_TIMEOUT_S = 86_400.0  # a remote command or a node's checks: a day is beyond any real use
MAX_CONNECT_TIMEOUT_S = 600.0
