"""`fleetctl act log`: every action's current phase."""

from __future__ import annotations

import click

from fleetctl.cli.act.common import config, folded_lines, line, state_dir_option
from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.errors import EXIT_OK


@click.command("log")
@common_options
@state_dir_option(must_exist=True)
@click.option("--last", type=click.IntRange(1, 100000), default=50, show_default=True, help="Actions shown.")
@click.option("--wide", is_flag=True, help="One line per action instead of actions that differ only in "
              "their node folded into one.")
@pass_app
def log_cmd(app: Application, state_dir, last: int, wide: bool) -> int:
    """Every action's current phase (from the action log). Actions that differ only in their node
    and id are one line: the ids' range and the folded node set (--wide: one line each).

    \b
    Examples:
      fleetctl act log --last 20
      fleetctl act log --format json | jq '.actions[] | select(.phase == "failed")'
    """
    from fleetctl.act.actionlog import ActionLog

    view = sorted(ActionLog(config(app, state_dir).state_dir).current().values(), key=lambda r: r["time"])[-last:]

    def render(console):
        for text in ([line(rec) for rec in view] if wide else folded_lines(view)):
            console.print(text)
        if not view:
            console.print("no actions logged")

    app.emit({"actions": view}, render)
    return EXIT_OK
