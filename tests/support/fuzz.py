"""How long the property tests run: a bounded number of examples per property in CI (seconds each);
`FLEETCTL_FUZZ=N` runs N times as many (e.g. 1000 for an overnight hunt before a release). The C
fuzzers (tests/unit/test_c_fuzz.py) read the same knob as a multiple of their time budget.

    from tests.support.fuzz import fuzz_settings
    @fuzz_settings(200)
    @given(...)
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings


def scale() -> int:
    """FLEETCTL_FUZZ as a positive integer multiple (1 when unset or not a positive integer)."""
    raw = os.environ.get("FLEETCTL_FUZZ", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def examples(default: int) -> int:
    return default * scale()


def fuzz_settings(default: int, deadline_s: float = 2.0) -> settings:
    """Settings for one property: no example database; derandomized in CI (a failure replays the
    same way), random on a long run (new inputs every run)."""
    return settings(max_examples=examples(default), deadline=timedelta(seconds=deadline_s), database=None,
                    derandomize=scale() == 1,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
