"""How long the property tests run: a bounded number of examples per property in CI (seconds each),
`FLEETCTL_FUZZ=N` for N examples per property on demand (e.g. 100000 for an overnight run).

    from tests.support.fuzz import fuzz_settings
    @fuzz_settings(200)
    @given(...)
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings


def examples(default: int) -> int:
    """`default` examples, or FLEETCTL_FUZZ's number when set (a positive integer)."""
    raw = os.environ.get("FLEETCTL_FUZZ", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


def fuzz_settings(default: int, deadline_s: float = 2.0) -> settings:
    """Settings for one property: no example database, derandomized in CI (a failure is replayable),
    random when FLEETCTL_FUZZ asks for a long run (new inputs every run)."""
    long_run = examples(default) != default
    return settings(max_examples=examples(default), deadline=timedelta(seconds=deadline_s), database=None,
                    derandomize=not long_run,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])
