"""Ring algorithms: each rank talks only to its neighbour, bandwidth-optimal, P-1 steps a phase.

All-reduce is the classic reduce-scatter followed by all-gather (Patarasuk & Yuan 2009): each
rank sends 2(P-1)/P of the buffer. With C channels the buffer is cut into C independent rings
that run concurrently, as NCCL's channels do.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError
from ..schedule import Schedule, Step, step
from . import algorithm


def _channels(channels: object) -> int:
    if not isinstance(channels, int) or channels < 1:
        raise ConfigError(f"channels must be an integer >= 1, got {channels!r}")
    return channels


@algorithm("all_reduce", "ring")
def ring_all_reduce(nranks: int, root: int = 0, channels: int = 1) -> Schedule:
    """Ring reduce-scatter then ring all-gather; C channels run side by side."""
    p, c = nranks, _channels(channels)
    r = np.arange(p)
    base = (np.arange(c) * p)[:, None]  # channel ch owns chunks ch*P .. ch*P+P-1

    def steps() -> Iterator[Step]:
        for s in range(p - 1):  # reduce-scatter: chunk r-s travels r -> r+1, reduced
            yield step(np.tile(r, c), np.tile((r + 1) % p, c), (base + (r - s) % p).reshape(-1),
                       reduce=True, channel=np.repeat(np.arange(c), p))
        for s in range(p - 1):  # all-gather: the finished chunk r+1-s moves on, copied
            yield step(np.tile(r, c), np.tile((r + 1) % p, c),
                       (base + (r + 1 - s) % p).reshape(-1), channel=np.repeat(np.arange(c), p))
    return Schedule("all_reduce", p, "ring", c * p, steps, channels=c,
                    params=(("channels", c),))


@algorithm("reduce_scatter", "ring")
def ring_reduce_scatter(nranks: int, root: int = 0, channels: int = 1) -> Schedule:
    """Block r-s-1 travels r -> r+1 and is reduced; rank r ends with block r."""
    p, c = nranks, _channels(channels)
    r = np.arange(p)

    def steps() -> Iterator[Step]:
        for s in range(p - 1):
            blocks = (r - s - 1) % p
            yield step(np.repeat(r, c), np.repeat((r + 1) % p, c),
                       (blocks[:, None] * c + np.arange(c)).reshape(-1), reduce=True,
                       channel=np.tile(np.arange(c), p))
    return Schedule("reduce_scatter", p, "ring", c, steps, channels=c, params=(("channels", c),))


@algorithm("all_gather", "ring")
def ring_all_gather(nranks: int, root: int = 0, channels: int = 1) -> Schedule:
    """Block r-s travels r -> r+1; after P-1 steps every rank has every block."""
    p, c = nranks, _channels(channels)
    r = np.arange(p)

    def steps() -> Iterator[Step]:
        for s in range(p - 1):
            blocks = (r - s) % p
            yield step(np.repeat(r, c), np.repeat((r + 1) % p, c),
                       (blocks[:, None] * c + np.arange(c)).reshape(-1),
                       channel=np.tile(np.arange(c), p))
    return Schedule("all_gather", p, "ring", c, steps, channels=c, params=(("channels", c),))


def chain_order(nranks: int, root: int) -> np.ndarray:
    """Ranks in chain order starting at the root: root, root+1, ..."""
    return (root + np.arange(nranks)) % nranks


def chain_ranks(collective: str, nranks: int, root: int) -> np.ndarray:
    """A chain's ranks in hop order: from the root for a broadcast, to it for a reduce."""
    return chain_order(nranks, root if collective == "broadcast" else (root + 1) % nranks)


def chain_steps(order: np.ndarray, chunks: int, channels: int,
                 reduce: bool) -> Iterator[Step]:
    """The steps of `channels` pipelined chains along `order`, each with its own `chunks`
    pieces (channel ch owns chunks ch*chunks ..): at step s hop h carries piece s-h."""
    p = len(order)
    for s in range(chunks + p - 2):
        h = np.arange(max(s - chunks + 1, 0), min(s, p - 2) + 1)
        if h.size:
            ch = np.arange(channels)
            yield step(np.tile(order[h], channels), np.tile(order[h + 1], channels),
                       (ch[:, None] * chunks + s - h).reshape(-1), reduce=reduce,
                       channel=np.repeat(ch, h.size))


def _chain(collective: str, nranks: int, root: int, chunks: object, channels: object,
           order: np.ndarray) -> Schedule:
    if not isinstance(chunks, int) or chunks < 1:
        raise ConfigError(f"chunks must be an integer >= 1, got {chunks!r}")
    c = _channels(channels)
    reduce = collective == "reduce"

    def steps() -> Iterator[Step]:
        return chain_steps(order, chunks, c, reduce)
    return Schedule(collective, nranks, "ring", c * chunks, steps, root=root, channels=c,
                    params=(("chunks", chunks), ("channels", c)))


@algorithm("broadcast", "ring")
def chain_broadcast(nranks: int, root: int = 0, chunks: int = 8, channels: int = 1) -> Schedule:
    """A pipelined chain from the root (NCCL's ring broadcast, device/broadcast.h): each of
    `channels` chains carries its 1/channels of the buffer in `chunks` pieces in flight."""
    return _chain("broadcast", nranks, root, chunks, channels,
                  chain_ranks("broadcast", nranks, root))


@algorithm("reduce", "ring")
def chain_reduce(nranks: int, root: int = 0, chunks: int = 8, channels: int = 1) -> Schedule:
    """A pipelined chain ending at the root: each rank adds its part and passes it on; each
    of `channels` chains carries its 1/channels of the buffer."""
    return _chain("reduce", nranks, root, chunks, channels,  # root+1, ..., root
                  chain_ranks("reduce", nranks, root))
