"""Large local copies: non-temporal stores where the optional C extension is built.

A plain copy (numpy, memcpy below glibc's streaming threshold) reads every destination line
before overwriting it and leaves the destination in cache, evicting data that is still
needed. For a large output that nobody reads soon, streaming stores write it out directly:
one pass over memory less, and the source stays cached (so the transport can send it on to
a peer right after; see `push.push_copies`). Measured with benchmarks/runtime_vs_peers.py.
"""
from __future__ import annotations

import ctypes
import os

try:
    from ._stream import STREAMING, copy as _stream_copy
except ImportError:  # built without a C compiler
    STREAMING, _stream_copy = 0, None

# GPUCOMM_STREAM=0 turns streaming off (for comparisons); copies below MIN_BYTES stay plain
# (they fit in cache, where a plain copy is as fast and leaves the data ready to use).
ENABLED = bool(STREAMING) and os.environ.get("GPUCOMM_STREAM", "1") != "0"
MIN_BYTES = int(os.environ.get("GPUCOMM_STREAM_MIN_BYTES", 256 << 10))


def copy(dst: int, src: int, nbytes: int) -> None:
    """Copy `nbytes` from address `src` to address `dst` (the ranges may overlap)."""
    if ENABLED and nbytes >= MIN_BYTES and (dst >= src + nbytes or src >= dst + nbytes):
        _stream_copy(dst, src, nbytes)
    else:
        ctypes.memmove(dst, src, nbytes)
