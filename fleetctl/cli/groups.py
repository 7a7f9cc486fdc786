"""A click group with a default subcommand: `fleetctl audit [NODESET]` is `fleetctl audit run [NODESET]`.

The first word decides: a subcommand's name selects it; anything else (a node set, an option, `--`,
nothing at all) goes to the default command. So `fleetctl audit analyze FILE.h5` is the subcommand,
and a node literally named like a subcommand is given after the default's name or after `--`:
`fleetctl audit run analyze` or `fleetctl audit -- analyze`.
"""

from __future__ import annotations

import click


class DefaultCommandGroup(click.Group):
    def __init__(self, *args, default: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.default = default

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        help_only = len(args) == 1 and args[0] in ctx.help_option_names
        if not help_only and (not args or args[0] not in self.commands):
            args = [self.default, *args]
        return super().parse_args(ctx, args)
