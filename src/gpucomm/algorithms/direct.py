"""Direct algorithms: every rank talks to every peer itself, one round per peer.

Rounds follow the shift (pairwise-exchange) schedule: in round s = 1..P-1 rank r sends to
r + s and receives from r - s, so every rank sends and receives exactly one message a round
(Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication operations in
MPICH", IJHPCA, the pairwise-exchange all-to-all). One-shot and two-shot all-reduce are the
ONESHOT and TWOSHOT strategies of TensorRT-LLM's custom all-reduce kernels (NVIDIA, for
NVLink-connected GPUs of one node): one-shot gathers every peer's whole buffer and reduces it
locally, (P-1)·M sent for one round of latency; two-shot is a direct reduce-scatter then a
direct all-gather, 2(P-1)/P·M.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..schedule import Schedule, Step, concat, step
from . import algorithm


def _shifts(p: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(s, senders, receivers) for the rounds s = 1..P-1 of the shift schedule."""
    r = np.arange(p)
    for s in range(1, p):
        yield s, r, (r + s) % p


@algorithm("all_reduce", "one_shot")
def one_shot_all_reduce(nranks: int, root: int = 0) -> Schedule:
    """Every rank gathers every peer's buffer and reduces all P locally in rank order."""
    p, r = nranks, np.arange(nranks)
    # Scratch block 1+q holds rank q's buffer. Reducing in the fixed order 0, 1, ..., P-1 on
    # every rank gives every rank the same bits: a floating sum depends on its order.
    def steps() -> Iterator[Step]:
        for s, src, dst in _shifts(p):
            hop = step(src, dst, 0, 1 + src)
            yield concat([step(r[1:], r[1:], 0, 1 + r[1:]), hop]) if s == 1 else hop
        if p > 1:
            yield step(r[1:], r[1:], 1, 0)  # start from rank 0's buffer (rank 0 holds it)
        for q in range(1, p):
            yield step(r, r, 1 + q, 0, reduce=True)
    return Schedule("all_reduce", p, "one_shot", 1, steps, scratch_blocks=p)


@algorithm("all_reduce", "two_shot")
def two_shot_all_reduce(nranks: int, root: int = 0) -> Schedule:
    """Direct reduce-scatter of P shards, then direct all-gather of the reduced shards."""
    p = nranks

    def steps() -> Iterator[Step]:
        for _, src, dst in _shifts(p):  # shard j is reduced on rank j
            yield step(src, dst, dst, reduce=True)
        for _, src, dst in _shifts(p):
            yield step(src, dst, src)
    return Schedule("all_reduce", p, "two_shot", p, steps)


@algorithm("reduce_scatter", "direct")
def direct_reduce_scatter(nranks: int, root: int = 0) -> Schedule:
    """Round s: rank r sends block r+s to rank r+s, which adds it."""
    return Schedule("reduce_scatter", nranks, "direct", 1,
                    lambda: (step(src, dst, dst, reduce=True) for _, src, dst in _shifts(nranks)))


@algorithm("all_gather", "direct")
def direct_all_gather(nranks: int, root: int = 0) -> Schedule:
    """Round s: rank r sends its block to rank r+s."""
    return Schedule("all_gather", nranks, "direct", 1,
                    lambda: (step(src, dst, src) for _, src, dst in _shifts(nranks)))


@algorithm("all_to_all", "direct")
def direct_all_to_all(nranks: int, root: int = 0) -> Schedule:
    """Pairwise exchange: round s, rank r sends block r+s to rank r+s; own block copied."""
    p, r = nranks, np.arange(nranks)

    def steps() -> Iterator[Step]:
        own = step(r, r, r, p + r)
        if p == 1:
            yield own
        for s, src, dst in _shifts(p):
            hop = step(src, dst, dst, p + src)
            yield concat([own, hop]) if s == 1 else hop
    return Schedule("all_to_all", p, "direct", 1, steps)


@algorithm("all_to_all", "grouped")
def grouped_all_to_all(nranks: int, root: int = 0) -> Schedule:
    """NCCL's all-to-all: a send and a receive to every peer inside one group call, all in
    flight at once (ncclGroupStart/End; nccl-tests' alltoall), so one step of P(P-1) sends."""
    p, r = nranks, np.arange(nranks)
    src = np.repeat(r, p)
    dst = np.tile(r, p)
    return Schedule("all_to_all", p, "grouped", 1, (step(src, dst, dst, p + src),))


@algorithm("gather", "direct")
def direct_gather(nranks: int, root: int = 0) -> Schedule:
    """Every rank sends its block straight to the root."""
    r = np.arange(nranks)
    return Schedule("gather", nranks, "direct", 1, (step(r, root, 0, 1 + r),), root=root)


@algorithm("scatter", "direct")
def direct_scatter(nranks: int, root: int = 0) -> Schedule:
    """The root sends block r straight to rank r."""
    r = np.arange(nranks)
    return Schedule("scatter", nranks, "direct", 1, (step(root, r, r, nranks),), root=root)


@algorithm("sendrecv", "direct")
def direct_sendrecv(nranks: int, root: int = 0) -> Schedule:
    """Rank r sends its buffer to rank r+1 and receives rank r-1's, all at once."""
    r = np.arange(nranks)
    return Schedule("sendrecv", nranks, "direct", 1, (step(r, (r + 1) % nranks, 0, 1),))
