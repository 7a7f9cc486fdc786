"""`fleetctl lens agent` (the node-resident probe agent, run by fleetctl-lens-agent.service) and
`fleetctl lens keygen PATH` (the key it shares with its coordinator)."""

from __future__ import annotations

import os
import sys
import time

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.signals import stop_on_signals
from fleetctl.errors import EXIT_OK, ConfigError, UsageError


@click.command("agent")
@common_options
@click.option("--coordinator", metavar="HOST:PORT", default=None,
              help="Where to register (default: the site's lens.coordinator).")
@click.option("--key-file", metavar="PATH", default=None,
              help="The lens key (default: the site's lens.key_file, /etc/fleetctl/lens.key).")
@click.option("--node", metavar="NAME", default=None,
              help="This node's name in the site file (default: $FLEETCTL_NODE, else the short "
                   "host name).")
@pass_app
def agent_cmd(app: Application, coordinator, key_file, node) -> int:
    """Run this node's probe agent as a service: register with the lens coordinator, probe as it
    says, send it the summaries, and register again whenever the connection ends. Runs until
    SIGTERM (systemd: fleetctl-lens-agent.service).

    \b
    Examples:
      fleetctl lens agent --coordinator mgmt1:61250
      fleetctl lens agent --coordinator 10.0.0.5:61250 --key-file /etc/fleetctl/lens.key --node gpu017
    """
    from fleetctl.lens.listener import parse_listen
    from fleetctl.lens.nodeagent import NodeAgentOptions, node_name, serve
    from fleetctl.lens.register import read_key

    lens_site = _site_lens(app) if (coordinator is None or key_file is None) else {}
    coordinator = coordinator or lens_site.get("coordinator") or ""
    if not coordinator:
        raise UsageError("no coordinator: give --coordinator HOST:PORT or set lens.coordinator")
    address = parse_listen(coordinator, "--coordinator")
    key = read_key(key_file or lens_site.get("key_file") or "/etc/fleetctl/lens.key")
    opts = NodeAgentOptions(coordinator=address, key=key, node=node_name(node))
    stop = stop_on_signals()

    def log(message: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} lens agent {opts.node}: {message}",
              file=sys.stderr, flush=True)

    log(f"registering with {address[0]}:{address[1]}")
    serve(opts, stop, log)
    log("stopped")
    return EXIT_OK


@click.command("keygen")
@common_options
@click.argument("path", type=click.Path(dir_okay=False))
@pass_app
def keygen_cmd(app: Application, path: str) -> int:
    """Write a new lens key (32 random bytes, mode 600) to PATH, never over an existing file.
    Copy it to every node and the coordinator's host, as munge.key is.

    \b
    Examples:
      fleetctl lens keygen /etc/fleetctl/lens.key
    """
    from fleetctl.lens.register import write_key

    write_key(path)
    app.emit({"written": os.path.abspath(path)},
             lambda c: c.print(f"lens key written to {path} (mode 600)", markup=False))
    return EXIT_OK


def _site_lens(app: Application) -> dict:
    """The site file's [lens] table when there is a site file (a node may have none)."""
    try:
        return dict(app.cluster.data.get("lens") or {})
    except ConfigError as exc:
        if os.environ.get("FLEETCTL_SITE") or app.site_path:
            raise
        del exc
        return {}
