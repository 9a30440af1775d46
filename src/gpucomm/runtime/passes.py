"""The passes that turn a Schedule into per-rank op lists for a *pull* transport (`plan`
runs them in order; each is a plain function of the `SliceMap` and the `Tracker`):

1. `versions`: which value versions of each (rank, chunk) a peer reads, and the final one;
2. `copy_ins`: input chunks a peer reads before their owner overwrites them go to shared
   memory first (skipped in direct plans, where peers read the owner's input itself);
3. `lower_steps`: every op of every step becomes one op per slice on its destination rank,
   with its read-after-write and write-after-read dependencies;
4. `fill_outputs`: output chunks no op wrote keep their input (or copied-in) value;
5. `tail_waits`: a rank whose user buffers a peer reads waits for the peer's last read.

Dependencies are references to ops (`actions.Op`); `actions.lower` numbers them at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..schedule import Schedule
from .actions import IN, OUT, PEER, SHM, Entry, Loc, Op


@dataclass(frozen=True)
class SliceMap:
    """Where everything is, in elements: the chunks of the logical buffer, each cut into
    slices of at most `slice_elems`, and each rank's input and output ranges in it."""
    nranks: int
    bounds: tuple  # chunk c spans bounds[c]:bounds[c + 1]
    slices: tuple  # per chunk: ((lo, hi), ...)
    in_rng: tuple  # per rank: (lo, hi) or None
    out_rng: tuple
    steps: tuple  # per step: ((src, dst, src_chunk, dst_chunk, nchunks, reduce), ...)

    @classmethod
    def of(cls, schedule: Schedule, block_count: int, slice_elems: int) -> "SliceMap":
        coll, p, root = schedule.collective, schedule.nranks, schedule.root
        bounds = tuple(schedule.chunk_bounds(block_count).tolist())
        slices = tuple(_cut(bounds[c], bounds[c + 1], slice_elems)
                       for c in range(len(bounds) - 1))
        steps = tuple(tuple(zip(*(c.tolist() for c in st.columns()[:6])))
                      for st in schedule.steps())
        return cls(p, bounds, slices,
                   tuple(_elem_range(coll.inputs(r, p, root), block_count) for r in range(p)),
                   tuple(_elem_range(coll.outputs(r, p, root), block_count) for r in range(p)),
                   steps)

    @property
    def nchunks(self) -> int:
        return len(self.bounds) - 1

    def is_input(self, r: int, c: int) -> bool:
        return _inside(self.in_rng[r], self.bounds[c])

    def is_output(self, r: int, c: int) -> bool:
        return _inside(self.out_rng[r], self.bounds[c])

    def offset(self, where: Loc, r: int, lo: int) -> int:
        """Element `lo` of the logical buffer, relative to the array at `where` on rank r."""
        if where == IN:
            return lo - self.in_rng[r][0]
        if where == OUT:
            return lo - self.out_rng[r][0]
        return lo


@dataclass(frozen=True)
class Versions:
    """`final[r, c]`: how many times chunk c of rank r is written; `peer_read`: the
    (rank, chunk, version) values some other rank reads."""
    final: np.ndarray
    peer_read: frozenset


@dataclass
class Tracker:
    """The state of every (rank, chunk, slice) while ops are emitted: where its current value
    is, the op that wrote it there, and the ops of peers that read it since."""
    ops: list  # per rank: its op list so far
    loc: list  # [r][c][k] -> Loc
    writer: list  # [r][c][k] -> Op or Entry
    readers: list  # [r][c][k] -> [Op of a peer]
    user_readers: list = field(default_factory=list)  # [r] -> {peer: its last op reading r}
    copied_out: set = field(default_factory=set)  # (r, c) whose output copy-ins wrote

    @classmethod
    def start(cls, lay: SliceMap) -> "Tracker":
        p, sl = lay.nranks, lay.slices
        return cls([[] for _ in range(p)],
                   [[[IN if lay.is_input(r, c) else SHM for _ in sl[c]]
                     for c in range(lay.nchunks)] for r in range(p)],
                   [[[Entry(r)] * len(sl[c]) for c in range(lay.nchunks)] for r in range(p)],
                   [[[[] for _ in sl[c]] for c in range(lay.nchunks)] for r in range(p)],
                   [dict() for _ in range(p)])

    def emit(self, op: Op) -> Op:
        self.ops[op.rank].append(op)
        return op


