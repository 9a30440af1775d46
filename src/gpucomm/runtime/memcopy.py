"""Large local copies: non-temporal stores where the optional C extension is built.

A plain copy (numpy, memcpy below glibc's streaming threshold) reads every destination line
before overwriting it and leaves the destination in cache, evicting data that is still
needed. For a large output that nobody reads soon, streaming stores write it out directly:
one pass over memory less, and the source stays cached (so the transport can send it on to
a peer right after; see `push.push_copies`). Measured with benchmarks/runtime_vs_peers.py.
"""
from __future__ import annotations

import ctypes
from typing import Any

from .options import RuntimeOptions

try:
    from . import _stream
    from ._stream import STREAMING, copy as _stream_copy
    _address: Any = getattr(_stream, "address", None)  # None: an extension built before it
except ImportError:  # built without a C compiler
    STREAMING, _stream_copy, _address = 0, None, None


def address(a: Any) -> int:
    """Where numpy array `a`'s data starts: read through the buffer protocol in C, as
    numpy's `__array_interface__` builds a dict on every call (microseconds; a call used
    seven)."""
    if _address is not None:
        try:
            return _address(a)
        except (BufferError, TypeError, ValueError):  # not contiguous: numpy says where
            pass
    return a.__array_interface__["data"][0]


def call_addresses(inp: Any, out: Any) -> tuple[int, int]:
    """A call's input and output addresses as its descriptor publishes them (shm_control
    IN_ADDR, OUT_ADDR): -1 / -2 where the rank passed none."""
    return (address(inp) if inp is not None else -1, address(out) if out is not None else -2)


def streams(options: RuntimeOptions) -> bool:
    """Do large copies stream under `options` (GPUCOMM_STREAM=0 turns it off for
    comparisons; without the C extension they never do)?"""
    return bool(STREAMING) and options.stream


def copy(dst: int, src: int, nbytes: int, min_bytes: int = 0) -> None:
    """Copy `nbytes` from address `src` to address `dst` (the ranges may overlap), with
    streaming stores from `min_bytes` on (below, copies fit in cache, where a plain copy is as
    fast and leaves the data ready to use); pass `min_bytes=-1` for a plain copy always."""
    if STREAMING and 0 <= min_bytes <= nbytes \
            and (dst >= src + nbytes or src >= dst + nbytes):
        _stream_copy(dst, src, nbytes)
    else:
        ctypes.memmove(dst, src, nbytes)


def stream_min_bytes(options: RuntimeOptions) -> int:
    """The size from which copies stream under `options` (-1: never), `copy`'s `min_bytes`."""
    return options.stream_min_bytes if streams(options) else -1


def copier(options: RuntimeOptions):
    """`copy` with the threshold `options` set: (dst, src, nbytes) -> None."""
    threshold = stream_min_bytes(options)

    def run(dst: int, src: int, nbytes: int) -> None:
        copy(dst, src, nbytes, threshold)
    return run
