"""The one progress bar of the CLI: transient, on stderr, for fan-outs that last.

    with ProgressBar(app, len(nodes), "exec") as bar:
        transport.run(nodes, argv, on_result=bar.advance)

Shown only on a terminal, in human mode, for at least `min_total` nodes, and only once the run has
lasted `after_s` (quick runs print just their result). rich is imported only when the bar shows.
"""

from __future__ import annotations

import sys
import threading

AFTER_S = 1.0


class ProgressBar:
    def __init__(self, app, total: int, label: str, *, min_total: int = 2, after_s: float | None = None,
                 terminal: bool | None = None):
        terminal = sys.stderr.isatty() if terminal is None else terminal
        self.enabled = not app.json and terminal and total >= min_total
        self.app, self.total, self.label = app, total, label
        self.after_s = AFTER_S if after_s is None else after_s
        self._bar = self._task = self._timer = None
        self._lock = threading.Lock()
        self._done = 0

    def __enter__(self):
        if self.enabled:
            self._timer = threading.Timer(self.after_s, self._start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _start(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._bar is not None or self._timer is None:
                return
            self._bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.app.err_console, transient=True)
            self._task = self._bar.add_task(self.label, total=self.total, completed=self._done)
            self._bar.start()

    def advance(self, _result=None) -> None:
        """One node done (an `on_result` callback)."""
        with self._lock:
            self._done += 1
            if self._bar is not None:
                self._bar.advance(self._task)

    def __exit__(self, *exc):
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._bar is not None:
                self._bar.stop()
