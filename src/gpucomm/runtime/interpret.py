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
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from .. import dtypes as dt
from ..errors import TransportError
from . import cma, cplan, memcopy
from .actions import IN, OUT, PEER, PEER_IN, PEER_OUT, Action, fused_push, fused_result_push
from .shm_control import IN_ADDR, OUT_ADDR, PROG

if TYPE_CHECKING:
    from ..schedule import Schedule
    from .plan import ActionPlan
    from .shm import ShmTransport

# runs one action (and the action fused with it, or None)
Handler = Callable[[Action, Action | None], None]
# per action: (its handler, the action, the action fused with it or None, actions done after)
Program = list[tuple[Handler, Action, Action | None, int]]


@dataclass(slots=True)
class Call:
    """One collective call in progress on this rank: what `ShmTransport._await` needs to wait
    for and check peers, and the arrays the actions' locations name."""
    schedule: Schedule
    dtype: dt.DType
    op: str
    plan: ActionPlan
    seq: int
    deadline: float
    desc: tuple[int, ...]  # the call descriptor published in the control segment
    checked: list[bool]  # per peer: its descriptor was checked in this call
    # [shared buffer view, input, output], indexed by Loc SHM/IN/OUT (None: the rank has none)
    arrs: list[np.ndarray | None]
    in_addr: int
    out_addr: int

    @property
    def base(self) -> int:
        return self.seq << 32


_addr = memcopy.address  # where an array's data starts (read in C where built)


