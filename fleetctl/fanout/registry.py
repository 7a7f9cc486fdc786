"""The transports by name (fleetctl.registry). Backends are imported only when chosen: the ssh one
pulls in paramiko, which a `--help` or an srun run should not pay for."""

from __future__ import annotations

from fleetctl.extras import install_hint
from fleetctl.fanout.base import FanoutOptions, Transport
from fleetctl.registry import Registry

# A new backend is one file plus one line here.
transports = Registry("transport")
transports.register("ssh", "fleetctl.fanout.ssh:SshTransport", install_hint=lambda: install_hint("ssh"))
transports.register("srun", "fleetctl.fanout.srun:SrunTransport")
transports.register("local", "fleetctl.fanout.local:LocalTransport")
transports.register("clush", "fleetctl.fanout.clush:ClushTransport")


def transport_class(name: str) -> type[Transport]:
    return transports.get(name)


def get_transport(name: str | None = None, options: FanoutOptions | None = None, *,
                  cluster=None) -> Transport:
    """A transport by name (default: the site's `access.transport`), configured from `options`
    or else from the site file (or else the schema defaults)."""
    if options is None:
        options = FanoutOptions.from_site(cluster)
    if name is None:
        name = cluster.access["transport"] if cluster is not None else "ssh"
    return transport_class(name)(options)
