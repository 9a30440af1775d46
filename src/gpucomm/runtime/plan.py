"""Compile a Schedule into one ordered action list per rank, for a *pull* transport.

A pull transport lets each rank execute the ops whose destination it is, reading the source
chunk straight out of the peer's shared buffer. So every rank writes only its own buffer, runs
its actions in order, and publishes one counter: how many of its actions are done. The data
flow dependencies of the schedule then become "peer q has done its first k actions":

- read after write: an op reading (q, chunk) waits for q's action that last wrote the chunk;
- write after read: an op overwriting (r, chunk) waits for every peer that read the chunk's old
  value to have finished that read.

Where the data lives is planned too, to move as few bytes as possible: an input chunk is
copied into shared memory only if a peer reads it before the owner overwrites it; a first
reduction reads the user's input directly; a chunk's final value goes straight into the
user's output unless a peer still reads it; large chunks are cut into slices so consecutive
actions pipeline (a peer starts on slice 0 while slice 1 is still being written) and the
copy-out of a slice happens while it is still in cache.

`compile_plan` runs the passes of `passes`, then the rewrites of `push`, then numbers the
dependencies once (`actions.lower`). `plan_call` is the one place that turns the runtime's
options into compile arguments: the shm transport and bench's predictor both call it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..schedule import Schedule
from . import memcopy
from .actions import IN, OUT, PEER, Action, lower
from .options import RuntimeOptions
from .passes import (SliceMap, Tracker, copy_ins, drop_empty, fill_outputs, lower_steps,
                     tail_waits, versions)
from .push import (SHARE_MIN_BYTES, push_copies, push_from_idle, push_results, push_split,
                   share_transfers)


@dataclass(frozen=True)
class ActionPlan:
    """What every rank executes for one call: `actions[r]` is rank r's tuple of `Action`s."""
    schedule_key: tuple
    nranks: int
    block_count: int
    shm_elems: int  # size of each rank's shared logical buffer, in elements
    actions: tuple  # per rank: tuple of Action
    peers_read: tuple  # per rank: frozenset of peers whose buffers it reads
    direct: bool = False  # peers read owners' own buffers (cross-memory), nothing staged
    # per rank: whether a peer reads its shared buffer (so its next call, which may rewrite
    # it, waits for every peer to end this one first; peers' reads of user buffers are
    # waited for within the call, `passes.tail_waits`)
    shm_read: tuple = ()
    # local copies of this many bytes and more stream past the cache (`memcopy`; -1: none),
    # as `plan_call` sets it from the options
    stream_min_bytes: int = -1

    def describe(self, rank: int) -> str:
        return "\n".join(f"{i}: {a.describe()}" for i, a in enumerate(self.actions[rank]))


def schedule_key(s: Schedule) -> tuple:
    return (s.collective.name, s.algorithm, s.nranks, s.root, s.params, s.chunks_per_block,
            s.scratch_blocks)


def compile_plan(schedule: Schedule, block_count: int, slice_elems: int = 1 << 16,
                 direct: bool = False, push_root: int | None = None,
                 push: bool = True, stream: bool = True, share_min: int = 0) -> ActionPlan:
    """The per-rank action lists of `schedule` for blocks of `block_count` elements.

    `direct`: peers read a value wherever its owner keeps it, its private input and output
    included (the transport copies those with cross-memory attach), so nothing is staged in
    shared memory for peers; a rank then ends only after every peer finished reading its
    buffers.

    `push_root` (with `direct`): that rank calls in place (its input is its output), so its
    local input-to-output copies are no-ops; if it then has nothing else to do (the root of a
    broadcast), it *writes* a share of every chunk that peers read from it into their outputs
    while they read the rest: two cores copy instead of one (see `push.push_split`). On 2 ranks a
    reduced range the peer reads is written into the peer by its reducer (`push.push_results`),
    a rank with nothing of its own to move writes what the peer would read of it
    (`push.push_from_idle`: a gather's non-root), and, where the transport's large copies
    `stream` past the cache, a block a rank copies locally is written into the peer right
    after (`push.push_copies`; with plain copies that costs more than the peer's read:
    measured 1.5-1.9 ms against 1.2-1.45 ms, 16 MiB all-gather). Where both read a block of
    each other and `share_min` is set, the two transfers are shared, in 8 pieces of at least
    `share_min` elements each (`push.share_transfers`).
    `push=False` turns all of them off (plain pull plans).

    >>> from gpucomm.algorithms import build
    >>> print(compile_plan(build("all_reduce", "ring", 2), 4).describe(0))
    0: shm[0:+2] = in[0:+2]
    1: shm[2:+2] = in[2] op r1.shm[2]  after r1>=1
    2: out[2:+2] = shm[2:+2]
    3: out[0:+2] = r1.shm[0:+2]  after r1>=2
    """
    lay = SliceMap.of(schedule, block_count, slice_elems)
    ver = versions(lay)
    t = Tracker.start(lay)
    if not direct:
        copy_ins(lay, ver, t)
    lower_steps(lay, ver, t, direct)
    fill_outputs(lay, ver, t)
    tail_waits(lay, t)
    ops = t.ops
    if direct and push and push_root is not None:
        ops = push_split(ops, push_root, lay.in_rng[push_root], lay.out_rng[push_root])
    if direct and push and lay.nranks == 2:
        ops = push_results(ops, lay.in_rng, lay.out_rng)
        ops = push_from_idle(ops, lay.in_rng, lay.out_rng)
        if stream:
            ops = push_copies(ops, lay.in_rng, lay.out_rng)
        if share_min:
            ops = share_transfers(ops, lay.in_rng, lay.out_rng, share_min)
    rows = lower(drop_empty(ops))
    peers = tuple(frozenset(a.peer for a in row if a.src >= PEER) for row in rows)
    shm_read = {a.peer for row in rows for a in row if a.src == PEER}
    return ActionPlan(schedule_key(schedule), lay.nranks, block_count, lay.bounds[-1], rows,
                      peers, direct, tuple(r in shm_read for r in range(lay.nranks)))


