"""Buffers as numpy arrays: the `contracts.Arrays` of engines that move host memory (MPI)."""
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

__all__ = ["NUMPY", "NumpyArrays"]
