"""Whole calls in C for cached plans: a call whose plan runs in C (`cplan`) and that repeats
one already run (same schedule, op, dtype and buffer sizes, the same shared buffer) skips
the Python of the general path. One `_stream.Waits.call` does what `ShmTransport._enter`,
the plan and the end-of-call checks do: wait where peers may still read this rank's shared
buffer from the previous call, publish the descriptor and buffer addresses, run the rows,
check every peer not checked yet, publish DONE. What the call checks in Python on the general
path (block counts, aliasing, dtype and op) is a function of that key, checked when the call
was first run; C checks the buffers' sizes, contiguity and overlaps again on every call.

Where C cannot finish (a peer late beyond `cplan.WAIT_NS`, a descriptor to report or a
grown buffer to map, a failed copy) it returns at that step, and the call ends in Python
exactly as on the general path (`cplan.run` resumes the rows, `ShmTransport._finish` the
checks): the same liveness, deadline and mismatch reports. Before it enters the call (the
buffers are not what the key promised, or a peer is still in the previous call), nothing
has happened and the general path runs it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import dtypes as dt
from . import cplan, memcopy
from .actions import IN, OUT
from .interpret import Call
from .shm_control import in_place_offset

if TYPE_CHECKING:
    from ..schedule import Schedule
    from .interpret import Interpreter
    from .plan import ActionPlan
    from .segment import Segment
    from .shm_control import InputCopy

# `_stream.Waits.call`'s statuses
DONE, ROW_WAITS, ROW_FAILED, END_WAITS, NOT_ENTERED = range(5)
_NO_ALIAS = 1 << 62  # no in-place layout: the buffers may not overlap at all


class Cached(NamedTuple):
    """A call that may run whole in C again: what `Waits.call` takes (`spec`), and what a
    call C stops in needs to end in Python."""
    schedule: Schedule
    data: Segment  # the shared buffer it ran on
    spec: tuple
    plan: ActionPlan
    desc: tuple
    dtype: dt.DType
    op: str
    dropped: tuple  # locations of given buffers the plan does not use, dropped by the call
    own: bool  # an all-to-all in place: the blocks peers read go aside first (`unalias`)


class FastCalls:
    """The cached-call half of `ShmTransport`, which provides the attributes declared here."""

    rank: int
    nranks: int
    seq: int
    _waiter: Any
    _shm_read: bool
    _data: Segment | None
    _call: tuple[str, int, float]
    _spin_s: float  # `shm_wait`
    timeout: float
    _fast: dict[tuple, Cached]  # by `_key`
    _input_copy: InputCopy

    if TYPE_CHECKING:
        def _interpreter(self, dtype: dt.DType, op: str, reduces: bool) -> Interpreter: ...
        def _finish(self, call: Call) -> None: ...
        def _fail(self, err: BaseException) -> None: ...
        def _view(self, dtype: dt.DType) -> np.ndarray: ...

    def _fast_call(self, schedule: Schedule, inp: np.ndarray | None, out: np.ndarray | None,
                   op: str, dtype: dt.DType, timeout: float | None) -> bool:
        """Ran this call as a cached whole call in C (False: it is not one; nothing done)."""
        hit = self._fast.get(_key(schedule, op, dtype, inp, out))
        if hit is None or hit.schedule is not schedule or hit.data is not self._data or \
                hit.data.linked:
            return False
        if hit.dropped:  # buffers the plan does not use, which the general path dropped too
            inp, out = (None if IN in hit.dropped else inp), (None if OUT in hit.dropped else out)
        if hit.own and inp is not None:  # the last call's peers are done with the copy
            inp = self._input_copy.others(inp, self.rank, hit.desc[5])
        seq, checked = self.seq + 1, bytearray(self.nranks)
        start = time.monotonic()
        try:
            status, row, detail = self._waiter.call(hit.spec, seq, inp, out, self._shm_read,
                                                    checked)
            if status == NOT_ENTERED:
                return False
            self.seq = seq
            if status != DONE:
                self._fast_resume(hit, (inp, out), checked, start, (status, row, detail),
                                  timeout)
        except BaseException as e:
            self.seq = seq
            self._fail(e)
            raise
        self._shm_read = hit.plan.shm_read[self.rank]
        return True

    def _fast_resume(self, hit: Cached, bufs: tuple, checked: bytearray, start: float,
                     stop: tuple[int, int, int], timeout: float | None) -> None:
        """End a call C stopped in (`stop` = its status, row and detail) as the general path
        ends it."""
        schedule, plan, desc, dtype, op = hit.schedule, hit.plan, hit.desc, hit.dtype, hit.op
        timeout = self.timeout if timeout is None else timeout
        seq = self.seq
        self._call = (schedule.collective.name, seq, timeout)
        inp, out = bufs
        in_addr, out_addr = memcopy.call_addresses(inp, out)
        call = Call(schedule, dtype, op, plan, seq, start + timeout, (seq, *desc[1:]),
                    [bool(c) for c in checked], [self._view(dtype), inp, out], in_addr,
                    out_addr)
        status, row, detail = stop
        if status != END_WAITS:
            it = self._interpreter(dtype, op, schedule.collective.reduces)
            it.call = call
            prog = it._cplans.get(plan, self.rank, dtype.itemsize)
            if prog is not None:  # it is (the plan was cached for it)
                cplan.run(it, prog, row, (status, detail))
        self._finish(call)

    def _c_map_peer(self, q: int, seg: Segment) -> None:
        """Rank q's shared buffer is mapped at `seg` now: rows that read it read there."""
        if self._waiter is not None:
            self._waiter.map_peer(q, seg.mm)

    def _fast_store(self, call: Call | None, inp: np.ndarray | None,
                    out: np.ndarray | None, own: bool = False) -> None:
        """Cache a call the general path just ran, where its plan runs in C and nothing of it
        is Python's (an average divides in its plan's complete reductions): no broadcast
        root's in-place split, the buffers the caller passed (none copied but an all-to-all's
        in place, `own`, which a later call copies aside again; dropped only where the plan
        uses none, as a broadcast's non-root drops its input)."""
        if call is None or self._waiter is None or self.nranks < 2 or self._data is None:
            return
        it = self._interpreter(call.dtype, call.op, call.schedule.collective.reduces)
        prog = it._cplans.get(call.plan, self.rank, call.dtype.itemsize)
        if prog is None:
            return
        given = {IN: inp, OUT: out}
        if own:  # ran on a copy of the input: in place, on the output given
            if inp is not out or call.arrs[OUT] is not out:
                return
        elif any(call.arrs[loc] is not buf and (call.arrs[loc] is not None or loc in prog[2])
                 for loc, buf in given.items()):
            return
        dropped = tuple(loc for loc, buf in given.items() if buf is not None
                        and call.arrs[loc] is None)
        key = _key(call.schedule, call.op, call.dtype, inp, out)
        inp, out = call.arrs[IN], call.arrs[OUT]
        if len(self._fast) > 256:
            self._fast.clear()
        s, bc, isz = call.schedule, call.desc[5], call.dtype.itemsize
        offset = in_place_offset(s.collective, self.rank, self.nranks, s.root, bc, isz)
        alias = _NO_ALIAS if offset is None else offset
        spec = (prog[0], prog[1], np.array(call.desc, np.int64),
                -1 if inp is None else inp.nbytes, -1 if out is None else out.nbytes, alias,
                memcopy.address(self._data.mm),
                call.plan.stream_min_bytes,
                it.piece * isz, self._spin_s * 1e9, cplan.WAIT_NS)
        self._fast[key] = Cached(s, self._data, spec, call.plan, call.desc, call.dtype, call.op,
                                 dropped, own)


def _key(schedule: Schedule, op: str, dtype: dt.DType, inp: np.ndarray | None,
         out: np.ndarray | None) -> tuple:
    """A cached call's key: the schedule, op, dtype, the buffers' sizes (-1: none) and
    whether they are one (an all-to-all in place compiles another plan)."""
    return (id(schedule), op, dtype.name, -1 if inp is None else inp.size,
            -1 if out is None else out.size, inp is out)
