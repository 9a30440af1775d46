"""The chain frontier: a broadcast's or reduce's pipelined chain (algorithms/ring.py's
chain_broadcast, chain_reduce) timed without the general engine's per-step routing.

In a chain of H = P-1 hops, hop h (ranks[h] -> ranks[h+1]) of channel c carries piece k at
step h + k, and a rank sends on one hop of a channel and receives on one, so analytic.run's
state comes down to a recurrence on the (hop, piece) grid of each channel:

    sent(h, k) = max(fin(h-1, k), sent(h, k-1)) + bytes(c, k) / rate(h, c, h + k)
    fin(h, k)  = sent(h, k) + alpha(h, c)

(piece k leaves ranks[h] once it has arrived there and the hop has put piece k-1 on the
wire; nothing reads a destination chunk before it arrives, so it is always free). `rate` is
the op's even share of its links among the ops of its step (steps.py): the hops of the
step's window [h+k-K+1 .. h+k], every channel. The engine routes every distinct window
(about 2H of them, each of up to H x C ops); here every (hop, channel) is routed once and a
step's link counts follow from the window's ends, one hop in and one out a step. The
recurrence then runs step by step over a window at once with the engine's own arithmetic
(the same divisions, sums and maxima in the same order), so the ends equal analytic.run's
to the last bit; tests/test_chain_frontier.py compares them.

Where routes depend on more than (hop, channel) (a fabric policy: ECMP hashing, PFC pauses,
lanes), or a trace is asked for, the general engine answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..algorithms.ring import chain_ranks, chain_steps
from . import constants as K

if TYPE_CHECKING:
    from ..schedule import Schedule, Step
    from .steps import StepCoster

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
CHECK_STEPS = 4  # of a generated schedule: the first hops of every channel, pieces 0..3


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainOut:
    """The chain's answer for every row of chunk bounds: ends (K,), link busy bytes
    (links, K), ops."""
    end_s: Floats
    busy_bytes: Floats
    ops: int


def chain_shape(sched: Schedule) -> tuple[Ints, int, int] | None:
    """(ranks in hop order, pieces per channel, channels) where `sched`'s steps are exactly
    ring.chain_steps' along chain_ranks (the first CHECK_STEPS steps of a generated schedule
    compared: its generator, a registered builder's code, stands for the rest; all steps of
    one held in memory), else None."""
    coll, p = sched.collective.name, sched.nranks
    params = dict(sched.params)
    k, c = params.get("chunks"), params.get("channels")
    if coll not in K.CHAIN_COLLECTIVES or p < 2 or sched.scratch_blocks \
            or not isinstance(k, int) or not isinstance(c, int) or k < 1 or c < 1 \
            or c != int(sched.channels) or sched.total_chunks != c * k:
        return None
    order = chain_ranks(coll, p, sched.root)
    lazy = callable(sched.source)
    expect = chain_steps(order, k, c, coll == "reduce")
    for i, st in enumerate(sched.steps()):
        want = next(expect, None)
        if want is None or not _same_step(st, want):
            return None
        if lazy and i + 1 >= CHECK_STEPS:
            return order, k, c
    return (order, k, c) if next(expect, None) is None else None


def _same_step(a: Step, b: Step) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a.columns(), b.columns()))


def chain_many(sched: Schedule, shape: tuple[Ints, int, int], coster: StepCoster,
               bounds: npt.ArrayLike, itemsize: int) -> ChainOut | None:
    """End times of the chain `sched` (chain_shape's `shape`) for each row of chunk `bounds`
    (one row per size of a sweep), as analytic.run times them; None where its routes depend
    on more than hop and channel (a fabric policy): the general engine answers."""
    paths = coster.paths
    if paths.fabric is not None:
        return None
    order, pieces, c = shape
    h = len(order) - 1
    hops = np.repeat(np.arange(h), c)  # ops hop-major: op h*C + ch
    chan = np.tile(np.arange(c), h)
    table = paths.routes(order[hops], order[hops + 1], chan)
    if not table.shape[1]:
        return None
    nlinks = paths.nlinks
    safe = np.where(table < 0, nlinks, table)  # (ops, hops of a route), padding: sentinel
    lat, cls, _ = paths.properties(table)
    alpha = coster.proto.alpha(lat, cls)[:, None]
    cap = np.append(paths.capacity * paths.lane_scale, np.inf)
    rows = np.atleast_2d(np.asarray(bounds))
    chunk_bytes = ((rows[:, 1:] - rows[:, :-1]) * itemsize).T  # (C*K chunks, sizes)
    nsizes = rows.shape[0]
    if pieces == 1:
        end = _one_piece(safe, cap, alpha, cls, chunk_bytes, coster, h, c)
    else:
        end = _pipelined(safe, cap, alpha, cls, chunk_bytes, coster, h, c, pieces)
    op_bytes = chunk_bytes.reshape(c, pieces, nsizes).sum(axis=1)[chan]  # (ops, sizes)
    flat, width = safe.reshape(-1), safe.shape[1]
    busy: Floats = np.stack([np.bincount(flat, weights=np.repeat(op_bytes[:, j], width),
                                         minlength=nlinks + 1)[:nlinks]
                             for j in range(nsizes)], axis=1).astype(np.float64)
    return ChainOut(end_s=end, busy_bytes=busy, ops=h * pieces * c)


def _one_piece(safe: Ints, cap: Floats, alpha: Floats, cls: npt.NDArray[np.int8],
               chunk_bytes: npt.NDArray[np.int64], coster: StepCoster, h: int, c: int
               ) -> Floats:
    """A chain of one piece a channel: step s is hop s alone, each op shares its links with
    its hop's other channels only, and a hop's piece leaves when it has arrived, so each
    channel's ends are the running sum x0, a0, x1, a1, ... (the engine's additions, in its
    order)."""
    key = _hop_keys(safe, h, len(cap) - 1)
    uniq, mult = np.unique(key, return_counts=True)
    share = (cap[safe] / mult[np.searchsorted(uniq, key)]).min(axis=1)
    rate = coster.proto.op_rate(share, cls, coster.lanes, coster.channels)[:, None]
    nbytes = chunk_bytes[np.tile(np.arange(c), h)]  # K = 1: channel ch's chunk is ch
    xfer = np.where(nbytes <= 0, 0.0, nbytes / rate)  # (ops, sizes), ops hop-major
    seq = np.stack([xfer, np.broadcast_to(alpha, xfer.shape)], axis=1)  # (ops, 2, sizes)
    seq = seq.reshape(h, c, 2, -1).transpose(1, 0, 2, 3).reshape(c, 2 * h, -1)
    ends: Floats = np.cumsum(seq, axis=1)[:, 1::2].max(axis=(0, 1))
    return ends


def _pipelined(safe: Ints, cap: Floats, alpha: Floats, cls: npt.NDArray[np.int8],
               chunk_bytes: npt.NDArray[np.int64], coster: StepCoster, h: int, c: int,
               pieces: int) -> Floats:
    """The recurrence stepped a window of hops at a time (the module docstring)."""
    nlinks, nsizes = len(cap) - 1, chunk_bytes.shape[1]
    proto, lanes, channels = coster.proto, coster.lanes, coster.channels
    hops, chan = np.repeat(np.arange(h), c), np.tile(np.arange(c), h)
    sent = np.zeros((h * c, nsizes))  # sent(h, k-1) of every op
    fin = np.zeros((h * c, nsizes))  # fin of the op's last piece
    end = np.zeros(nsizes)
    links, mult, at = _hop_links(safe, h, nlinks)
    counts = np.zeros(nlinks + 1, dtype=np.int64)
    lo = hi = 0  # the window's hops [lo, hi): one hop comes in a step, one goes
    for s in range(pieces + h - 1):
        new_lo, new_hi = max(s - pieces + 1, 0), min(s, h - 1) + 1
        for j in range(hi, new_hi):
            counts[links[at[j]:at[j + 1]]] += mult[at[j]:at[j + 1]]
        for j in range(lo, new_lo):
            counts[links[at[j]:at[j + 1]]] -= mult[at[j]:at[j + 1]]
        lo, hi = new_lo, new_hi
        ops = slice(lo * c, hi * c)
        win = safe[ops]
        share = (cap[win] / np.maximum(counts[win], 1)).min(axis=1)
        rate = proto.op_rate(share, cls[ops], lanes, channels)[:, None]
        piece = s - hops[ops]  # each op's piece
        nbytes = chunk_bytes[chan[ops] * pieces + piece]
        if lo == 0:  # the first hop's source is the root: its data is there from the start
            ready = np.concatenate([np.zeros((c, nsizes)), fin[0:(hi - 1) * c]])
        else:
            ready = fin[(lo - 1) * c:(hi - 1) * c]
        start = np.maximum(ready, sent[ops])  # its sender's and receiver's last piece alike
        xfer = np.where(nbytes <= 0, 0.0, nbytes / rate)
        out = start + xfer
        sent[ops] = out
        fin[ops] = out + alpha[ops]
        np.maximum(end, fin[ops].max(axis=0), out=end)
    return end


def _hop_links(safe: Ints, hops: int, nlinks: int) -> tuple[Ints, Ints, Ints]:
    """Per hop, its channels' distinct links and how many of its ops cross each: (links,
    multiplicity, offsets), hop j's in [offsets[j], offsets[j+1])."""
    uniq, mult = np.unique(_hop_keys(safe, hops, nlinks), return_counts=True)
    hop, links = np.divmod(uniq, nlinks + 1)
    at = np.searchsorted(hop, np.arange(hops + 1))
    return links, mult, at


def _hop_keys(safe: Ints, hops: int, nlinks: int) -> Ints:
    """(hop, link) of every entry of the ops' routes (ops hop-major) as one integer."""
    return np.repeat(np.arange(hops), len(safe) // hops)[:, None] * (nlinks + 1) + safe
