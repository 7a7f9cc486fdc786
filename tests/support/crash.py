"""Crash points for the act engine's tests: `crash_at(action, point)` is an `Engine(on_point=...)`
hook that ends the process at that point as a crash would (os._exit: no finally, no flush), so a
test can prove the pending -> action -> done order of the action log (fleetctl/act/engine.py).

For a whole `fleetctl` process (the lab test):
    python -m tests.support.crash drain:after-pending act run --once --report FILE
runs the CLI with every Engine it builds crashing there; it exits CRASH_EXIT at that point.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

CRASH_EXIT = 86


def crash_at(action: str, point: str) -> Callable[[str, str], None]:
    """The hook that exits CRASH_EXIT when the engine reaches `point` (after-pending, after-action,
    after-<step>) of `action` (drain, swap, snapshot, ...)."""

    def on_point(reached_action: str, reached_point: str) -> None:
        if (reached_action, reached_point) == (action, point):
            os._exit(CRASH_EXIT)

    return on_point


def main(argv: list[str]) -> int:
    """`ACTION:POINT FLEETCTL-ARGS...`: the fleetctl CLI, crashing at that point."""
    from fleetctl.act import run as act_run
    from fleetctl.cli import run

    action, _, point = argv[0].partition(":")
    # act.run.start() builds the engine by this name: give it the hook as if injected by the caller
    act_run.Engine = functools.partial(act_run.Engine, on_point=crash_at(action, point))
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
