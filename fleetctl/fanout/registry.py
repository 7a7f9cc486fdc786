"""The one registry of transports by name. Backends are imported only when used: the ssh one pulls in
paramiko, which a `--help` or an srun run should not pay for."""

from __future__ import annotations

import importlib

from fleetctl.errors import UsageError
from fleetctl.fanout.base import FanoutOptions, Transport

# name -> (module, class). A new backend is one file plus one line here.
TRANSPORTS: dict[str, tuple[str, str]] = {
    "ssh": ("fleetctl.fanout.ssh", "SshTransport"),
    "srun": ("fleetctl.fanout.srun", "SrunTransport"),
    "local": ("fleetctl.fanout.local", "LocalTransport"),
}


def transport_class(name: str) -> type[Transport]:
    entry = TRANSPORTS.get(name)
    if entry is None:
        raise UsageError(f"unknown transport {name!r}; choose one of {', '.join(sorted(TRANSPORTS))}")
    module, attr = entry
    return getattr(importlib.import_module(module), attr)


def get_transport(name: str | None = None, options: FanoutOptions | None = None, *,
                  site=None) -> Transport:
    """A transport by name (default: the site's `access.transport`), configured from `options`
    or else from the site file (or else the schema defaults)."""
    if options is None:
        options = FanoutOptions.from_site(site)
    if name is None:
        name = site.access["transport"] if site is not None else "ssh"
    return transport_class(name)(options)
