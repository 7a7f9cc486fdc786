"""Waiting for a lens webhook outbox (fleetctl/lens/webhook.py) in tests: production never waits
for delivery, the coordinator only submits and reports stats()."""

from __future__ import annotations

import time


def wait_idle(box, timeout: float, step: float = 0.01) -> bool:
    """True once nothing is pending in `box` (within `timeout` seconds)."""
    end = time.monotonic() + timeout
    while box.pending:
        if time.monotonic() >= end:
            return False
        time.sleep(step)
    return True
