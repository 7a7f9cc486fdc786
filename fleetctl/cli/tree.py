"""The command tree, walked: every command with its path. Groups load their subcommands lazily
(fleetctl.cli.LazyGroup), so each is asked by name. The man pages and the tests that hold every
command to a rule (examples, bounded options) walk it here."""

from __future__ import annotations

import click


def commands(root: click.Command, *, hidden: bool = True) -> list[tuple[list[str], click.Command]]:
    """Every command under `root`, groups included, in help order: [(["audit", "run"], cmd), ...]."""
    found = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        found.append((path, cmd))
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and (hidden or not sub.hidden):
                    walk(sub, [*path, name])

    walk(root, [])
    return found
