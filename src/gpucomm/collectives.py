"""The collective primitives: buffer layout, symbolic pre/postconditions, numpy reference, busbw.

Every rank holds one *logical buffer* of `nblocks(P)` equal blocks (the unit a collective's
layout is written in); an algorithm cuts each block into chunks. A user's input and output
arrays map onto contiguous block ranges of it, the way NCCL's in-place layouts do: all-gather's
input sits at block `rank` of its output, reduce-scatter's output is block `rank` of its input;
all-to-all, gather, scatter and send/recv keep input and output in separate block ranges.

A symbolic value is a frozenset of contributions `(origin_rank, origin_block)`; a reduction is
their union. Postconditions say which value each block must end with (None: don't care).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from . import dtypes as dt
from .dtypes import DTypeLike
from .errors import ConfigError

Value = frozenset[tuple[int, int]]  # contributions (origin rank, origin block)
BlockRange = Optional[tuple[int, int]]  # (first block, number of blocks), or None: no buffer


@dataclass(frozen=True)
class Collective:
    name: str
    reduces: bool  # takes a reduction op
    rooted: bool  # takes a root rank
    size_blocks: Callable[[int], int]  # blocks that nccl-tests' "size" S covers
    nblocks: Callable[[int], int]  # blocks in the logical buffer
    pre: Callable[[int, int, int, int], Optional[Value]]  # (rank, block, P, root) -> value
    post: Callable[[int, int, int, int], Optional[Value]]
    inputs: Callable[[int, int, int], BlockRange]  # (rank, P, root) -> block range of the input
    outputs: Callable[[int, int, int], BlockRange]
    busbw_factor: Callable[[int], float]  # nccl-tests: busbw = algbw * factor
    doc: str

    def __str__(self) -> str:
        return self.name


def _all(p: int, block: int) -> Value:
    return frozenset((q, block) for q in range(p))


def _one(p: int) -> int:
    return 1


def _p(p: int) -> int:
    return p


def _ring_factor(p: int) -> float:
    return (p - 1) / p


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective(
        "all_reduce", True, False, _one, _one,
        pre=lambda r, b, p, root: frozenset({(r, b)}),
        post=lambda r, b, p, root: _all(p, b),
        inputs=lambda r, p, root: (0, 1), outputs=lambda r, p, root: (0, 1),
        busbw_factor=lambda p: 2 * (p - 1) / p,
        doc="every rank ends with the reduction of all ranks' buffers"),
    Collective(
        "reduce_scatter", True, False, _p, _p,
        pre=lambda r, b, p, root: frozenset({(r, b)}),
        post=lambda r, b, p, root: _all(p, b) if b == r else None,
        inputs=lambda r, p, root: (0, p), outputs=lambda r, p, root: (r, 1),
        busbw_factor=_ring_factor,
        doc="rank r ends with block r of the reduction of all ranks' P-block inputs"),
    Collective(
        "all_gather", False, False, _p, _p,
        pre=lambda r, b, p, root: frozenset({(r, b)}) if b == r else None,
        post=lambda r, b, p, root: frozenset({(b, b)}),
        inputs=lambda r, p, root: (r, 1), outputs=lambda r, p, root: (0, p),
        busbw_factor=_ring_factor,
        doc="every rank ends with every rank's block, in rank order"),
    Collective(
        "broadcast", False, True, _one, _one,
        pre=lambda r, b, p, root: frozenset({(root, b)}) if r == root else None,
        post=lambda r, b, p, root: frozenset({(root, b)}),
        inputs=lambda r, p, root: (0, 1) if r == root else None, outputs=lambda r, p, root: (0, 1),
        busbw_factor=lambda p: 1.0,
        doc="every rank ends with the root's buffer"),
    Collective(
        "reduce", True, True, _one, _one,
        pre=lambda r, b, p, root: frozenset({(r, b)}),
        post=lambda r, b, p, root: _all(p, b) if r == root else None,
        inputs=lambda r, p, root: (0, 1), outputs=lambda r, p, root: (0, 1) if r == root else None,
        busbw_factor=lambda p: 1.0,
        doc="the root ends with the reduction of all ranks' buffers"),
    Collective(
        "all_to_all", False, False, _p, lambda p: 2 * p,
        pre=lambda r, b, p, root: frozenset({(r, b)}) if b < p else None,
        post=lambda r, b, p, root: frozenset({(b - p, r)}) if b >= p else None,
        inputs=lambda r, p, root: (0, p), outputs=lambda r, p, root: (p, p),
        busbw_factor=_ring_factor,
        doc="block j of rank i's input ends as block i of rank j's output"),
    Collective(
        "gather", False, True, _p, lambda p: p + 1,
        pre=lambda r, b, p, root: frozenset({(r, 0)}) if b == 0 else None,
        post=lambda r, b, p, root: frozenset({(b - 1, 0)}) if r == root and b >= 1 else None,
        inputs=lambda r, p, root: (0, 1), outputs=lambda r, p, root: (1, p) if r == root else None,
        busbw_factor=_ring_factor,
        doc="the root ends with every rank's block, in rank order"),
    Collective(
        "scatter", False, True, _p, lambda p: p + 1,
        pre=lambda r, b, p, root: frozenset({(root, b)}) if r == root and b < p else None,
        post=lambda r, b, p, root: frozenset({(root, r)}) if b == p else None,
        inputs=lambda r, p, root: (0, p) if r == root else None, outputs=lambda r, p, root: (p, 1),
        busbw_factor=_ring_factor,
        doc="rank r ends with block r of the root's buffer"),
    Collective(
        "sendrecv", False, False, _one, lambda p: 2,
        pre=lambda r, b, p, root: frozenset({(r, 0)}) if b == 0 else None,
        post=lambda r, b, p, root: frozenset({((r - 1) % p, 0)}) if b == 1 else None,
        inputs=lambda r, p, root: (0, 1), outputs=lambda r, p, root: (1, 1),
        busbw_factor=lambda p: 1.0,
        doc="rank r sends its buffer to rank r+1 and receives rank r-1's (nccl-tests' sendrecv)"),
    Collective(
        "barrier", False, False, _p, _p,
        pre=lambda r, b, p, root: frozenset({(r, b)}) if b == r else None,
        post=lambda r, b, p, root: frozenset({(b, b)}),
        inputs=lambda r, p, root: None, outputs=lambda r, p, root: None,
        busbw_factor=lambda p: 1.0,
        doc="no rank leaves before every rank has arrived (a zero-byte all-gather of tokens)"),
)}
ALIASES = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
           "alltoall": "all_to_all", "bcast": "broadcast", "send_recv": "sendrecv"}


def get_collective(name: Collective | str) -> Collective:
    if isinstance(name, Collective):
        return name
    key = str(name).lower().replace("-", "_")
    key = ALIASES.get(key.replace("_", ""), key) if key not in COLLECTIVES else key
    if key not in COLLECTIVES:
        raise ConfigError(f"unknown collective {name!r}: allowed are {', '.join(COLLECTIVES)}")
    return COLLECTIVES[key]


def check_ranks(nranks: object, what: str = "ranks") -> int:
    if not isinstance(nranks, (int, np.integer)) or isinstance(nranks, bool) or nranks < 1:
        raise ConfigError(f"{what} must be an integer >= 1, got {nranks!r}")
    return int(nranks)


def check_root(coll: Collective, root: int, nranks: int) -> int:
    if not (0 <= root < nranks):
        raise ConfigError(f"root {root} is out of range: allowed are 0..{nranks - 1}")
    return root


@dataclass(frozen=True)
class BufferLayout:
    """nccl-tests' view of one benchmark point: `size` bytes S, `count` elements, block size."""
    collective: Collective
    nranks: int
    dtype: dt.DType
    size: int  # S in bytes, as nccl-tests prints it (the algbw numerator)
    count: int  # the `count` column: elements per call, S / element size / blocks S covers
    # (nccl-tests prints each test's paramcount: all-gather, reduce-scatter, all-to-all,
    # gather, scatter pass S/P per rank; src/all_gather.cu etc. GetCollByteCount)
    block_count: int  # elements per block of the logical buffer

    @property
    def block_bytes(self) -> int:
        return self.block_count * self.dtype.itemsize

    def busbw(self, time_s: float) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes/s) for a time, as nccl-tests computes them."""
        algbw = self.size / time_s / 1e9 if time_s > 0 else float("inf")
        return algbw, algbw * self.collective.busbw_factor(self.nranks)


def layout(collective: Collective | str, nbytes: int | str, dtype: DTypeLike = "float32",
           nranks: int = 1) -> BufferLayout:
    """The layout of an nccl-tests size S: `count` and the per-block element count.

    Like nccl-tests, collectives whose S covers P blocks (all-gather, reduce-scatter,
    all-to-all, gather, scatter) round S down to a multiple of P elements, and their `count`
    is the per-rank block (what the call is given), not S / element size.
    """
    coll, dtype = get_collective(collective), dt.get_dtype(dtype)
    nranks = check_ranks(nranks)
    nbytes = dt.parse_size(nbytes)
    if nbytes % dtype.itemsize:
        raise ConfigError(f"size {nbytes} B is not a multiple of the {dtype.name} element size "
                          f"({dtype.itemsize} B)")
    if coll.name == "barrier":
        return BufferLayout(coll, nranks, dtype, 0, 0, 0)
    blocks = coll.size_blocks(nranks)
    block_count = nbytes // dtype.itemsize // blocks
    return BufferLayout(coll, nranks, dtype, block_count * blocks * dtype.itemsize,
                        block_count, block_count)


def buffer_counts(collective: Collective | str, block_count: int, rank: int, nranks: int,
                  root: int = 0) -> tuple[int, int]:
    """(input elements, output elements) a rank passes for a given block size; 0 where none."""
    coll = get_collective(collective)
    rin, rout = coll.inputs(rank, nranks, root), coll.outputs(rank, nranks, root)
    return (0 if rin is None else rin[1] * block_count,
            0 if rout is None else rout[1] * block_count)


def reference(collective: Collective | str, inputs: list[Any], op: str = "sum",
              dtype: DTypeLike = "float32", root: int = 0) -> list[np.ndarray | None]:
    """The expected outputs (one per rank; None where the rank has no output) in numpy.

    Reductions are computed in float64 for floating types (rounded once to the storage type)
    and in the storage type for integers, where wrap-around makes the result order-free.
    """
    coll, dtype = get_collective(collective), dt.get_dtype(dtype)
    p = len(inputs)
    if coll.reduces:
        dt.check_op(op, dtype)
    if coll.name == "barrier":
        return [None] * p
    if coll.name in ("all_reduce", "reduce_scatter", "reduce"):
        total = reduce_all(inputs, op, dtype)
        if coll.name == "all_reduce":
            return [total.copy() for _ in range(p)]
        if coll.name == "reduce":
            return [total.copy() if r == root else None for r in range(p)]
        return [b.copy() for b in np.array_split(total, p)]
    if coll.name == "all_gather":
        whole = np.concatenate(inputs) if p else np.empty(0, dtype.storage)
        return [whole.copy() for _ in range(p)]
    if coll.name == "broadcast":
        return [inputs[root].copy() for _ in range(p)]
    if coll.name == "all_to_all":
        blocks = [np.array_split(x, p) for x in inputs]
        return [np.concatenate([blocks[j][r] for j in range(p)]) for r in range(p)]
    if coll.name == "gather":
        return [np.concatenate(inputs) if r == root else None for r in range(p)]
    if coll.name == "scatter":
        return [b.copy() for b in np.array_split(inputs[root], p)]
    if coll.name == "sendrecv":
        return [inputs[(r - 1) % p].copy() for r in range(p)]
    raise ConfigError(f"no reference for {coll.name}")


def reduce_all(inputs: list[np.ndarray], op: str, dtype: DTypeLike) -> np.ndarray:
    """The reduction of equal-length arrays as `reference` computes it."""
    dtype = dt.get_dtype(dtype)
    if dtype.is_float:
        vals = np.stack([dt.to_compute(x, dtype).astype(np.float64) for x in inputs])
        total: np.ndarray = dt.UFUNCS[op].reduce(vals, axis=0)
        if op == "avg":
            total = total / len(inputs)
        if dtype.name == "bfloat16":
            return dt.f32_to_bf16(total.astype(np.float32))
        if dtype.name in dt.FP8:  # one rounding from the exact value
            return dt.float_to_fp8(total, dtype.name)
        return total.astype(dtype.storage)
    total = inputs[0].copy()
    for x in inputs[1:]:
        dt.reduce_into(total, x, op, dtype)
    return total


def tolerance(op: str, dtype: DTypeLike, nranks: int) -> float:
    """Relative tolerance of a floating reduction against `reference` (0 = bit for bit).

    min and max select, so they are exact; integer ops wrap, so they are exact. Sums, averages
    and products round after each of up to P-1 reductions: the classic bound for recursive
    summation is (P-1)·u·Σ|x_i| with u the unit round-off of the type the result is rounded to.
    """
    dtype = dt.get_dtype(dtype)
    if not dtype.is_float or op in ("min", "max"):
        return 0.0
    mantissa = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52, "f8e4m3": 3,
                "f8e5m2": 2}[dtype.name]
    return (nranks + 1) * 2.0 ** -mantissa


def check_outputs(collective: Collective | str, outputs: list[np.ndarray | None],
                  inputs: list[Any], op: str = "sum", dtype: DTypeLike = "float32",
                  root: int = 0, what: str = "") -> None:
    """Raise AssertionError naming the rank and element where `outputs` miss the reference.

    Exact ops must match bit for bit; floating sums, averages and products must lie within
    `tolerance` (relative to the sum of magnitudes, or to the product for prod).
    """
    coll, dtype = get_collective(collective), dt.get_dtype(dtype)
    want = reference(coll, inputs, op, dtype, root)
    tol = tolerance(op, dtype, len(inputs)) if coll.reduces else 0.0
    scale = None
    if tol and op in ("sum", "avg"):
        mags = [np.abs(dt.to_compute(x, dtype).astype(np.float64)) for x in inputs]
        scale = reference(coll, mags, "avg" if op == "avg" else "sum", "float64", root)
    for r, (g, w) in enumerate(zip(outputs, want)):
        if w is None:
            continue
        where = f"{what}rank {r}"
        if g is None or g.shape != w.shape:
            raise AssertionError(f"{where}: output has shape {getattr(g, 'shape', None)}, "
                                 f"want {w.shape}")
        if tol == 0.0:
            if not np.array_equal(g.view(np.uint8), w.view(np.uint8)):
                i = int(np.flatnonzero(g.view(w.dtype) != w)[0]) if g.size else 0
                raise AssertionError(f"{where}: element {i} is {g[i]!r}, want {w[i]!r} "
                                     f"(must match bit for bit)")
            continue
        gv = dt.to_compute(g, dtype).astype(np.float64)
        wv = dt.to_compute(w, dtype).astype(np.float64)
        sr = scale[r] if scale is not None else None
        s = sr if sr is not None else np.abs(wv)
        ok = (np.abs(gv - wv) <= tol * s + 1e-30) | (gv == wv)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise AssertionError(f"{where}: element {i} is {gv[i]!r}, want {wv[i]!r} "
                                 f"(relative tolerance {tol:.3g})")