def versions(lay: SliceMap) -> Versions:
    """Pass 1: count the writes of every (rank, chunk) and note which versions peers read."""
    ver = np.zeros((lay.nranks, lay.nchunks), dtype=np.int64)
    peer_read = set()
    for ops in lay.steps:
        for s, d, sc, dc, n, _ in ops:
            for j in range(n):
                if s != d:
                    peer_read.add((s, sc + j, int(ver[s, sc + j])))
            for j in range(n):
                ver[d, dc + j] += 1
    return Versions(ver, frozenset(peer_read))


def copy_ins(lay: SliceMap, ver: Versions, t: Tracker) -> None:
    """Pass 2: input chunks a peer reads before their owner overwrites them, copied into
    shared memory in the order peers first need them; an unchanged output chunk is copied
    out in the same breath, while the input is cached."""
    first_need: dict = {}
    for si, ops in enumerate(lay.steps):
        for s, d, sc, _, n, _ in ops:
            for j in range(n):
                key = (s, sc + j)
                if s != d and (s, sc + j, 0) in ver.peer_read and key not in first_need:
                    first_need[key] = si
    for (r, c), _ in sorted(first_need.items(), key=lambda kv: (kv[1], kv[0][1])):
        if not lay.is_input(r, c):
            continue  # a don't-care value: nothing to copy
        out_too = ver.final[r, c] == 0 and lay.is_output(r, c)
        for k, (lo, hi) in enumerate(lay.slices[c]):
            src_off = lay.offset(IN, r, lo)
            t.writer[r][c][k] = t.emit(Op(rank=r, src=IN, peer=r, src_off=src_off, dst=SHM,
                                          dst_off=lo, n=hi - lo, cur=SHM, cur_off=lo))
            t.loc[r][c][k] = SHM
            if out_too:
                t.emit(Op(rank=r, src=IN, peer=r, src_off=src_off, dst=OUT,
                          dst_off=lay.offset(OUT, r, lo), n=hi - lo, cur=OUT))
        if out_too:
            t.copied_out.add((r, c))


def lower_steps(lay: SliceMap, ver: Versions, t: Tracker, direct: bool) -> None:
    """Pass 3: each op of each step, slice by slice, on the rank it writes. A reduction
    whose result then counts every rank's contribution is `complete` (where an average
    divides)."""
    cur_ver = np.zeros((lay.nranks, lay.nchunks), dtype=np.int64)
    # how many ranks' inputs each (rank, chunk) value sums (a correct schedule never counts
    # one twice)
    held = np.array([[int(lay.is_input(r, c)) for c in range(lay.nchunks)]
                     for r in range(lay.nranks)], dtype=np.int64)
    for ops in lay.steps:
        for s, d, sc, dc, n, red in ops:
            for j in range(n):
                cs, cd = sc + j, dc + j
                held[d, cd] = held[d, cd] + held[s, cs] if red else held[s, cs]
                complete = bool(red) and held[d, cd] == lay.nranks
                v = int(cur_ver[d, cd]) + 1
                last = v == ver.final[d, cd]
                final_out = last and lay.is_output(d, cd)
                # a final value goes straight to the output, unless a peer still reads it
                # from shared memory
                target = OUT if final_out and (direct or (d, cd, v) not in ver.peer_read) \
                    else SHM
                for k in range(len(lay.slices[cs])):
                    _emit_slice(lay, t, s, d, (cs, cd, k), bool(red), target, complete)
                    if final_out and target == SHM:  # read by a peer: copy out while hot
                        (slo, shi), (dlo, _) = lay.slices[cs][k], lay.slices[cd][k]
                        t.emit(Op(rank=d, src=SHM, peer=d, src_off=dlo, dst=OUT,
                                  dst_off=lay.offset(OUT, d, dlo), n=shi - slo, cur=OUT))
                cur_ver[d, cd] = v


