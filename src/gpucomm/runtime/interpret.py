"""The shm transport's interpreter: runs one rank's actions of a compiled plan for one call.

Each action waits for its dependencies, then moves its elements by one of five paths: a
cross-memory read from a peer's private buffer, a reduction piece by piece through a
cache-sized buffer (each piece pushed on to the peer at once when the next action is that
push, `push.push_results`), a cross-memory write into a peer, a local or shared-memory copy
(a streamed copy pushed on piece by piece when the next action is that push,
`push.push_copies`), or a numpy reduction. After each action (or fused pair) the rank
publishes how many it has done.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from .actions import IN, OUT, PEER, PEER_IN, PEER_OUT, Action, fused_push, fused_result_push
from .shm_control import IN_ADDR, OUT_ADDR, PROG


@dataclass
class Call:
    """One collective call in progress on this rank: what `ShmTransport._await` needs to wait
    for and check peers, and the arrays the actions' locations name."""
    schedule: object
    dtype: dt.DType
    op: str
    plan: object  # plan.ActionPlan
    seq: int
    deadline: float
    desc: tuple  # the call descriptor published in the control segment
    checked: list  # per peer: its descriptor was checked in this call
    arrs: list  # [shared buffer view, input, output], indexed by Loc SHM/IN/OUT
    in_addr: int
    out_addr: int

    @property
    def base(self) -> int:
        return self.seq << 32


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class Interpreter:
    """Runs `call.plan`'s actions of transport `tr`'s rank (see the module docstring)."""

    def __init__(self, tr, call: Call):
        self.tr, self.call = tr, call
        self.isz = call.dtype.itemsize
        reduces = call.schedule.collective.reduces
        self.ufunc = dt.UFUNCS[call.op] if reduces else None
        self.native = call.dtype.compute == call.dtype.storage
        self.piece = max(1, tr.options.piece_bytes // self.isz)
        self.copy = tr.copy_large

    def run(self) -> None:
        acts, mine, base = self.call.plan.actions[self.tr.rank], self.tr._me, self.call.base
        i = 0
        while i < len(acts):
            a, nxt = acts[i], (acts[i + 1] if i + 1 < len(acts) else None)
            if a.deps:
                self._await(a.deps)
            i += self._step(a, nxt)
            mine[PROG] = base | i

    def _await(self, deps) -> None:
        c = self.call
        self.tr._await(deps, c.checked, c.base, c.deadline, c.desc, c.schedule, c.dtype, c.op)

    def _step(self, a: Action, nxt: Action | None) -> int:
        """Run `a` (and `nxt` with it when the two are fused); how many actions were done."""
        if a.src in (PEER_IN, PEER_OUT):  # the peer's private buffer: cross-memory attach
            word = IN_ADDR if a.src == PEER_IN else OUT_ADDR
            raddr = self.tr._progs[a.peer][word] + a.src_off * self.isz
            if a.reduce:
                return self._reduce_from_peer(a, nxt, raddr)
            dst = self.call.arrs[a.dst]
            self.tr._cma(a.peer, raddr, _addr(dst) + a.dst_off * self.isz, a.n * self.isz)
            return 1
        if a.dst == PEER_OUT:  # push into the peer's output: one cross-memory write
            self.tr._cma(a.peer, self.tr._progs[a.peer][OUT_ADDR] + a.dst_off * self.isz,
                         _addr(self.call.arrs[a.src]) + a.src_off * self.isz, a.n * self.isz,
                         write=True)
            return 1
        if a.n == 0:  # a pure wait
            return 1
        src = self.tr._peer_view(a.peer, self.call.dtype) if a.src == PEER \
            else self.call.arrs[a.src]
        if a.reduce:
            self._reduce(self.call.arrs[a.cur][a.cur_off:a.cur_off + a.n],
                         src[a.src_off:a.src_off + a.n],
                         self.call.arrs[a.dst][a.dst_off:a.dst_off + a.n])
            return 1
        if fused_push(a, nxt):
            self._await(nxt.deps)
            self._copy_and_push(a, nxt, src)
            return 2
        self._copy(a, src)
        return 1

    def _reduce(self, cur: np.ndarray, other: np.ndarray, dst: np.ndarray) -> None:
        if self.native:
            self.ufunc(cur, other, out=dst)
        else:
            dtype = self.call.dtype
            dst[:] = dt.to_storage(self.ufunc(dt.to_compute(cur, dtype),
                                              dt.to_compute(other, dtype)), dtype)

    def _copy(self, a: Action, src: np.ndarray) -> None:
        isz, c = self.isz, self.call
        dst = c.arrs[a.dst]
        if a.src == IN and a.dst == OUT and \
                c.in_addr + a.src_off * isz == c.out_addr + a.dst_off * isz:
            return  # in place: the input already sits where the output goes
        if c.plan.direct:
            # direct plans' copies are large (beyond what stays cached until anyone reads
            # them): `memcopy` streams them past the cache, which keeps what this rank reuses
            self.copy(_addr(dst) + a.dst_off * isz, _addr(src) + a.src_off * isz, a.n * isz)
        else:
            dst[a.dst_off:a.dst_off + a.n] = src[a.src_off:a.src_off + a.n]

    def _copy_and_push(self, a: Action, push: Action, src: np.ndarray) -> None:
        """The copy goes on to the peer (push.push_copies): copy a piece past the cache, then
        write it to the peer from the source, which is still cached."""
        isz = self.isz
        q, raddr = push.peer, self.tr._progs[push.peer][OUT_ADDR] + push.dst_off * isz
        saddr = _addr(src) + a.src_off * isz
        daddr = _addr(self.call.arrs[a.dst]) + a.dst_off * isz
        step = a.n if saddr == daddr else self.piece
        for j in range(0, a.n, step):
            m = min(step, a.n - j) * isz
            if saddr != daddr:
                self.copy(daddr + j * isz, saddr + j * isz, m)
            self.tr._cma(q, raddr + j * isz, saddr + j * isz, m, write=True)

    def _reduce_from_peer(self, a: Action, nxt: Action | None, raddr: int) -> int:
        """Reduce piece by piece through a cache-sized buffer; where the next action writes
        the result into the peer's output (push.push_results), write each piece right after
        reducing it, while it is still in cache."""
        isz, tr = self.isz, self.tr
        fused = None
        if fused_result_push(a, nxt):
            self._await(nxt.deps)
            fused = (nxt.peer, tr._progs[nxt.peer][OUT_ADDR] + nxt.dst_off * isz)
        piece_bytes = min(tr.slice_bytes, tr.options.piece_bytes)
        step = max(1, piece_bytes // isz)
        tmp = tr.scratch(max(piece_bytes, 64))[:step * isz].view(self.call.dtype.storage)
        cur, dst = self.call.arrs[a.cur], self.call.arrs[a.dst]
        for j in range(0, a.n, step):
            m = min(step, a.n - j)
            tr._cma(a.peer, raddr + j * isz, _addr(tmp), m * isz)
            lo = a.dst_off + j
            self._reduce(cur[a.cur_off + j:a.cur_off + j + m], tmp[:m], dst[lo:lo + m])
            if fused is not None:
                tr._cma(fused[0], fused[1] + j * isz, _addr(dst) + lo * isz, m * isz,
                        write=True)
        return 2 if fused is not None else 1


__all__ = ["Call", "Interpreter"]
