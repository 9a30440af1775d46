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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import Schedule

from .actions import IN, LOC_NAMES, OUT, PEER, PEER_IN, PEER_LOC, PEER_OUT, SHM, Action
from .push import push_copies, push_results, push_split


@dataclass(frozen=True)
class Plan:
    schedule_key: tuple
    nranks: int
    block_count: int
    shm_elems: int  # size of each rank's shared logical buffer, in elements
    actions: tuple  # per rank: tuple of Action.as_tuple() rows
    peers_read: tuple  # per rank: frozenset of peers whose buffers it reads
    direct: bool = False  # peers read owners' own buffers (cross-memory), nothing staged

    def describe(self, rank: int) -> str:
        lines = []
        for i, (red, sl, sr, slo, dl, dlo, n, cl, clo, deps) in enumerate(self.actions[rank]):
            src = {PEER: f"r{sr}.shm", PEER_IN: f"r{sr}.in", PEER_OUT: f"r{sr}.out"}.get(
                sl, LOC_NAMES[sl])
            dst = f"r{sr}.out" if dl == PEER_OUT else LOC_NAMES[dl]
            if dl == PEER_OUT:
                what = f"{dst}[{dlo}:+{n}] = {LOC_NAMES[sl]}[{slo}:+{n}]"
            elif red:
                what = f"{dst}[{dlo}:+{n}] = {LOC_NAMES[cl]}[{clo}] op {src}[{slo}]"
            else:
                what = f"{dst}[{dlo}:+{n}] = {src}[{slo}:+{n}]"
            dep = ", ".join(f"r{q}>={k}" for q, k in deps)
            lines.append(f"{i}: {what}" + (f"  after {dep}" if dep else ""))
        return "\n".join(lines)


def schedule_key(s: Schedule) -> tuple:
    return (s.collective.name, s.algorithm, s.nranks, s.root, s.params, s.chunks_per_block,
            s.scratch_blocks)


