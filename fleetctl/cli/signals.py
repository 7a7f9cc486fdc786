"""How the long-running commands stop: SIGTERM or SIGINT set a StopSignal they poll."""

from __future__ import annotations

import signal
import threading


class StopSignal(threading.Event):
    """Set by SIGTERM or SIGINT; `signum` says which (None while unset)."""

    signum: int | None = None

    def interrupted(self) -> bool:
        """Stopped by SIGINT: the command exits EXIT_INTERRUPTED, as after Ctrl-C."""
        return self.signum == signal.SIGINT


def stop_on_signals() -> StopSignal:
    """A StopSignal for long-running commands (lens run, lens events --follow, failover watch, act
    run): they finish their current step and exit cleanly. Explicit handlers, because a command
    started in the background by a non-interactive shell (cron, CI, `cmd &`) inherits SIGINT
    ignored, and Python then never raises KeyboardInterrupt."""
    stop = StopSignal()

    def on_signal(signum, _frame):
        stop.signum = signum
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop
