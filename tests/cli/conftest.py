"""In-process CLI tests: the site file is always an explicit choice (--site or FLEETCTL_SITE set by
the test), never one leaking in from the developer's shell."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_site_from_the_shell(monkeypatch):
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
