"""Run one rank's part of a Schedule over any point-to-point engine (torch.distributed, MPI, ...).

The rank holds the collective's logical buffer (see `gpucomm.collectives`): its input is copied
into its block range, the steps run in order, the output is read from its block range. For
every step the rank posts, at once, one receive per peer that sends to it (into a temporary
buffer, or straight into place for a lone copy) and one send per peer it sends to (its chunks
for that peer packed in op order), waits for its receives, copies or reduces what arrived and
does its local copies. It does not wait for the step's sends: they complete while later steps
run (a send is waited for before anything overwrites what it reads, and all before `execute`
returns), so a slow outgoing link stays busy across steps (the per-rank ranges come from
`p2p_steps`). Because each write happens in the step the schedule gives it, and the numerics
are `dtypes.reduce_into`'s, results equal `gpucomm.execute.execute` bit for bit.

Messages longer than `slice_bytes` travel as slices, each reduced as soon as it arrives, so
reduction overlaps the transfer of the rest.

An engine only has to move bytes (`contracts.Engine`: `rank`, `nranks`, `post(sends, recvs)`,
`wait(pending, deadline)`), and an `Arrays` value (`contracts.Arrays`) says how to allocate,
pack and reduce buffers of the engine's kind (numpy here; torch tensors on the group's device
in `torch_transport`).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import CommTimeout, ConfigError, TransportError
from ..schedule import Schedule
from .arrays import NUMPY, NumpyArrays
from .contracts import Arrays, Buffer, Engine
from .p2p_steps import Message, Range, StepPlan, plan_rank, slice_tag

DEFAULT_TIMEOUT_S = 60.0
# messages are cut in slices of this size (NCCL Simple's slot size)
P2P_SLICE_BYTES = 512 << 10
P2P_TAG = (1 << 30) + 1  # send/recv outside collectives (step tags count up from 0)

Slice = tuple[int, Buffer, int]  # (peer, view of the message, its offset in the message)
Received = tuple[Message, Buffer, bool]  # (message, where it lands, straight into place?)
# a step's receives once posted: per message its buffer, its slices and their handles
Posted = tuple[list[Received], list[list[Slice]], list[list[Any]]]
# a send still in flight: (handles, ranges it reads (none for a packed copy), step, slices)
Inflight = tuple[list[Any], list[tuple[int, int]], int, list[list[Slice]]]


def _postings(step: int, messages: list[list[Slice]]) -> list[tuple[int, Buffer, int]]:
    """(peer, view, tag) for every slice of a step's messages, in order."""
    return [(peer, v, slice_tag(step, i)) for sl in messages for i, (peer, v, _) in enumerate(sl)]


def _split(handles: list[Any], messages: list[list[Slice]]) -> list[list[Any]]:
    """The handles of consecutive messages' slices, one list per message."""
    out, at = [], 0
    for sl in messages:
        out.append(handles[at:at + len(sl)])
        at += len(sl)
    return out


# --- the transport ----------------------------------------------------------------------------

