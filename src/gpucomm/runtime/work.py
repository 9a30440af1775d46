"""The handle of an asynchronous call (`async_op=True`), over the future its thread fills."""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from ..errors import CommTimeout


class Work:
    """The handle of an `async_op=True` call. `wait()` blocks until it is done (or raises)."""

    def __init__(self, future: Future[Any]):
        self._future = future

    def is_completed(self) -> bool:
        return self._future.done()

    def succeeded(self) -> bool:
        """Done, without an error."""
        return self._future.done() and self._future.exception() is None

    def add_done_callback(self, fn) -> None:
        """Call `fn(future)` when the call ends (now, if it has): `future.exception()` is its
        error or None. It runs on the thread that ended the call."""
        self._future.add_done_callback(fn)

    def wait(self, timeout: float | None = None) -> bool:
        try:
            self._future.result(timeout=timeout)
        except TimeoutError:
            if self._future.done():
                raise  # the call itself timed out (a CommTimeout naming the rank)
            raise CommTimeout(f"Work.wait timed out after {timeout:g}s (the call is still "
                              f"running)") from None
        return True


_done: Future[Any] = Future()
_done.set_result(None)
DONE = Work(_done)  # the Work of every call that finished before returning (it holds no state)
