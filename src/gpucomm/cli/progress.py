"""A progress bar for long loops: rich, on stderr, only on a terminal, only after a second."""
from __future__ import annotations

import sys
import time
from typing import Any

DELAY_S = 1.0


class Progress:
    """`advance(label)` once per item; the bar appears once the loop has taken DELAY_S and
    disappears when stopped. On a pipe (or with `enabled=False`) it prints nothing."""

    def __init__(self, total: int, what: str = "points", enabled: bool = True, stream=None):
        self.stream = stream or sys.stderr
        self.on = enabled and total > 1 and self.stream.isatty()
        self.total, self.what, self.done = total, what, 0
        self.t0 = time.monotonic()
        self.bar: Any = None
        self.task: Any = None

    def advance(self, label: str = "") -> None:
        self.done += 1
        if not self.on:
            return
        if self.bar is None and time.monotonic() - self.t0 >= DELAY_S:
            from rich.console import Console
            from rich.progress import Progress as Bar
            self.bar = Bar(console=Console(file=self.stream), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=self.total, completed=self.done)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, description=label or self.what)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