class P2PTransport:
    """Executes one Schedule for this rank over a point-to-point `engine`.

    >>> # on every rank (engine: e.g. MPIEngine(MPI.COMM_WORLD)):
    >>> # P2PTransport(engine).execute(build("all_reduce", "ring", P), x, out)
    """

    def __init__(self, engine: Engine, arrays: Arrays = NUMPY,
                 timeout: float = DEFAULT_TIMEOUT_S,
                 slice_bytes: int = P2P_SLICE_BYTES):
        if not (timeout and timeout > 0):
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}")
        if not (isinstance(slice_bytes, int) and slice_bytes >= 1):
            raise ConfigError(f"slice_bytes must be an integer >= 1, got {slice_bytes!r}")
        self.engine, self.arrays, self.timeout = engine, arrays, float(timeout)
        self.slice_bytes = slice_bytes
        self._plans: OrderedDict[tuple[int, int], tuple[Schedule, tuple[StepPlan, ...]]] = \
            OrderedDict()

    @property
    def rank(self) -> int:
        return self.engine.rank

    @property
    def nranks(self) -> int:
        return self.engine.nranks

    def execute(self, schedule: Schedule, inp: Buffer | None, out: Buffer | None,
                op: str = "sum", dtype: dt.DType | str | None = None,
                timeout: float | None = None) -> None:
        """Run this rank's part of `schedule`: read `inp`, write `out` (None where the collective
        gives this rank no input/output). Every rank of the engine must call it alike."""
        coll, p, me = schedule.collective, schedule.nranks, self.rank
        if p != self.nranks:
            raise ConfigError(f"schedule is for {p} ranks, this transport has {self.nranks}")
        deadline = self._deadline(timeout)
        rin, rout = coll.inputs(me, p, schedule.root), coll.outputs(me, p, schedule.root)
        if rin is not None and inp is None:
            raise ConfigError(f"rank {me} needs an input buffer for {coll.name}")
        if rout is not None and out is None:
            raise ConfigError(f"rank {me} needs an output buffer for {coll.name}")
        if coll.name == "barrier":  # zero bytes would move nothing: pass one-byte tokens
            dtype, bc = dt.get_dtype("uint8"), 1
        else:
            dtype = dt.get_dtype(dtype) if dtype is not None else self.arrays.dtype_of(
                inp if rin is not None else out)
            bc = self._block_count(coll.name, rin, rout, inp, out)
        if coll.reduces:
            dt.check_op(op, dtype)
        plan = self._plan(schedule, bc)
        xin = self.arrays.as_buffer(inp, dtype, f"rank {me} input") if rin is not None else None
        xout = self.arrays.as_buffer(out, dtype, f"rank {me} output") if rout is not None else None
        # all-reduce without scratch: the output array is the whole logical buffer, work in it
        in_place = (xout is not None and rin == rout == (0, schedule.nblocks)
                    and not schedule.scratch_blocks and _writable(xout))
        buf = self._logical(schedule, bc, dtype, xin, rin, xout if in_place else None)
        self._run(plan, buf, op, dtype, deadline, schedule)
        if xout is not None and rout is not None:
            seg = buf if in_place else buf[rout[0] * bc:(rout[0] + rout[1]) * bc]
            if coll.reduces and op == "avg":
                self.arrays.finish_avg(seg, p, dtype)
            if not in_place:
                xout[:] = seg
            self._written(out, xout)

    # --- internals ---
    def _logical(self, schedule: Schedule, bc: int, dtype: dt.DType, xin: Buffer | None,
                 rin: tuple[int, int] | None, in_place_out: Buffer | None) -> Buffer:
        """The collective's logical buffer holding this rank's input in its block range: the
        output array itself when the call works in place."""
        if in_place_out is None:
            buf = self.arrays.empty((schedule.nblocks + schedule.scratch_blocks) * bc, dtype)
            buf[:] = 0  # blocks nobody writes are never read by a verified schedule; be tidy
        else:
            buf = in_place_out
        if xin is not None and rin is not None:
            if xin.shape[0] != rin[1] * bc:
                raise ConfigError(f"rank {self.rank}: input has {xin.shape[0]} elements, "
                                  f"want {rin[1] * bc}")
            if not (in_place_out is not None and _same(xin, buf)):
                buf[rin[0] * bc:(rin[0] + rin[1]) * bc] = xin
        return buf

    def _block_count(self, coll: str, rin: tuple[int, int] | None,
                     rout: tuple[int, int] | None, inp: Buffer, out: Buffer) -> int:
        me = self.rank
        x, rng, what = (inp, rin, "input") if rin is not None else (out, rout, "output")
        if rng is None:
            return 0
        n = int(np.prod(getattr(x, "shape", (len(x),))))
        if n % rng[1]:
            raise ConfigError(f"rank {me}: {coll} {what} of {n} elements does not divide "
                              f"into {rng[1]} blocks")
        bc = n // rng[1]
        if rin is not None and rout is not None:
            m = int(np.prod(getattr(out, "shape", (len(out),))))
            if m != rout[1] * bc:
                raise ConfigError(f"rank {me}: {coll} output has {m} elements, want "
                                  f"{rout[1] * bc} ({rout[1]} block(s) of {bc})")
        return bc

    def _plan(self, schedule: Schedule, bc: int) -> tuple[StepPlan, ...]:
        # keyed by identity (the schedule is kept alive with its plan, so ids are not reused)
        key = (id(schedule), bc)
        hit = self._plans.get(key)
        if hit is None:
            hit = (schedule, plan_rank(schedule, self.rank, bc))
            self._plans[key] = hit
            if len(self._plans) > 64:
                self._plans.popitem(last=False)
        self._plans.move_to_end(key)
        return hit[1]

    def _run(self, plan: tuple[StepPlan, ...], buf: Buffer, op: str, dtype: dt.DType,
             deadline: float, schedule: Schedule) -> None:
        engine = self.engine
        k = max(1, self.slice_bytes // dtype.itemsize)
        # Sends still in flight from earlier steps: (handles, source ranges they read (none
        # for a packed copy), step, the posted buffers). A step does not wait for its own
        # sends: it moves on once its receives have landed, so a rank whose outgoing link is
        # the slow one keeps it busy with the next step's bytes while the fast side catches up
        # (the cross-step pipelining NCCL gets from its slots). A send is waited for before
        # anything writes the range it reads, and every send before execute returns.
        # The next step's receives are posted one step ahead (into buffers of their own), so
        # an engine whose sender waits for the receiver to be ready (gloo) has its answer
        # there when the data comes; not on engines that need a step's ops in one group
        # (NCCL: a receive-only group ahead of the sends could deadlock its stream).
        ahead = not getattr(engine, "batched", False)
        inflight: list[Inflight] = []
        pre: Posted | None = None
        try:
            for i, sp in enumerate(plan):
                nxt = plan[i + 1] if ahead and i + 1 < len(plan) else None
                pre = self._step(sp, buf, op, dtype, deadline, k, inflight, pre, nxt)
            for hs, _, step, _ in inflight:
                try:
                    engine.wait(hs, deadline)
                except TransportError as e:
                    e.step = step
                    raise
        except TransportError as e:
            e = self._earlier(e, inflight)
            raise type(e)(f"{e} (step {getattr(e, 'step', '?')} of {schedule.algorithm} "
                          f"{schedule.collective.name} on {schedule.nranks} ranks)") from e

    def _earlier(self, err: TransportError, inflight: list[Inflight]) -> TransportError:
        """On a timeout, a send of an earlier step that is still open names the rank that
        stopped first (the peer we timed out on may just be stuck behind it, as it would be
        in lock step): report that one."""
        if not isinstance(err, CommTimeout):
            return err
        for hs, _, step, _ in inflight:
            if step >= getattr(err, "step", -1):
                continue
            try:
                self.engine.wait(hs, time.monotonic())  # past the deadline: one poll
            except TransportError as e:
                e.step = step
                return type(e)(f"{e}; then timed out on a later step: {err}")
        return err

    def _recv_buffers(self, sp: StepPlan, buf: Buffer, dtype: dt.DType, k: int,
                      into_place: bool) -> tuple[list[Received], list[list[Slice]]]:
        """(message, buffer, direct) and its slices [(peer, view, offset)] per receive."""
        recvs: list[Received] = []
        posted: list[list[Slice]] = []
        for m in sp.recvs:
            direct = into_place and len(m.ranges) == 1 and not m.ranges[0][2]
            b = buf[m.ranges[0][0]:m.ranges[0][1]] if direct else self.arrays.empty(m.nelems,
                                                                                      dtype)
            recvs.append((m, b, direct))
            posted.append([(m.peer, b[o:o + k], o) for o in range(0, m.nelems, k)])
        return recvs, posted

    def _step(self, sp: StepPlan, buf: Buffer, op: str, dtype: dt.DType, deadline: float,
              k: int, inflight: list[Inflight], pre: Posted | None,
              nxt: StepPlan | None) -> Posted | None:
        """Run one step; returns the next step's receives if this posted them (`nxt`)."""
        ahead = None
        try:
            self._wait_for_readers(sp, inflight, deadline)
            # Large messages go in slices, so what arrived is reduced while the rest is still
            # on the wire. Each slice has a tag of its own (`slice_tag`).
            if pre is None:
                recvs, posted_r = self._recv_buffers(sp, buf, dtype, k, True)
                handles_r = self._post_sends(sp, buf, dtype, k, inflight, posted_r)
            else:
                recvs, posted_r, handles_r = pre
                self._post_sends(sp, buf, dtype, k, inflight, None)
            if nxt is not None and nxt.recvs:
                nrecvs, nposted = self._recv_buffers(nxt, buf, dtype, k, False)
                nh = self.engine.post([], _postings(nxt.index, nposted))
                ahead = (nrecvs, nposted, _split(nh, nposted))
            for (m, b, direct), sl, hs in zip(recvs, posted_r, handles_r):
                for (_, v, o), h in zip(sl, hs):
                    self.engine.wait([h], deadline)
                    if not direct:
                        self._land(buf, m.ranges, b, o, o + len(v), op, dtype)
        except TransportError as e:
            e.step = sp.index
            raise
        self._local(sp, buf, op, dtype)
        return ahead

    def _wait_for_readers(self, sp: StepPlan, inflight: list[Inflight],
                          deadline: float) -> None:
        """Wait for the earlier sends still reading a range this step writes."""
        writes = [(lo, hi) for m in sp.recvs for lo, hi, _ in m.ranges]
        writes += [(lo_d, lo_d + hi_s - lo_s) for lo_s, hi_s, lo_d, _ in sp.local]
        if not (inflight and writes):
            return
        keep = []
        for item in inflight:
            if any(a < hi and lo < z for a, z in item[1] for lo, hi in writes):
                self.engine.wait(item[0], deadline)
            else:
                keep.append(item)
        inflight[:] = keep

    def _post_sends(self, sp: StepPlan, buf: Buffer, dtype: dt.DType, k: int,
                    inflight: list[Inflight],
                    posted_r: list[list[Slice]] | None) -> list[list[Any]]:
        """Post the step's sends (and its receives, unless posted a step ahead) in one call:
        NCCL needs a step's ops grouped. Returns the receives' handles, per message."""
        posted_s: list[list[Slice]] = []
        reads: list[tuple[int, int]] = []
        for m in sp.sends:
            b = self.arrays.pack([buf[lo:hi] for lo, hi, _ in m.ranges], m.nelems, dtype)
            if len(m.ranges) == 1:  # a view of the buffer, not a packed copy
                reads.append((m.ranges[0][0], m.ranges[0][1]))
            posted_s.append([(m.peer, b[o:o + k], o) for o in range(0, m.nelems, k)])
        rlist = _postings(sp.index, posted_r) if posted_r is not None else []
        slist = _postings(sp.index, posted_s)
        handles = self.engine.post(slist, rlist) if (rlist or slist) else []
        nr = len(rlist)
        if len(handles) > nr:
            inflight.append((handles[nr:], reads, sp.index, posted_s))  # keeps buffers
        return _split(handles, posted_r) if posted_r is not None else []

    def _local(self, sp: StepPlan, buf: Buffer, op: str, dtype: dt.DType) -> None:
        for lo_s, hi_s, lo_d, red in sp.local:
            src = buf[lo_s:hi_s]
            if red:
                self.arrays.reduce(buf[lo_d:lo_d + hi_s - lo_s], src, op, dtype)
            else:
                buf[lo_d:lo_d + hi_s - lo_s] = src

    def _land(self, buf: Buffer, ranges: tuple[Range, ...], b: Buffer, start: int, end: int,
              op: str, dtype: dt.DType) -> None:
        """Copy or reduce elements start..end of a packed message into their ranges."""
        off = 0
        for lo, hi, red in ranges:
            a, z = max(start, off), min(end, off + hi - lo)
            if a < z:
                dst, part = buf[lo + a - off:lo + z - off], b[a:z]
                if red:
                    self.arrays.reduce(dst, part, op, dtype)
                else:
                    dst[:] = part
            off += hi - lo
            if off >= end:
                break

    def _written(self, out: Any, xout: Buffer) -> None:
        self.arrays.write_back(out, xout)

    # --- the rest of the transport interface (see gpucomm.runtime) ---
    def barrier(self, timeout: float | None = None) -> None:
        """No rank leaves before every rank has arrived (tokens of a registered barrier)."""
        from ..algorithms import algorithms, build
        sched = self.__dict__.get("_barrier")
        if sched is None:
            sched = build("barrier", algorithms("barrier")[0].name, self.nranks).materialize()
            self._barrier = sched
        self.execute(sched, None, None, timeout=timeout)

    def send(self, arr: Buffer, dst: int, dtype: dt.DType | str | None = None,
             timeout: float | None = None) -> None:
        """Send `arr` to rank `dst` (returns when the engine has taken the data)."""
        x, _ = self._p2p_buffer(arr, dtype, dst, "send")
        self.engine.wait(self.engine.post([(dst, x, P2P_TAG)], []), self._deadline(timeout))

    def recv(self, arr: Buffer, src: int, dtype: dt.DType | str | None = None,
             timeout: float | None = None) -> None:
        """Receive into `arr` from rank `src`; the sizes must match."""
        x, _ = self._p2p_buffer(arr, dtype, src, "recv")
        self.engine.wait(self.engine.post([], [(src, x, P2P_TAG)]), self._deadline(timeout))
        self._written(arr, x)

    def _p2p_buffer(self, arr: Buffer, dtype: dt.DType | str | None, peer: int,
                    what: str) -> tuple[Buffer, dt.DType]:
        if not (0 <= peer < self.nranks) or peer == self.rank:
            raise ConfigError(f"rank {self.rank}: cannot {what} with rank {peer}: allowed are "
                              f"the other ranks of 0..{self.nranks - 1}")
        d = dt.get_dtype(dtype) if dtype is not None else self.arrays.dtype_of(arr)
        return self.arrays.as_buffer(arr, d, f"rank {self.rank} {what} buffer"), d

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (timeout if timeout is not None else self.timeout)

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


def _writable(a: Buffer) -> bool:
    flags = getattr(a, "flags", None)
    return flags is None or bool(flags.writeable and flags.c_contiguous)


def _same(a: Buffer, b: Buffer) -> bool:
    if isinstance(a, np.ndarray):
        return np.shares_memory(a, b) and a.shape == b.shape
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape


def peer_error(me: int, peer: int, what: str, detail: str, timed_out: bool) -> TransportError:
    """The error a transport raises when a wait on `peer` fails: it names both ranks."""
    if timed_out:
        return CommTimeout(f"rank {me}: timed out waiting for rank {peer} ({what}); rank {peer} "
                           f"may be dead, hung or cut off: {detail}")
    return TransportError(f"rank {me}: rank {peer} failed ({what}): {detail}")


def check_deadline(deadline: float) -> float:
    """Seconds left before `deadline`, at least a millisecond (so a wait still polls once)."""
    return max(deadline - time.monotonic(), 1e-3)


__all__ = ["DEFAULT_TIMEOUT_S", "NUMPY", "P2P_TAG", "P2P_SLICE_BYTES", "Message",
           "NumpyArrays", "P2PTransport", "StepPlan", "check_deadline", "peer_error", "plan_rank"]
