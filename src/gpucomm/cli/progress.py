"""Progress on a terminal: a bar for long loops (after a second), and for any command still
quiet after two seconds a spinner with the elapsed time. rich, on stderr, only on a terminal."""
from __future__ import annotations

import sys
import threading
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
            if _active is not None:
                _active.stop()  # the bar says more than the spinner
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


ACTIVITY_DELAY_S = 2.0
_active: Activity | None = None  # the command's activity line (one per process)


class _Tap:
    """A text stream that reports its first write (the command's output is about to start)."""

    def __init__(self, stream, on_write):
        self._stream, self._on_write = stream, on_write

    def write(self, s):
        if s:
            self._on_write()
        return self._stream.write(s)

    def __getattr__(self, name):
        return getattr(self._stream, name)


class Activity:
    """A spinner with the elapsed time, on a terminal's stderr, for a command still quiet after
    ACTIVITY_DELAY_S: it goes away when the command first writes to stdout or stderr, when a
    Progress bar takes over, or when the command ends. On a pipe it does nothing."""

    def __init__(self, label: str, stream=None):
        self.stream = stream or sys.stderr
        self.label = label
        self.on = self.stream.isatty() and _active is None
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.done = False
        self.bar: Any = None
        self.timer: threading.Timer | None = None

    def __enter__(self):
        global _active
        if self.on:
            _active = self
            self.saved = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = _Tap(sys.stdout, self.stop), _Tap(sys.stderr, self.stop)
            self.timer = threading.Timer(ACTIVITY_DELAY_S, self._show)
            self.timer.daemon = True
            self.timer.start()
        return self

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as Bar
        from rich.progress import SpinnerColumn, TextColumn
        with self.lock:
            if self.done:
                return
            t0 = self.t0
            elapsed = TextColumn("")
            elapsed.render = lambda task: f"{time.monotonic() - t0:.0f} s"  # type: ignore
            self.bar = Bar(SpinnerColumn(), TextColumn(self.label), elapsed,
                           console=Console(file=self.stream), transient=True,
                           redirect_stdout=False, redirect_stderr=False)  # our taps stop it
            self.bar.add_task(self.label, total=None)
            self.bar.start()

    def stop(self) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
            if self.timer is not None:
                self.timer.cancel()
            if self.bar is not None:
                self.bar.stop()

    def __exit__(self, *exc):
        global _active
        if self.on:
            self.stop()
            sys.stdout, sys.stderr = self.saved
            _active = None