def is_direct(schedule: Schedule, block_count: int, itemsize: int, options: RuntimeOptions,
              cma: bool) -> bool:
    """Are this call's chunks large enough to be read from peers' own buffers (and may they)?
    All-to-all's from `a2a_direct_min_bytes` (one reader per chunk), the rest from
    `direct_min_bytes` on 2 ranks, `many_direct_min_bytes` on more."""
    chunk_bytes = block_count * itemsize // schedule.chunks_per_block
    least = options.a2a_direct_min_bytes if schedule.collective.name == "all_to_all" else \
        options.direct_min_bytes if schedule.nranks <= 2 else options.many_direct_min_bytes
    return cma and chunk_bytes >= least


def plan_call(schedule: Schedule, block_count: int, itemsize: int, options: RuntimeOptions,
              cma: bool, in_place_root: bool = False) -> ActionPlan:
    """The plan the shm runtime runs for one call, under `options`, where cross-memory
    attach works (`cma`, which the options can also turn off); `in_place_root`: the
    schedule's root calls in place (every rank must agree)."""
    direct = is_direct(schedule, block_count, itemsize, options, cma and options.cma)
    # Direct reads need no pipelining through staging slices: big pieces make fewer calls and
    # let large copies use non-temporal stores.
    slice_bytes = options.direct_slice_bytes if direct else options.slice_bytes
    plan = compile_plan(schedule, block_count, slice_elems=max(1, slice_bytes // itemsize),
                        direct=direct,
                        push_root=schedule.root if in_place_root else None,
                        push=options.push, stream=memcopy.streams(options),
                        share_min=max(1, SHARE_MIN_BYTES // itemsize))
    return replace(plan, stream_min_bytes=stream_min_bytes(schedule, block_count * itemsize,
                                                           options, direct))


def stream_min_bytes(schedule: Schedule, block_bytes: int, options: RuntimeOptions,
                     direct: bool) -> int:
    """From which size a direct plan's local copies stream (-1: never): `stream_min_bytes`,
    but a 2-rank all-to-all's never where both ranks' inputs and outputs (8 blocks) come to
    less than `a2a_stream_min_bytes` (they fit in cache, where a cached copy is faster).
    With more ranks the copies stream as before: 4 ranks sharing this host's 2 cores ran a
    2 MiB all-to-all (16 MiB in all) 2-15% slower cached (notes/28-rt12)."""
    least = memcopy.stream_min_bytes(options)
    if not direct or least < 0:
        return -1
    if schedule.collective.name == "all_to_all" and schedule.nranks == 2 and \
            8 * block_bytes < options.a2a_stream_min_bytes:
        return -1
    return least


def own_block_in_place(plan: ActionPlan, rank: int) -> ActionPlan:
    """`plan` for a rank whose output already holds its own block of the input (an all-to-all
    called in place, the input's other blocks copied aside: `shm_control.unalias`): its
    copies from input to output at equal offsets (its own block's) become pure waits, with
    the same dependencies, so the action counts its peers wait on stay."""
    acts = tuple(a._replace(n=0) if a.src == IN and a.dst == OUT and not a.reduce
                 and a.src_off == a.dst_off else a for a in plan.actions[rank])
    return replace(plan, actions=plan.actions[:rank] + (acts,) + plan.actions[rank + 1:])


__all__ = ["Action", "ActionPlan", "compile_plan", "is_direct", "own_block_in_place",
           "plan_call", "schedule_key"]