def compile_plan(schedule: Schedule, block_count: int, slice_elems: int = 1 << 16,
                 direct: bool = False, push_root: int | None = None,
                 push: bool = True, stream: bool = True) -> Plan:
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
    and, where the transport's large copies `stream` past the cache, a block a rank copies
    locally is written into the peer right after (`push.push_copies`; with plain copies that
    costs more than the peer's read: measured 1.5-1.9 ms against 1.2-1.45 ms, 16 MiB
    all-gather). `push=False` turns all of them off (plain pull plans).

    >>> from gpucomm.algorithms import build
    >>> plan = compile_plan(build("all_reduce", "ring", 2), 4)
    >>> len(plan.actions[0]) > 0
    True
    """
    coll, p, root = schedule.collective, schedule.nranks, schedule.root
    bounds = schedule.chunk_bounds(block_count).tolist()
    nchunks = len(bounds) - 1
    steps = [list(zip(*(c.tolist() for c in st.columns()[:6]))) for st in schedule.steps()]

    in_rng = [_elem_range(coll.inputs(r, p, root), block_count) for r in range(p)]
    out_rng = [_elem_range(coll.outputs(r, p, root), block_count) for r in range(p)]

    # Pass 1: which value versions of each (rank, chunk) a peer reads; the final version.
    ver = np.zeros((p, nchunks), dtype=np.int64)
    peer_read = set()  # (rank, chunk, version)
    for ops in steps:
        for s, d, sc, dc, n, _ in ops:
            for j in range(n):
                if s != d:
                    peer_read.add((s, sc + j, int(ver[s, sc + j])))
            for j in range(n):
                ver[d, dc + j] += 1
    final = ver.copy()

    # Pass 2: actions. Chunks are cut into slices of at most `slice_elems` elements.
    def slices(c):
        lo, hi = bounds[c], bounds[c + 1]
        k = max(1, -(-(hi - lo) // slice_elems))
        cuts = [lo + (hi - lo) * i // k for i in range(k + 1)]
        return list(zip(cuts[:-1], cuts[1:]))

    chunk_slices = [slices(c) for c in range(nchunks)]
    acts = [[] for _ in range(p)]
    # per (rank, chunk, slice index): current location and last shm writer (action count)
    loc = [[[IN if _inside(in_rng[r], bounds[c]) else SHM for _ in chunk_slices[c]]
            for c in range(nchunks)] for r in range(p)]
    writer = [[[0] * len(chunk_slices[c]) for c in range(nchunks)] for r in range(p)]
    readers = [[[[] for _ in chunk_slices[c]] for c in range(nchunks)] for r in range(p)]
    cur_ver = np.zeros((p, nchunks), dtype=np.int64)

    def off(where, r, lo):
        if where == IN:
            return lo - in_rng[r][0]
        if where == OUT:
            return lo - out_rng[r][0]
        return lo

    # Copy-ins: input chunks a peer reads before their owner overwrites them, in the order
    # peers first need them.
    first_need, copied_out = {}, set()
    user_readers = [dict() for _ in range(p)]  # owner -> {peer: its last action reading us}
    for si, ops in enumerate(steps):
        for s, d, sc, dc, n, _ in ops:
            for j in range(n):
                key = (s, sc + j)
                if s != d and (s, sc + j, 0) in peer_read and key not in first_need:
                    first_need[key] = si
    for (r, c), _ in sorted(first_need.items(), key=lambda kv: (kv[1], kv[0][1])):
        if direct:
            break
        if not _inside(in_rng[r], bounds[c]):
            continue  # a don't-care value: nothing to copy
        out_too = final[r, c] == 0 and _inside(out_rng[r], bounds[c])
        for k, (lo, hi) in enumerate(chunk_slices[c]):
            acts[r].append(Action(False, IN, r, off(IN, r, lo), SHM, lo, hi - lo, SHM, lo, ()))
            loc[r][c][k] = SHM
            writer[r][c][k] = len(acts[r])
            if out_too:  # an unchanged output chunk: copy it out while the input is cached
                acts[r].append(Action(False, IN, r, off(IN, r, lo), OUT, off(OUT, r, lo),
                                      hi - lo, OUT, 0, ()))
        if out_too:
            copied_out.add((r, c))

    for ops in steps:
        for s, d, sc, dc, n, red in ops:
            for j in range(n):
                cs, cd = sc + j, dc + j
                v = int(cur_ver[d, cd]) + 1
                last = v == final[d, cd]
                if not (last and _inside(out_rng[d], bounds[cd])):
                    target = SHM
                elif (d, cd, v) in peer_read and not direct:
                    target = SHM
                else:
                    target = OUT
                for k, ((slo, shi), (dlo, _)) in enumerate(zip(chunk_slices[cs],
                                                               chunk_slices[cd])):
                    deps = {}
                    if s != d:
                        src_loc = PEER_LOC[loc[s][cs][k]]
                        src_off = off(loc[s][cs][k], s, slo)
                        deps[s] = max(deps.get(s, 0), writer[s][cs][k])
                        readers[s][cs][k].append((d, len(acts[d]) + 1))
                        if src_loc != PEER:
                            user_readers[s][d] = len(acts[d]) + 1
                    else:
                        src_loc = loc[d][cs][k]
                        src_off = off(src_loc, d, slo)
                    for q, cnt in readers[d][cd][k]:
                        if q != d:
                            deps[q] = max(deps.get(q, 0), cnt)
                    readers[d][cd][k] = []
                    cur = loc[d][cd][k]
                    acts[d].append(Action(bool(red), src_loc, s, src_off, target,
                                          off(target, d, dlo), shi - slo, cur, off(cur, d, dlo),
                                          tuple(sorted(deps.items()))))
                    loc[d][cd][k] = target
                    writer[d][cd][k] = len(acts[d])
                    if last and target == SHM and _inside(out_rng[d], bounds[cd]):
                        # final value that a peer still reads: copy it out while it is hot
                        acts[d].append(Action(False, SHM, d, dlo, OUT, off(OUT, d, dlo),
                                              shi - slo, OUT, 0, ()))
                cur_ver[d, cd] = v

    # Output chunks that no op wrote keep their input (or copied-in) value.
    for r in range(p):
        for c in range(nchunks):
            if final[r, c] or not _inside(out_rng[r], bounds[c]) or (r, c) in copied_out:
                continue
            for k, (lo, hi) in enumerate(chunk_slices[c]):
                where = loc[r][c][k]
                acts[r].append(Action(False, where, r, off(where, r, lo), OUT, off(OUT, r, lo),
                                      hi - lo, OUT, 0, ()))

    for r in range(p):  # a peer still reading our user buffers: they stay ours till it ends
        if user_readers[r]:
            acts[r].append(Action(False, SHM, r, 0, SHM, 0, 0, SHM, 0,
                                  tuple(sorted(user_readers[r].items()))))

    if direct and push and push_root is not None:
        acts = push_split(acts, push_root, in_rng[push_root], out_rng[push_root])
    if direct and push and p == 2:
        acts = push_results(acts, in_rng, out_rng)
        if stream:
            acts = push_copies(acts, in_rng, out_rng)
    rows = tuple(tuple(a.as_tuple() for a in acts[r] if a.n > 0 or a.deps) for r in range(p))
    # dropping empty actions shifts indices: recompile indices only when something was dropped
    if any(len(rows[r]) != len(acts[r]) for r in range(p)):
        rows = _drop_empty(acts)
    peers = tuple(frozenset(a[2] for a in rows[r] if a[1] in (PEER, PEER_IN, PEER_OUT))
                  for r in range(p))
    return Plan(schedule_key(schedule), p, block_count, bounds[-1], rows, peers, direct)


def _drop_empty(acts) -> tuple:
    """Remove zero-length actions without deps, renumbering the dependency counts."""
    keep = [[a.n > 0 or bool(a.deps) for a in acts[r]] for r in range(len(acts))]
    # new count after k original actions = number kept among the first k
    newcount = [np.concatenate([[0], np.cumsum(k)]).tolist() for k in keep]
    rows = []
    for r, lst in enumerate(acts):
        out = []
        for a, kp in zip(lst, keep[r]):
            if not kp:
                continue
            deps = tuple((q, newcount[q][c]) for q, c in a.deps)
            out.append(Action(a.reduce, a.src_loc, a.src_rank, a.slo, a.dst_loc, a.dlo, a.n,
                              a.cur_loc, a.clo, deps).as_tuple())
        rows.append(tuple(out))
    return tuple(rows)


def _elem_range(block_range, block_count):
    if block_range is None:
        return None
    return (block_range[0] * block_count, (block_range[0] + block_range[1]) * block_count)


def _inside(rng, elem) -> bool:
    return rng is not None and rng[0] <= elem < rng[1]
