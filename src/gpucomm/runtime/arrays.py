"""Buffers as numpy arrays: the `contracts.Arrays` of engines that move host memory (MPI), and
the flat views a communicator call passes to its transport (`as_flat`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import ConfigError


class NumpyArrays:
    """Buffers as 1-D numpy arrays in the dtype's storage type (bfloat16 as uint16)."""

    def empty(self, n: int, dtype: dt.DType) -> np.ndarray:
        return np.empty(n, dtype=dtype.storage)

    def pack(self, views: list[Any], n: int, dtype: dt.DType) -> np.ndarray:
        return np.concatenate(views) if len(views) > 1 else views[0]

    def reduce(self, dst: Any, src: Any, op: str, dtype: dt.DType) -> None:
        dt.reduce_into(dst, src, op, dtype)

    def finish_avg(self, buf: Any, nranks: int, dtype: dt.DType) -> None:
        dt.finish_avg(buf, nranks, dtype)

    def as_buffer(self, x: Any, dtype: dt.DType, what: str) -> np.ndarray:
        """A user array as a flat array of the storage type (a view where possible)."""
        a = np.asarray(x)
        if a.dtype != dtype.storage:
            raise ConfigError(f"{what} is {a.dtype}, the collective runs in {dtype.name} "
                              f"(storage {dtype.storage}): pass arrays of one dtype")
        return a.reshape(-1)

    def dtype_of(self, x: Any) -> dt.DType:
        return dt.get_dtype(np.asarray(x).dtype)

    def write_back(self, out: Any, flat: Any) -> None:
        """Make sure the user's `out` holds `flat` (a no-op when flat is a view of out)."""
        if isinstance(out, np.ndarray) and not np.shares_memory(out, flat):
            out.reshape(-1)[:] = flat


NUMPY = NumpyArrays()

# a communicator call's buffers: numpy dtypes, DTypes and names -> DType
DTYPE_OF: dict[Any, dt.DType] = {d.storage: d for d in dt.DTYPES.values()
                                  if d.name != "bfloat16" and d.name not in dt.FP8}
DTYPE_OF.update({d: d for d in dt.DTYPES.values()})
DTYPE_OF.update({name: d for name, d in dt.DTYPES.items()})


def is_flat(buf: np.ndarray) -> bool:
    """A 1-D, contiguous, writable array: one the transport takes as it is."""
    return buf.ndim == 1 and buf.flags.c_contiguous and buf.flags.writeable


def as_flat(buf, what: str, dtype=None):
    """(flat numpy view of `buf`, DType) without copying; ConfigError when impossible.

    Buffers named `inp` are only read, so they may be read-only."""
    if buf is None:
        raise ConfigError(f"{what} is None: this call needs a buffer here")
    arr, native = as_numpy(buf)
    if not arr.flags.c_contiguous:
        raise ConfigError(f"{what} must be C-contiguous (got strides {arr.strides}); "
                          f"pass a contiguous copy")
    if not arr.flags.writeable and what != "inp":
        raise ConfigError(f"{what} is read-only; collectives write into their buffers")
    if dtype is None:
        dtype = native if native is not None else arr.dtype
        if native is None and arr.dtype == np.uint16:
            raise ConfigError(f"{what} is uint16: pass dtype='bfloat16' to reduce it as "
                              f"bfloat16 (uint16 is not a reduction type)")
    dtype = DTYPE_OF.get(dtype) or dt.get_dtype(dtype)
    if arr.dtype != dtype.storage and not isinstance(buf, np.ndarray) and arr.dtype == np.uint8:
        if arr.nbytes % dtype.itemsize:
            raise ConfigError(f"{what} has {arr.nbytes} bytes, not a whole number of "
                              f"{dtype.name} elements ({dtype.itemsize} B)")
        arr = arr.reshape(-1).view(dtype.storage)  # raw bytes read as the given dtype
    if arr.dtype != dtype.storage:
        raise ConfigError(f"{what} holds {arr.dtype}, but the call is for {dtype.name} "
                          f"(stored as {dtype.storage}); every buffer must have one dtype")
    return arr.reshape(-1), dtype


def as_numpy(buf):
    if isinstance(buf, np.ndarray):
        return buf, None
    mod = type(buf).__module__
    if mod.startswith("torch"):
        import torch
        if buf.device.type != "cpu":
            raise ConfigError(f"torch tensor on {buf.device}: the shm transport needs CPU "
                              f"tensors")
        t = buf.detach()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        return t.numpy(), None
    if hasattr(buf, "__dlpack__"):
        try:
            return np.from_dlpack(buf), None
        except (TypeError, RuntimeError, BufferError) as e:
            raise ConfigError(f"cannot read buffer via DLPack: {e}") from None
    try:
        return np.asarray(memoryview(buf)), None
    except TypeError:
        raise ConfigError(f"{type(buf).__name__} is not a buffer: pass a numpy array, a CPU "
                          f"torch tensor or an object with the buffer protocol or DLPack") \
            from None


__all__ = ["DTYPE_OF", "NUMPY", "NumpyArrays", "as_flat", "as_numpy", "is_flat"]
