"""Plans that only move bytes and reduce run in the C extension: a rank's local copies,
cross-memory reads of peers' buffers, writes into peers' outputs (and the fused
copy-and-push of `push.push_copies`), both sides of a shared transfer (`push.share_transfers`: C
counts the pieces each side has done), copies out of and reductions with a peer's shared
buffer (as this process maps it: staged plans), reductions of what cross-memory attach reads
from a peer's own buffer, piece by piece through a cache-sized buffer (direct plans; with
`push.push_results`, each piece written into the peer's output as it is reduced), and pure
waits go to `_stream.Waits.run_plan` as one small int64 program per (plan, rank), so a large
all-to-all, all-gather, broadcast, gather or scatter, or an all-reduce, is one C call instead
of one Python call per action (or per piece), the GIL released while it copies and reduces
(numpy's ufunc semantics, bit for bit).

The program numbers the same actions and publishes the same counters as the Python
interpreter (`interpret`), so ranks running either mix freely. C waits for late peers itself
(a spin, then sleeps on the peer's counter) and checks each peer's call descriptor against
this rank's; it returns to Python only where a peer stays late beyond `WAIT_NS`, or its
descriptor differs (or its shared buffer grew): the transport's `_await` then waits (with
liveness and deadline checks), checks or maps, and the program resumes at that row. Dtypes
and ops C does not reduce stay in Python.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TransportError
from . import memcopy
from .actions import (IN, OUT, PEER, PEER_IN, PEER_OUT, SHM, Action, Loc, fused_push,
                      fused_result_push)
from .shm_control import PROG
from .shm_ll import LL_DTYPES

if TYPE_CHECKING:
    from .interpret import Interpreter
    from .plan import ActionPlan

# row kinds, as `_stream.c` has them
(NOTHING, COPY, READ, WRITE, COPY_PUSH, REDUCE, SHARED_READ, SHARED_WRITE, REDUCE_PEER,
 REDUCE_PEER_PUSH) = range(10)
# what C reduces: dtypes as `_stream.c` numbers them (the small-message path's), and ops
C_OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 0}  # avg: a sum, divided where
AVG_COMPLETE = 4  # C's op for an average's complete reductions: sum, then divide by P
ROW = 11  # int64 fields per row (see `_stream.c`)
# a late peer: spin as the transport's waits do (`shm_wait.SPIN_S`), then sleep on its
# counter for up to WAIT_NS in all before Python checks it is alive and waits
WAIT_NS = 20e6
_LOCAL = (SHM, IN, OUT)
_SHMS = (SHM, IN, OUT, PEER)  # read in place: this rank's arrays, a peer's shared buffer

# (rows, deps, the local locations the rows use: SHM, IN, OUT)
Program = tuple[np.ndarray, np.ndarray, frozenset]


def compile_row(actions: tuple[Action, ...], isz: int, reduce: int = -1,
                avg: bool = False) -> Program | None:
    """This rank's actions as a C program, or None if one of them is not a plain move or a
    local reduction C does; `reduce`: C's dtype << 8 | op << 4 for them (-1: none); `avg`:
    an average, whose `complete` reductions divide (C's op AVG_COMPLETE)."""
    rows: list[list[int]] = []
    deps: list[tuple[int, int]] = []
    i = 0
    while i < len(actions):
        a = actions[i]
        nxt = actions[i + 1] if i + 1 < len(actions) else None
        kind = _kind(a, reduce >= 0)
        if kind is None:
            return None
        dep, peer, push_off = list(a.deps), a.peer, 0
        if kind in (REDUCE, REDUCE_PEER):  # the current value's place, C's dtype and op
            op = AVG_COMPLETE << 4 if avg and a.complete else 0
            push_off = a.cur_off * isz << 12 | reduce | op | int(a.cur)
        if kind == REDUCE_PEER and fused_result_push(a, nxt):
            kind = REDUCE_PEER_PUSH  # C writes each piece into the peer (the next row) too
        if a.share and kind in (READ, WRITE):  # one side of a shared transfer: piece bytes
            kind, push_off = (SHARED_READ if kind == READ else SHARED_WRITE), a.share * isz
        if kind == COPY and fused_push(a, nxt) and nxt is not None:
            kind, peer, push_off = COPY_PUSH, nxt.peer, nxt.dst_off * isz
            dep += nxt.deps
            i += 1
        rows.append([kind, peer, int(a.src), a.src_off * isz, int(a.dst), a.dst_off * isz,
                     a.n * isz, len(deps), len(dep), i + 1, push_off])
        deps += dep
        i += 1
    used = frozenset(loc for r in rows for loc in (r[2], r[4]) if loc in _LOCAL)
    return (np.array(rows, np.int64).reshape(-1, ROW),
            np.array(deps, np.int64).reshape(-1, 2), used)


def _kind(a: Action, reduces: bool) -> int | None:
    if a.n == 0:
        return NOTHING
    if a.reduce:
        if not (reduces and a.dst in _LOCAL and a.cur in _LOCAL):
            return None
        if a.src in (PEER_IN, PEER_OUT):  # read by cross-memory attach, piece by piece
            return REDUCE_PEER
        return REDUCE if a.src in _SHMS else None
    if a.src in _SHMS and a.dst in _LOCAL:
        return COPY
    if a.src in (PEER_IN, PEER_OUT) and a.dst in _LOCAL:
        return READ
    if a.src in _LOCAL and a.dst == PEER_OUT:
        return WRITE
    return None  # a peer's shared buffer: the interpreter maps and reads it


class CPlans:
    """The C programs of one interpreter's plans (by plan identity; None: not for C), for
    calls of `dtype` and `op`."""

    def __init__(self, dtype: str = "float32", op: str = "sum") -> None:
        self._cache: dict[int, tuple[ActionPlan, Program | None]] = {}
        ok = dtype in LL_DTYPES and op in C_OPS
        self._reduce = LL_DTYPES.index(dtype) << 8 | C_OPS[op] << 4 if ok else -1
        self._avg = op == "avg"

    def get(self, plan: ActionPlan, rank: int, isz: int) -> Program | None:
        hit = self._cache.get(id(plan))
        if hit is None or hit[0] is not plan:
            if len(self._cache) > 256:
                self._cache.clear()
            prog = compile_row(plan.actions[rank], isz, self._reduce, self._avg)
            hit = self._cache[id(plan)] = (plan, prog)
        return hit[1]


def run(it: Interpreter, prog: Program, row: int = 0,
        stopped: tuple[int, int] | None = None) -> None:
    """Run program `prog` of the interpreter's call in C, waiting in Python where C gives
    back; `row` and `stopped` = (status, detail): resume a call C stopped at that row with
    that status (`shm_fast`)."""
    tr, c = it.tr, it.call
    rows, deps, used = prog
    for loc in used:
        if c.arrs[loc] is None:
            raise TransportError(f"rank {tr.rank}: its plan uses a {Loc(loc).text} "
                                 f"buffer this rank passed none of")
    shm = c.arrs[SHM]
    addrs = (memcopy.address(shm) if SHM in used and shm is not None else 0,
             max(c.in_addr, 0), max(c.out_addr, 0))  # the used ones are there (above)
    stream_min = c.plan.stream_min_bytes
    while True:
        if stopped is None:
            checked = bytearray(c.checked)
            status, row, detail = tr._waiter.run_plan(rows, deps, row, c.seq, addrs, checked,
                                                      stream_min, it.piece * it.isz,
                                                      tr._spin_s * 1e9, WAIT_NS)
            for q, ok in enumerate(checked):
                c.checked[q] = bool(ok)
        else:
            (status, detail), stopped = stopped, None
        if status == 0:
            return
        if status == 2:
            _failed(it, detail >> 16, detail & 0xFFFF, int(rows[row][0]))
        # the row C stopped at waits for these (a fused reduction: its push's too)
        last = row + 1 if int(rows[row][0]) == REDUCE_PEER_PUSH else row
        first, end = int(rows[row][7]), int(rows[last][7] + rows[last][8])
        it._await([(q, k) for q, k in deps[first:end].tolist()])


def _failed(it: Interpreter, q: int, err: int, kind: int) -> None:
    """A cross-memory copy failed: name the rank if it died, else say what failed."""
    it.tr._check_alive(q, 1 << 62, PROG)
    what, verb = ("writing", "write") if kind in (WRITE, COPY_PUSH, SHARED_WRITE) else \
        ("reading or writing", "read or write") if kind == REDUCE_PEER_PUSH else ("reading", "read")
    raise TransportError(f"rank {it.tr.rank}: {what} rank {q}'s buffer: cross-memory "
                         f"{verb} failed: {os.strerror(err)}")
