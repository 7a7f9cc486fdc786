"""`fleetctl act run|log|undo`: the Detect -> Act loop (docs/act.md).

`act run` is a dry run (every decision logged as `dry-run`) until the site file sets `act.enabled`;
`--dry-run` forces one. Exit codes: 0 ran; 1 something was refused or failed; 3 fleetctl could not
run (site file, Slurm, an unreadable input).
"""

from __future__ import annotations

import click

from fleetctl.cli.act import log, run, undo


@click.group("act")
def act() -> None:
    """Detections to actions, by the site's policies, with a budget, a log and undo."""


for _command in (log.log_cmd, run.run, undo.undo_cmd):
    act.add_command(_command)