class Interpreter:
    """Runs the actions of transport `tr`'s rank for calls of one dtype and op (the
    transport keeps one per pair; see the module docstring)."""

    call: Call  # the call `run` executes (set by `run`)

    def __init__(self, tr: ShmTransport, dtype: dt.DType, op: str, reduces: bool):
        self.tr = tr
        self._programs: dict[int, tuple[ActionPlan, Program]] = {}  # id(plan) -> its program
        self.isz = dtype.itemsize
        self.ufunc = dt.UFUNCS[op] if reduces else None
        self.avg = reduces and op == "avg"  # complete sums divided as reduced
        self.native = dtype.compute == dtype.storage
        self.piece = max(1, tr.options.piece_bytes // self.isz)
        self._cplans = cplan.CPlans(dtype.name, op)
        # what reductions read by cross-memory attach land in, kept for the interpreter's
        # life (no per-call malloc)
        self._tmp = np.empty(0, np.uint8)

    def run(self, call: Call) -> None:
        self.call = call
        if self.tr._waiter is not None:  # copy-only direct plans run in C (`cplan`)
            prog = self._cplans.get(call.plan, self.tr.rank, self.isz)
            if prog is not None:
                cplan.run(self, prog)
                return
        publish, base = self.tr._publish, call.seq << 32
        for run_one, a, nxt, done in self._program(call.plan):
            if a.deps:
                self._await(a.deps)
            run_one(a, nxt)
            publish(base | done)

    def _program(self, plan: ActionPlan) -> Program:
        """This rank's actions as (handler, action, the action fused with it or None, actions
        done after it); made once per plan."""
        hit = self._programs.get(id(plan))
        if hit is not None and hit[0] is plan:
            return hit[1]
        acts, i = plan.actions[self.tr.rank], 0
        program: Program = []
        while i < len(acts):
            a, nxt = acts[i], (acts[i + 1] if i + 1 < len(acts) else None)
            run_one, fused = self._handler(a, nxt)
            i += 2 if fused else 1
            program.append((run_one, a, nxt if fused else None, i))
        if len(self._programs) > 256:
            self._programs.clear()
        self._programs[id(plan)] = (plan, program)
        return program

    def _handler(self, a: Action, nxt: Action | None) -> tuple[Handler, bool]:
        """The method that runs `a`, and whether it runs `nxt` with it."""
        if a.src.is_private:  # the peer's private buffer: cross-memory attach
            if a.reduce:
                fused = fused_result_push(a, nxt)
                return self._reduce_from_peer, fused
            return self._read_peer, False
        if a.dst == PEER_OUT:  # a shared transfer's write: the peer reads it all here
            return (self._nothing if a.share else self._push), False
        if a.n == 0:
            return self._nothing, False
        if a.reduce:
            return self._reduce_local, False
        if fused_push(a, nxt):
            return self._copy_and_push, True
        return self._copy, False

    def _await(self, deps: Sequence[tuple[int, int]]) -> None:
        c = self.call
        self.tr._await(deps, c.checked, c.seq << 32, c.deadline, c.desc, c.schedule, c.dtype,
                       c.op)

    def _cma(self, q: int, remote: int, local: int, nbytes: int, write: bool = False) -> None:
        try:
            (cma.write if write else cma.read)(self.tr.pids[q], remote, local, nbytes)
        except TransportError as e:
            self.tr._check_alive(q, 1 << 62, PROG)  # names the rank if it died
            what = "writing" if write else "reading"
            raise TransportError(f"rank {self.tr.rank}: {what} rank {q}'s buffer: {e}") \
                from None

    def _nothing(self, a: Action, nxt: Action | None) -> None:
        """A pure wait: its dependencies were all it had."""

    def _missing(self, a: Action) -> TransportError:
        """The error for an action on a buffer this rank has none of (`block_count` rules
        that out for every plan: a check, not a path)."""
        return TransportError(f"rank {self.tr.rank}: action {a.describe()!r} uses a buffer "
                              f"this rank passed none of")

    def _src(self, a: Action) -> np.ndarray:
        if a.src == PEER:
            return self.tr._peer_view(a.peer, self.call.dtype)
        src = self.call.arrs[a.src]
        if src is None:
            raise self._missing(a)
        return src

    def _peer_addr(self, a: Action) -> int:
        word = IN_ADDR if a.src == PEER_IN else OUT_ADDR
        return self.tr._progs[a.peer][word] + a.src_off * self.isz

    def _read_peer(self, a: Action, nxt: Action | None) -> None:
        """One cross-memory copy out of the peer's input or output."""
        dst = self.call.arrs[a.dst]
        if dst is None:
            raise self._missing(a)
        self._cma(a.peer, self._peer_addr(a), _addr(dst) + a.dst_off * self.isz,
                  a.n * self.isz)

    def _push(self, a: Action, nxt: Action | None) -> None:
        """Into the peer's output: one cross-memory write."""
        self._cma(a.peer, self.tr._progs[a.peer][OUT_ADDR] + a.dst_off * self.isz,
                  _addr(self._src(a)) + a.src_off * self.isz, a.n * self.isz, write=True)

    def _reduce_local(self, a: Action, nxt: Action | None) -> None:
        arrs = self.call.arrs
        cur, dst = arrs[a.cur], arrs[a.dst]
        if cur is None or dst is None:
            raise self._missing(a)
        self._reduce(cur[a.cur_off:a.cur_off + a.n], self._src(a)[a.src_off:a.src_off + a.n],
                     dst[a.dst_off:a.dst_off + a.n], a.complete)

    def _reduce(self, cur: np.ndarray, other: np.ndarray, dst: np.ndarray,
                complete: bool) -> None:
        """dst = cur (op) other; an average's complete sum is divided right there."""
        ufunc = self.ufunc
        if ufunc is None:
            raise TransportError(f"rank {self.tr.rank}: the plan reduces, but "
                                 f"{self.call.schedule.collective.name} does not")
        dtype = self.call.dtype
        if self.native:
            ufunc(cur, other, out=dst)
        else:
            dst[:] = dt.to_storage(ufunc(dt.to_compute(cur, dtype),
                                              dt.to_compute(other, dtype)), dtype)
        if complete and self.avg:
            dt.finish_avg(dst, self.tr.nranks, dtype)

    def _copy(self, a: Action, nxt: Action | None) -> None:
        isz, c = self.isz, self.call
        src, dst = self._src(a), c.arrs[a.dst]
        if dst is None:
            raise self._missing(a)
        if a.src == IN and a.dst == OUT and \
                c.in_addr + a.src_off * isz == c.out_addr + a.dst_off * isz:
            return  # in place: the input already sits where the output goes
        if c.plan.direct:
            # direct plans' copies are large: `memcopy` streams them past the cache from the
            # plan's threshold (a 2-rank all-to-all that fits in cache copies through it)
            memcopy.copy(_addr(dst) + a.dst_off * isz, _addr(src) + a.src_off * isz,
                         a.n * isz, c.plan.stream_min_bytes)
        else:
            dst[a.dst_off:a.dst_off + a.n] = src[a.src_off:a.src_off + a.n]

    def _copy_and_push(self, a: Action, push: Action | None) -> None:
        """The copy goes on to the peer (push.push_copies): copy a piece past the cache, then
        write it to the peer from the source, which is still cached."""
        if push is None:
            raise TransportError(f"rank {self.tr.rank}: a fused copy and push without its "
                                 f"push: {a.describe()}")
        self._await(push.deps)
        isz, src = self.isz, self._src(a)
        q, raddr = push.peer, self.tr._progs[push.peer][OUT_ADDR] + push.dst_off * isz
        saddr = _addr(src) + a.src_off * isz
        dst = self.call.arrs[a.dst]
        if dst is None:
            raise self._missing(a)
        daddr = _addr(dst) + a.dst_off * isz
        step = a.n if saddr == daddr else self.piece
        for j in range(0, a.n, step):
            m = min(step, a.n - j) * isz
            if saddr != daddr:
                memcopy.copy(daddr + j * isz, saddr + j * isz, m,
                             self.call.plan.stream_min_bytes)
            self._cma(q, raddr + j * isz, saddr + j * isz, m, write=True)

    def _reduce_from_peer(self, a: Action, nxt: Action | None) -> None:
        """Reduce piece by piece through a cache-sized buffer; where the next action writes
        the result into the peer's output (push.push_results), write each piece right after
        reducing it, while it is still in cache."""
        isz, tr, raddr = self.isz, self.tr, self._peer_addr(a)
        fused = None
        if nxt is not None:  # fused with its push
            self._await(nxt.deps)
            fused = (nxt.peer, tr._progs[nxt.peer][OUT_ADDR] + nxt.dst_off * isz)
        piece_bytes = min(tr.slice_bytes, tr.options.piece_bytes)
        step = max(1, piece_bytes // isz)
        if self._tmp.nbytes < max(piece_bytes, 64):
            self._tmp = np.empty(max(piece_bytes, 64), np.uint8)
        tmp = self._tmp[:step * isz].view(self.call.dtype.storage)
        cur, dst = self.call.arrs[a.cur], self.call.arrs[a.dst]
        if cur is None or dst is None:
            raise self._missing(a)
        for j in range(0, a.n, step):
            m = min(step, a.n - j)
            self._cma(a.peer, raddr + j * isz, _addr(tmp), m * isz)
            lo = a.dst_off + j
            self._reduce(cur[a.cur_off + j:a.cur_off + j + m], tmp[:m], dst[lo:lo + m],
                         a.complete)
            if fused is not None:
                self._cma(fused[0], fused[1] + j * isz, _addr(dst) + lo * isz, m * isz,
                          write=True)


__all__ = ["Call", "Interpreter"]
