"""SIGTERM and SIGHUP turned into exceptions for the length of a block, so cleanup runs."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType


@contextlib.contextmanager
def trapped(exception: Callable[[int], BaseException],
            only_default: bool = False) -> Iterator[None]:
    """While the block runs (main thread only), SIGTERM and SIGHUP raise `exception(signum)`;
    with `only_default`, only where their action is still the default one (the process would
    die), so a handler the program installed itself is left alone."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise exception(signum)

    saved = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if not only_default or signal.getsignal(sig) is signal.SIG_DFL:
                saved[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def exiting_on_signals() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) while the block runs (main thread
    only, and only where the default action would kill the process), so cleanup runs."""
    return trapped(lambda signum: SystemExit(128 + signum), only_default=True)
