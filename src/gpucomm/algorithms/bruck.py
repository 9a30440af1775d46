"""Bruck-style algorithms: ceil(log2 P) rounds at distances 1, 2, 4, ... for any P.

- all-gather (Bruck, Ho, Kipnis, Upfal & Weathersby 1997, "Efficient algorithms for all-to-all
  communications in multiport message-passing systems", IEEE TPDS): in round k rank r sends
  everything it has gathered to rank r - 2^k; P-1 blocks in all, no power of two needed.
- all-to-all (same paper, the log-round "index" algorithm): a block that must travel a
  distance delta = (dst - src) mod P hops 2^k ranks in every round k where bit k of delta is
  set: log2(P) rounds of P/2 blocks each instead of P-1 rounds of one block.
- barrier by dissemination (Hensgen, Finkel & Manber 1988, "Two algorithms for barrier
  synchronization", IJPP): in round k rank r signals rank r + 2^k. As a token all-gather it is
  Bruck's all-gather in the mirror direction.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..schedule import Schedule, Step, concat, step
from . import algorithm


def _wrapped(src: np.ndarray, dst: np.ndarray, first: np.ndarray | int, count: np.ndarray, p: int,
             offset: int = 0) -> Step:
    """Ops moving blocks first .. first+count-1 (mod p), split where the range wraps."""
    n1 = np.minimum(count, p - first)
    n2 = count - n1
    has = n2 > 0
    return concat([step(src, dst, first + offset, nchunks=n1),
                   step(src[has], dst[has], offset, nchunks=n2[has])])


def _gather_rounds(p: int, direction: int) -> Iterator[Step]:
    """Round k: rank r passes the blocks it holds to r + direction·2^k, min(2^k, P-2^k) of them.

    Sending down (direction -1) rank r holds r .. r+d-1; sending up it holds r-d+1 .. r.
    """
    r, d = np.arange(p), 1
    while d < p:
        count = min(d, p - d)
        first = r if direction < 0 else (r - count + 1) % p
        yield _wrapped(r, (r + direction * d) % p, first, np.full(p, count), p)
        d *= 2


@algorithm("all_gather", "bruck")
def bruck_all_gather(nranks: int, root: int = 0) -> Schedule:
    """ceil(log2 P) rounds: send all blocks gathered so far to rank r - 2^k."""
    return Schedule("all_gather", nranks, "bruck", 1, lambda: _gather_rounds(nranks, -1))


@algorithm("barrier", "dissemination")
def dissemination_barrier(nranks: int, root: int = 0) -> Schedule:
    """ceil(log2 P) rounds: rank r signals rank r + 2^k with every arrival it knows of."""
    return Schedule("barrier", nranks, "dissemination", 1, lambda: _gather_rounds(nranks, +1))


@algorithm("all_to_all", "bruck")
def bruck_all_to_all(nranks: int, root: int = 0) -> Schedule:
    """ceil(log2 P) rounds: every block hops 2^k ranks in the rounds k of its distance's bits."""
    p = nranks
    # Where the block of distance delta waits on rank x after m hops: in the input block it will
    # never need again ((x + delta) mod P, the slot of this rank's own block of that distance,
    # which left on its first hop) after an even number, in scratch block delta-1 after an odd
    # one. The two alternate, so no round reads and writes the same chunk.
    def where(x: np.ndarray, delta: np.ndarray, hops: np.ndarray | int) -> np.ndarray:
        return np.where(hops % 2 == 0, (x + delta) % p, 2 * p + delta - 1)

    popcount = np.array([bin(v).count("1") for v in range(p)])

    def steps() -> Iterator[Step]:
        if p == 1:
            yield step(0, 0, 0, 1)
        d, k = 1, 0
        while d < p:
            delta = np.arange(1, p)
            delta = delta[(delta & d) > 0]
            x, delta = (a.reshape(-1) for a in np.meshgrid(np.arange(p), delta, indexing="ij"))
            before = popcount[delta & (d - 1)]  # hops already taken
            to = (x + d) % p
            last = delta < 2 * d  # no higher bit: this hop ends at the destination
            dst_block = np.where(last, p + (to - delta) % p, where(to, delta, before + 1))
            hop = step(x, to, where(x, delta, before), dst_block)
            if k == 0:  # the own block stays, as a local copy
                r = np.arange(p)
                hop = concat([step(r, r, r, p + r), hop])
            yield hop
            d, k = 2 * d, k + 1
    return Schedule("all_to_all", p, "bruck", 1, steps, scratch_blocks=max(p - 1, 0))