def _emit_slice(lay: SliceMap, t: Tracker, s: int, d: int, where: tuple, red: bool,
                target: Loc, complete: bool = False) -> None:
    """dst (d, chunk cd, slice k) = [its value (op)] (s, chunk cs, slice k)."""
    cs, cd, k = where
    (slo, shi), (dlo, _) = lay.slices[cs][k], lay.slices[cd][k]
    op = Op(rank=d, reduce=red, src=SHM, peer=s, src_off=0, dst=target,
            dst_off=lay.offset(target, d, dlo), n=shi - slo, cur=t.loc[d][cd][k],
            cur_off=lay.offset(t.loc[d][cd][k], d, dlo), complete=complete)
    deps = op.deps
    if s != d:  # read after write: the peer's last write of the source
        held = t.loc[s][cs][k]
        op.src, op.src_off = held.of_peer, lay.offset(held, s, slo)
        deps.append(t.writer[s][cs][k])
        t.readers[s][cs][k].append(op)
        if op.src != PEER:
            t.user_readers[s][d] = op
    else:
        op.src = t.loc[d][cs][k]
        op.src_off = lay.offset(op.src, d, slo)
    # write after read: every peer that read the old value has done so
    deps += [q_op for q_op in t.readers[d][cd][k] if q_op.rank != d]
    t.readers[d][cd][k] = []
    t.emit(op)
    t.loc[d][cd][k] = target
    t.writer[d][cd][k] = op


def fill_outputs(lay: SliceMap, ver: Versions, t: Tracker) -> None:
    """Pass 4: output chunks that no op wrote keep their input (or copied-in) value."""
    for r in range(lay.nranks):
        for c in range(lay.nchunks):
            if ver.final[r, c] or not lay.is_output(r, c) or (r, c) in t.copied_out:
                continue
            for k, (lo, hi) in enumerate(lay.slices[c]):
                where = t.loc[r][c][k]
                t.emit(Op(rank=r, src=where, peer=r, src_off=lay.offset(where, r, lo), dst=OUT,
                          dst_off=lay.offset(OUT, r, lo), n=hi - lo, cur=OUT))


def tail_waits(lay: SliceMap, t: Tracker) -> None:
    """Pass 5: a peer still reading our user buffers: they stay ours till it is done."""
    for r in range(lay.nranks):
        if t.user_readers[r]:
            t.emit(Op.wait(r, r, [t.user_readers[r][q] for q in sorted(t.user_readers[r])]))


def drop_empty(ranks: list) -> list:
    """Remove zero-length ops without dependencies (references to one mean the op before)."""
    out = []
    for row in ranks:
        kept: list = []
        for op in row:
            if op.n > 0 or op.deps:
                kept.append(op)
            else:
                op.stands_for = kept[-1] if kept else Entry(op.rank)
        out.append(kept)
    return out


def _cut(lo: int, hi: int, slice_elems: int) -> tuple:
    k = max(1, -(-(hi - lo) // slice_elems))
    cuts = [lo + (hi - lo) * i // k for i in range(k + 1)]
    return tuple(zip(cuts[:-1], cuts[1:]))


def _elem_range(block_range, block_count):
    if block_range is None:
        return None
    return (block_range[0] * block_count, (block_range[0] + block_range[1]) * block_count)


def _inside(rng, elem) -> bool:
    return rng is not None and rng[0] <= elem < rng[1]
