"""Tree algorithms: a binary tree pair for all-reduce, binomial trees for rooted collectives.

- all-reduce, double binary tree (Sanders, Speck & Träff 2009, "Two-tree algorithms for full
  bandwidth broadcast, reduction and scan", Parallel Computing; NCCL 2.4's trees, see NVIDIA's
  blog "Massively scale your deep learning training with NCCL 2.4", 2019, and NCCL's
  src/graph/trees.cc). Two binary trees in which most ranks that are inner nodes of one are
  leaves of the other; each carries half of the buffer, reduced up to the root and broadcast
  back down, pipelined in chunks so every level works at once. The first tree is NCCL's: the
  parent of rank r with lowest set bit b is (r - b) | 2b, or r - b where that is out of range;
  the second mirrors it (r -> P-1-r) for even P and shifts it by one rank for odd P.
- broadcast, reduce, gather, scatter on binomial trees (Thakur, Rabenseifner & Gropp 2005,
  "Optimization of collective communication operations in MPICH", IJHPCA): ceil(log2 P) rounds;
  in round k ranks at relative distance 2^k (from the root) join in. Ranks are numbered
  relative to the root, v = (r - root) mod P.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError
from ..schedule import Schedule, Step, concat, step
from . import algorithm


def binary_tree(nranks: int) -> np.ndarray:
    """Parent of every rank in NCCL's binary tree rooted at rank 0 (-1 for the root)."""
    r = np.arange(nranks)
    b = r & -r  # lowest set bit
    up = (r ^ b) | (b << 1)
    return np.where(r == 0, -1, np.where(up < nranks, up, r ^ b))


def double_binary_tree(nranks: int) -> tuple[np.ndarray, np.ndarray]:
    """The two complementary trees (parent arrays) NCCL's all-reduce uses."""
    first = binary_tree(nranks)
    r = np.arange(nranks)
    if nranks % 2 == 0:  # mirror
        up = first[nranks - 1 - r]
        second = np.where(up < 0, -1, nranks - 1 - up)
    else:  # shift by one rank
        up = first[(r - 1) % nranks]
        second = np.where(up < 0, -1, (up + 1) % nranks)
    return first, second


