"""Recursive doubling and halving: log2(P) rounds of exchanges with the partner r XOR d.

- all-reduce, recursive doubling: every round both partners exchange the whole buffer and add
  it; latency-optimal (log2 P steps), sends log2(P)·M.
- all-reduce, recursive halving-doubling (Rabenseifner 2004, "Optimization of collective
  reduction operations", ICCS): a recursive-halving reduce-scatter then a recursive-doubling
  all-gather; bandwidth-optimal, 2(P-1)/P·M in 2·log2 P steps.
- reduce-scatter by recursive halving and all-gather by recursive doubling (Thakur, Rabenseifner
  & Gropp 2005, "Optimization of collective communication operations in MPICH", IJHPCA).

Rank counts that are not a power of two use the standard fold (Thakur et al. 2005, §4): with
p2 the largest power of two <= P, each extra rank e >= p2 first hands its data to its partner
e - p2, the p2-rank core runs, and the partner sends the result back. A core rank g stands for
"slot" g, which owns block g and, where it exists, block g + p2 (the extra rank's block).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import ArrayLike

from ..schedule import Schedule, Step, concat, step
from . import algorithm


# (sources, destinations, first slot, slot count) -> the step moving those slots
SlotOps = Callable[[np.ndarray, np.ndarray, np.ndarray, int], Step]


def core_size(nranks: int) -> int:
    """The largest power of two <= nranks: the ranks that run the recursive core."""
    return 1 << (int(nranks).bit_length() - 1)


def _extras(p: int, p2: int) -> np.ndarray:
    return np.arange(p2, p)


def _slots(src: np.ndarray, dst: np.ndarray, lo: ArrayLike, n: ArrayLike, p: int, p2: int,
           reduce: bool = False) -> Step:
    """Ops moving slots lo..lo+n-1: blocks lo.. and, where they exist, the extras' lo+p2.."""
    lo = np.broadcast_to(np.asarray(lo), np.shape(src))
    n2 = np.clip(p - p2 - lo, 0, n)
    has = n2 > 0
    return concat([step(src, dst, lo, nchunks=n, reduce=reduce),
                   step(src[has], dst[has], lo[has] + p2, nchunks=n2[has], reduce=reduce)])


def _halving(p: int, p2: int, reduce_slots: SlotOps) -> Iterator[Step]:
    """Recursive halving: at distance d rank r keeps the half of its slots its partner drops."""
    r, d = np.arange(p2), p2 // 2
    while d >= 1:
        partner = r ^ d
        yield reduce_slots(r, partner, partner & ~(d - 1), d)  # the partner's half, reduced
        d //= 2


def _doubling(p2: int, copy_slots: SlotOps) -> Iterator[Step]:
    """Recursive doubling: rank r holds slots [r & ~(d-1), +d) and sends them to r XOR d."""
    r, d = np.arange(p2), 1
    while d < p2:
        yield copy_slots(r, r ^ d, r & ~(d - 1), d)
        d *= 2


@algorithm("all_reduce", "recursive_doubling")
def recursive_doubling_all_reduce(nranks: int, root: int = 0) -> Schedule:
    """log2(P) rounds: swap the whole buffer with rank r XOR 2^k and add it."""
    p, p2 = nranks, core_size(nranks)
    r, extra = np.arange(p2), _extras(p, p2)

    def steps() -> Iterator[Step]:
        if len(extra):
            yield step(extra, extra - p2, 0, reduce=True)
        d = 1
        while d < p2:
            # Into the partner's scratch block first: sending and adding into the same chunk in
            # one step would race. a+b == b+a bit for bit, so both partners agree exactly.
            yield step(r, r ^ d, 0, 1)
            yield step(r, r, 1, 0, reduce=True)
            d *= 2
        if len(extra):
            yield step(extra - p2, extra, 0)
    return Schedule("all_reduce", p, "recursive_doubling", 1, steps, scratch_blocks=1)


@algorithm("all_reduce", "recursive_halving_doubling")
def rabenseifner_all_reduce(nranks: int, root: int = 0) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling all-gather."""
    p, p2 = nranks, core_size(nranks)
    extra = _extras(p, p2)

    def steps() -> Iterator[Step]:
        if len(extra):
            yield step(extra, extra - p2, 0, nchunks=p2, reduce=True)
        yield from _halving(p, p2, lambda s, d, lo, n: step(s, d, lo, nchunks=n, reduce=True))
        yield from _doubling(p2, lambda s, d, lo, n: step(s, d, lo, nchunks=n))
        if len(extra):
            yield step(extra - p2, extra, 0, nchunks=p2)
    return Schedule("all_reduce", p, "recursive_halving_doubling", p2, steps)


@algorithm("reduce_scatter", "recursive_halving")
def recursive_halving_reduce_scatter(nranks: int, root: int = 0) -> Schedule:
    """log2(P) rounds, each sending the half of the blocks the partner keeps, reduced."""
    p, p2 = nranks, core_size(nranks)
    extra = _extras(p, p2)

    def steps() -> Iterator[Step]:
        if len(extra):
            yield step(extra, extra - p2, 0, nchunks=p, reduce=True)
        yield from _halving(p, p2, lambda s, d, lo, n: _slots(s, d, lo, n, p, p2, reduce=True))
        if len(extra):
            yield step(extra - p2, extra, extra)
    return Schedule("reduce_scatter", p, "recursive_halving", 1, steps)


@algorithm("all_gather", "recursive_doubling")
def recursive_doubling_all_gather(nranks: int, root: int = 0) -> Schedule:
    """log2(P) rounds, each swapping everything gathered so far with rank r XOR 2^k."""
    p, p2 = nranks, core_size(nranks)
    extra = _extras(p, p2)

    def steps() -> Iterator[Step]:
        if len(extra):
            yield step(extra, extra - p2, extra)
        yield from _doubling(p2, lambda s, d, lo, n: _slots(s, d, lo, n, p, p2))
        if len(extra):  # everything but the extra rank's own block
            tail = p - 1 - extra
            has = tail > 0
            yield concat([step(extra - p2, extra, 0, nchunks=extra),
                          step(extra[has] - p2, extra[has], extra[has] + 1, nchunks=tail[has])])
    return Schedule("all_gather", p, "recursive_doubling", 1, steps)
