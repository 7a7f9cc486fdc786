"""The node-side discovery script: the node-check payload's collectors plus discover/payload/collect.py,
joined into one stdlib-only script by the one payload builder (fleetctl.fanout.payload.bundle)."""

from __future__ import annotations

from functools import lru_cache

from fleetctl.fanout.payload import FUTURE, bundle

# The check payload modules whose readers collect.py uses, in their own order (runner left out: it
# would run the checks).
CHECK_MODULES = ("common", "fabric", "gpu_collect", "netdev", "nic_counters", "nics", "host")


@lru_cache(maxsize=1)
def discover_payload() -> str:
    checks = bundle("fleetctl.checks.payload", CHECK_MODULES, "discovery payload (check collectors)")
    own = bundle("fleetctl.discover.payload", ("collect",), "discovery payload")
    # The second bundle's header line and `from __future__` are already at the top of the first.
    own = own.split(FUTURE + "\n", 1)[1]
    return checks + own