def _timing(parent: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """(step each rank sends chunk 0 up, step the root has chunk 0 reduced, depth of each rank).

    A rank sends once all its children have added in; two children of one rank must not add
    into the same chunk in the same step, so the later-ready one waits. Chunk c goes c steps
    later on every edge, so each step every rank handles a different chunk per edge.
    """
    p = len(parent)
    depth, x = np.zeros(p, dtype=np.int64), parent.copy()
    while (x >= 0).any():  # walk every rank up one level at a time
        depth += x >= 0
        x = np.where(x >= 0, parent[x], -1)
    children: list[list[int]] = [[] for _ in range(p)]
    for r in range(p):
        if parent[r] >= 0:
            children[parent[r]].append(r)
    ready, send = np.zeros(p, dtype=np.int64), np.zeros(p, dtype=np.int64)
    for v in sorted(range(p), key=lambda x: -depth[x]):
        t = -1
        for u in sorted(children[v], key=lambda x: ready[x]):
            t = max(ready[u], t + 1)
            send[u] = t
        ready[v] = t + 1
    return send, int(ready[parent < 0][0]), depth


def _positive(name: str, value: object) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


@algorithm("all_reduce", "double_binary_tree")
def double_binary_tree_all_reduce(nranks: int, root: int = 0, chunks: int = 4) -> Schedule:
    """NCCL's double binary tree: each tree reduces half the buffer up, broadcasts it down."""
    p, c = nranks, _positive("chunks", chunks)
    edges = []  # (src, dst, first chunk, step of chunk 0, reduce) per tree edge and direction
    for t, parent in enumerate(double_binary_tree(p)):
        send, done, depth = _timing(parent)
        kid = np.flatnonzero(parent >= 0)
        edges.append((kid, parent[kid], t * c, send[kid], True))
        edges.append((parent[kid], kid, t * c, done + depth[parent[kid]], False))

    def steps() -> Iterator[Step]:
        last = max((int(e[3].max()) for e in edges if len(e[0])), default=-1)
        for s in range(last + c):
            parts = []
            for src, dst, base, start, red in edges:
                on = (start <= s) & (s < start + c)
                parts.append(step(src[on], dst[on], base + s - start[on], reduce=red))
            ops = concat(parts)
            if len(ops):
                yield ops
    return Schedule("all_reduce", p, "double_binary_tree", 2 * c, steps,
                    params=(("chunks", c),))


def _rounds(p: int) -> Iterator[int]:
    """Distances 1, 2, 4, ... < P of the binomial tree's rounds."""
    d = 1
    while d < p:
        yield d
        d *= 2


@algorithm("broadcast", "binomial_tree")
def binomial_broadcast(nranks: int, root: int = 0) -> Schedule:
    """Round k: every relative rank v < 2^k that has the buffer sends it to v + 2^k."""
    p = nranks

    def steps() -> Iterator[Step]:
        for d in _rounds(p):
            v = np.arange(min(d, p - d))
            yield step((v + root) % p, (v + d + root) % p, 0)
    return Schedule("broadcast", p, "binomial_tree", 1, steps, root=root)


@algorithm("reduce", "binomial_tree")
def binomial_reduce(nranks: int, root: int = 0) -> Schedule:
    """Round k: relative rank v with lowest set bit 2^k adds its partial sum into v - 2^k."""
    p = nranks

    def steps() -> Iterator[Step]:
        for d in _rounds(p):
            v = np.arange(d, p, 2 * d)
            yield step((v + root) % p, (v - d + root) % p, 0, reduce=True)
    return Schedule("reduce", p, "binomial_tree", 1, steps, root=root)


@algorithm("gather", "binomial_tree")
def binomial_gather(nranks: int, root: int = 0) -> Schedule:
    """Round k: relative rank v with lowest set bit 2^k sends its subtree's blocks to v - 2^k."""
    p = nranks
    # Every rank stages its subtree's blocks where the root wants them (block 1 + rank), so a
    # block is never moved within a rank; the own block goes straight from the input block.
    def steps() -> Iterator[Step]:
        for d in _rounds(p):
            v = np.arange(d, p, 2 * d)
            src, dst = (v + root) % p, (v - d + root) % p
            rest = np.minimum(v + d, p) - v - 1  # the subtree's other blocks
            has = rest > 0
            ops = [step(src, dst, 0, 1 + src),
                   _relative_blocks(src[has], dst[has], v[has] + 1, rest[has], p, root, 1)]
            if d == 1:
                ops.insert(0, step(root, root, 0, 1 + root))
            yield concat(ops)
        if p == 1:
            yield step(root, root, 0, 1 + root)
    return Schedule("gather", p, "binomial_tree", 1, steps, root=root)


@algorithm("scatter", "binomial_tree")
def binomial_scatter(nranks: int, root: int = 0) -> Schedule:
    """Round k (from the top): relative rank v sends v + 2^k the blocks of its subtree."""
    p = nranks
    top = 1 << max(p - 1, 0).bit_length() if p > 1 else 1

    def steps() -> Iterator[Step]:
        d = top // 2
        while d >= 1:
            v = np.arange(0, p - d, 2 * d)
            src, dst = (v + root) % p, (v + d + root) % p
            rest = np.minimum(v + 2 * d, p) - v - d - 1
            has = rest > 0
            ops = [step(src, dst, dst, p),  # the receiver's own block, into its output
                   _relative_blocks(src[has], dst[has], v[has] + d + 1, rest[has], p, root, 0)]
            if d == top // 2:
                ops.insert(0, step(root, root, root, p))
            yield concat(ops)
            d //= 2
        if p == 1:
            yield step(root, root, root, p)
    return Schedule("scatter", p, "binomial_tree", 1, steps, root=root)


def _relative_blocks(src: np.ndarray, dst: np.ndarray, first: np.ndarray, count: np.ndarray,
                     p: int, root: int, offset: int) -> Step:
    """Ops moving the blocks of relative ranks first .. first+count-1 (absolute block + offset),
    split where the absolute range wraps past rank P-1."""
    start = (first + root) % p
    n1 = np.minimum(count, p - start)
    n2 = count - n1
    wrap = n2 > 0
    return concat([step(src, dst, start + offset, nchunks=n1),
                   step(src[wrap], dst[wrap], offset, nchunks=n2[wrap])])
