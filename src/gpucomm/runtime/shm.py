"""The shared-memory transport: executes any Schedule between processes on one host.

Each rank owns a *control* segment (counters it alone writes, read by everyone) and a *data*
segment holding its logical buffer (see `collectives`). A rank executes the ops whose
destination it is (`plan.compile_plan`), reading the source straight from the peer's mapped
buffer and reducing with numpy ufuncs (`out=`). Chunks from `direct_min_bytes` on skip the
staging where Linux allows cross-memory attach (`cma`): the reader copies them out of the
peer's own input or output array, one copy instead of two; and where that balances the work
or saves a pass over memory, a rank writes into a peer's output instead (an idle broadcast
root takes a share; on 2 ranks a reduced half goes to the peer straight from cache, and so
does an all-gather's own block) — see `push.push_split`, `push.push_results` and
`push.push_copies`. Large local copies in those plans use streaming stores (`memcopy`), so an
output nobody reads soon costs no read-for-ownership and does not evict the input the rank is
about to send on.

Synchronisation is one 64-bit counter per rank, `seq << 32 | actions done`: a dependency
"peer q has done k actions of call seq" is one load. Waits spin, yield, then sleep (more ranks
than cores still progress), with a deadline, checking that the peer lives and has not failed.
A counter is stored after the data it announces and read before that data (x86-64 keeps
stores and loads in order, TSO). Small all-reduces: `shm_ll`; repeated calls: `shm_fast`."""
from __future__ import annotations

import os
import time
import zlib

import numpy as np

from .. import dtypes as dt
from ..errors import ConfigError, TransportError
from ..schedule import Schedule
from . import cma, memcopy
from .contracts import Gatherer
from .interpret import Call, Interpreter
from .options import RuntimeOptions, current
from .plan import ActionPlan, is_direct, own_block_in_place, plan_call
from .segment import Segment, new_name, unlink_name
from .shm_control import (ACK, CAP, CLOSED, COLL_IDS, CTRL_BYTES, DESC, DONE, DTYPE_IDS, FAILED,
                          GEN, IN_ADDR, IN_PLACE, MAX_RANKS, MSG_OFF, NAME_OFF, OP_IDS, OUT_ADDR,
                          PID, PROG, RUNNING, STATE, InputCopy, block_count, pid_alive,
                          unalias)
from .shm_ll import SmallMessages
from .shm_fast import FastCalls
from .shm_p2p import PointToPoint
from .shm_wait import SPIN_S, PeerWaits
from .signals import exiting_on_signals

_UFUNC_OK = frozenset(dt.REDUCE_OPS)


class ShmTransport(PeerWaits, PointToPoint, SmallMessages, FastCalls):
    """Executes schedules for one rank. Built by `gpucomm.init()`; see `execute`.

    `options`: how plans cut and move data (default: `options.current()`, the environment's
    or `gpucomm.init(options=...)`'s)."""

    def __init__(self, rank: int, nranks: int, timeout: float,
                 rendezvous: Gatherer | None = None, options: RuntimeOptions | None = None):
        if nranks > MAX_RANKS:
            raise ConfigError(f"the shm transport serves at most {MAX_RANKS} ranks, got {nranks}")
        self.rank, self.nranks, self.timeout = rank, nranks, timeout
        self.options = current() if options is None else options
        self.seq = 0
        self.cma = False
        self._spin_s = SPIN_S  # see `shm_wait`: shorter where ranks outnumber their cores
        self.broken: str | None = None  # the error that broke this communicator
        self._plans: dict[tuple, tuple[Schedule, ActionPlan, int]] = {}  # see `plan`
        self._interps: dict[tuple[str, str, bool], Interpreter] = {}  # (dtype, op, reduces)
        self._barrier: Schedule | None = None  # see `barrier`
        self._fast = {}  # see `shm_fast`
        self._input_copy = InputCopy()  # see `unalias`
        self._data: Segment | None = None
        self._data_views: dict[str, np.ndarray] = {}  # dtype name -> view of _data
        self._peer_data: dict[int, tuple[int, Segment]] = {}  # q -> (gen, Segment)
        # (q, dtype name) -> (gen, view of q's data segment)
        self._peer_views: dict[tuple[int, str], tuple[int, np.ndarray]] = {}
        self._p2p_out: dict[int, Segment] = {}  # dst -> Segment
        self._p2p_in: dict[int, tuple[int, Segment]] = {}  # src -> (gen, Segment)
        self._ctrls: list[Segment] = []  # per rank, once connected
        self._progs: list[memoryview] = []
        self.pids = [0] * nranks
        self._ctrl: Segment | None = None
        # Set-up is the one stretch where this rank's control segment has a name in /dev/shm
        # (peers map it by name). Names are announced before the segments exist, so when a
        # rank dies here the others remove every announced name as their set-up fails with
        # it; SIGTERM/SIGHUP (how torchrun stops ranks) unwind through the same path.
        names: list[str] = []
        try:
            with exiting_on_signals():
                ctrl = self._connect(rendezvous, names)
        except BaseException:
            if self._ctrl is not None:
                self._ctrl.close()
            for name in names:
                unlink_name(name)
            raise
        ctrl.unlink()
        for name in names:  # every rank mapped every one: a rank that died just now leaks none
            unlink_name(name)
        self._ll_connect()
        self._yield_where_cores_are_shared()
        self._me[STATE] = RUNNING

    def _create_ctrl(self, name: str | None = None) -> Segment:
        self._ctrl = ctrl = Segment.create(CTRL_BYTES, name)
        self._mine = ctrl.mm
        self._me = memoryview(self._mine).cast("q")
        self._me[PID] = os.getpid()
        self._me[PROG] = DONE  # "call 0 is finished"
        self.pids[self.rank] = os.getpid()
        return ctrl

    def _connect(self, rendezvous: Gatherer | None, names: list[str]) -> Segment:
        """Create this rank's control segment (returned), map every peer's and agree on
        cross-memory attach; `names` collects the control-segment names announced so far."""
        rank, nranks = self.rank, self.nranks
        if nranks == 1:
            ctrl = self._create_ctrl()
            self._ctrls, self._progs = [ctrl], [self._me]
            return ctrl
        if rendezvous is None:
            raise ConfigError(f"the shm transport needs a rendezvous for {nranks} ranks")
        mine = new_name()
        names.append(mine)
        info = rendezvous.allgather({"ctrl": mine, "pid": os.getpid(),
                                     "host": os.uname().nodename})
        names[:] = [i["ctrl"] for i in info]
        ctrl = self._create_ctrl(mine)
        rendezvous.allgather({"created": True})
        hosts = {i["host"] for i in info}
        if len(hosts) > 1:
            raise TransportError(f"the shm transport needs every rank on one host; ranks run "
                                 f"on {', '.join(sorted(hosts))}")
        for q, i in enumerate(info):
            seg = ctrl if q == rank else Segment.attach(i["ctrl"])
            self._ctrls.append(seg)
            self._progs.append(self._me if q == rank else memoryview(seg.mm).cast("q"))
            if q != rank:
                self.pids[q] = i["pid"]
        # Cross-memory attach only if every rank can read every peer (and nobody opted out).
        magic = np.frombuffer(os.urandom(16), np.uint8).copy()
        addr = magic.__array_interface__["data"][0]
        want = self.options.cma
        probes = rendezvous.allgather({"addr": addr, "magic": magic.tobytes().hex(),
                                       "want": want})
        ok = want and all(cma.probe(self.pids[q], pr["addr"], bytes.fromhex(pr["magic"]))
                          for q, pr in enumerate(probes) if q != rank)
        oks = rendezvous.allgather({"ok": ok})  # everyone mapped every control segment too
        self.cma = all(o["ok"] for o in oks)
        del magic
        return ctrl

    # --- the data buffer --------------------------------------------------------------
    def _ensure_capacity(self, nbytes: int) -> None:
        if self._data is not None and self._data.nbytes >= nbytes:
            return
        cap = 1 << max(16, (max(nbytes, 1) - 1).bit_length())
        old = self._data
        self._data = Segment.create(cap)
        self._data_views = {}
        name = self._data.name.encode()
        self._mine[NAME_OFF:NAME_OFF + 64] = name.ljust(64, b"\0")
        self._me[CAP] = cap
        self._me[GEN] = self._me[GEN] + 1
        if old is not None:
            old.close()
        if self.nranks == 1:
            self._data.unlink()

    def _maybe_unlink(self) -> None:
        """Unlink the data segment once every peer has mapped it."""
        d = self._data
        if d is None or not d.linked:
            return
        gen = self._me[GEN]
        if all(self._progs[q][ACK + self.rank] == gen for q in range(self.nranks)
               if q != self.rank):
            d.unlink()

    def _view(self, dtype: dt.DType) -> np.ndarray:
        v = self._data_views.get(dtype.name)
        if v is None:
            data = self._data
            if data is None:
                raise TransportError(f"rank {self.rank}: no shared buffer yet (a call makes it "
                                     f"on entry)")
            v = np.frombuffer(data.mm, dtype=dtype.storage, count=data.nbytes // dtype.itemsize)
            self._data_views[dtype.name] = v
        return v

    def _peer_view(self, q: int, dtype: dt.DType) -> np.ndarray:
        gen = self._progs[q][GEN]
        hit = self._peer_views.get((q, dtype.name))
        if hit is not None and hit[0] == gen:
            return hit[1]
        seg = self._map_peer(q)
        v = np.frombuffer(seg.mm, dtype=dtype.storage, count=seg.nbytes // dtype.itemsize)
        self._peer_views[(q, dtype.name)] = (gen, v)
        return v

    def _map_peer(self, q: int) -> Segment:
        gen = self._progs[q][GEN]
        have = self._peer_data.get(q)
        if have is not None and have[0] == gen:
            return have[1]
        name = bytes(self._ctrls[q].mm[NAME_OFF:NAME_OFF + 64]).rstrip(b"\0").decode()
        seg = Segment.attach(name)
        if have is not None:
            have[1].close()
        self._peer_views = {k: v for k, v in self._peer_views.items() if k[0] != q}
        self._peer_data[q] = (gen, seg)
        self._c_map_peer(q, seg)
        self._me[ACK + q] = gen
        return seg

    @property
    def slice_bytes(self) -> int:
        """The slice of staged plans (`RuntimeOptions.slice_bytes`); settable, for tests."""
        return self.options.slice_bytes

    @slice_bytes.setter
    def slice_bytes(self, value: int) -> None:
        self.options = self.options.replace(slice_bytes=value)
        self._plans, self._interps, self._fast = {}, {}, {}

    # --- executing a schedule ---------------------------------------------------------
    def plan(self, schedule: Schedule, block_count: int, itemsize: int,
             in_place_root: bool = False, own: bool = False) -> tuple[ActionPlan, int]:
        """The compiled plan (`plan.plan_call`, as bench's predictor compiles it) and its
        hash for the call descriptor, cached by the arguments. `in_place_root`: the schedule's
        root calls in place (every rank must agree); `own`: this rank's own block is in place
        (`unalias`)."""
        key = (id(schedule), block_count, itemsize, in_place_root, own)
        hit = self._plans.get(key)
        if hit is None or hit[0] is not schedule:
            if len(self._plans) > 256:
                self._plans.clear()
            plan = plan_call(schedule, block_count, itemsize, self.options, self.cma,
                             in_place_root)
            # the whole plan goes into the call descriptor's hash: ranks whose settings
            # (slice sizes, push, streaming) would compile different plans fail the check
            hit = (schedule, own_block_in_place(plan, self.rank) if own else plan,
                   zlib.crc32(repr((plan.schedule_key, plan.actions)).encode()))
            self._plans[key] = hit
        return hit[1], hit[2]

    def execute(self, schedule: Schedule, inp: np.ndarray | None, out: np.ndarray | None,
                op: str = "sum", dtype: dt.DType | str = "float32",
                timeout: float | None = None) -> None:
        """Run `schedule` for this rank: `inp`/`out` are flat arrays (None where the rank has
        none), laid out as the collective's input and output block ranges.

        Every rank of the job must call `execute` with the same collective, algorithm, block
        size, dtype, op and root, in the same order; a difference raises TransportError on
        every rank.
        """
        if self.broken is not None:
            raise TransportError(f"rank {self.rank}: communicator is unusable after an earlier "
                                 f"error: {self.broken}")
        if not isinstance(dtype, dt.DType):
            dtype = dt.get_dtype(dtype)
        if self._ll is not None and self._ll_try(schedule, inp, out, op, dtype):
            return
        if self._fast and self._fast_call(schedule, inp, out, op, dtype, timeout):
            return
        coll, p = schedule.collective, self.nranks
        if schedule.nranks != p:
            raise ConfigError(f"schedule is for {schedule.nranks} ranks, the job has {p}")
        if coll.reduces and (op not in _UFUNC_OK or not dtype.is_float and op == "avg"):
            dt.check_op(op, dtype)
        bc = block_count(schedule, self.rank, inp, out)
        args, own = (inp, out), False
        if inp is not None and out is not None:
            inp, out, own = unalias(schedule, self.rank, bc, inp, out, self._input_copy)
        timeout = self.timeout if timeout is None else timeout
        try:
            call = self._run(schedule, bc, inp, out, op, dtype, timeout, own)
        except BaseException as e:
            self._fail(e)
            raise
        self._fast_store(call, *args, own=own)

    def _run(self, schedule: Schedule, bc: int, inp: np.ndarray | None,
             out: np.ndarray | None, op: str, dtype: dt.DType, timeout: float,
             own: bool = False) -> Call | None:
        """Run the call; return it where a later one like it may run in C (`shm_fast`)."""
        plan, algo_hash = self.plan(schedule, bc, dtype.itemsize, own=own)
        call = self._enter(schedule, plan, algo_hash, bc, inp, out, op, dtype, timeout)
        split = self._splits(schedule, bc, dtype)
        if split:
            call.plan = self._split_plan(call, bc)
        self._interpreter(dtype, op, schedule.collective.reduces).run(call)
        self._finish(call)
        return None if split else call

    def _finish(self, call: Call) -> None:
        """The end of a call: every rank checks every peer's call, even if it read none."""
        for q in range(self.nranks):
            if not call.checked[q]:
                self._wait(q, call.base, call.deadline)
                self._check_peer(q, call.desc, call.schedule, call.dtype, call.op)
        self._shm_read = call.plan.shm_read[self.rank]
        self._publish(call.base | DONE)

    def _interpreter(self, dtype: dt.DType, op: str, reduces: bool) -> Interpreter:
        key = (dtype.name, op, reduces)
        it = self._interps.get(key)
        if it is None:
            it = self._interps[key] = Interpreter(self, dtype, op, reduces)
        return it

    def _enter(self, schedule: Schedule, plan: ActionPlan, algo_hash: int, bc: int,
               inp: np.ndarray | None, out: np.ndarray | None, op: str, dtype: dt.DType,
               timeout: float) -> Call:
        """Start call seq+1: wait until no peer still reads this rank's buffers from the
        previous call (`_wait_previous`), then publish the call's descriptor and buffer
        addresses."""
        coll, p, me = schedule.collective, self.nranks, self.rank
        self.seq += 1
        seq = self.seq
        self._call = (coll.name, seq, timeout)
        deadline = time.monotonic() + timeout
        self._wait_previous(seq, deadline)
        self._ensure_capacity(plan.shm_elems * dtype.itemsize)
        self._maybe_unlink()
        desc = (seq, COLL_IDS[coll.name], algo_hash, p, schedule.root, bc,
                DTYPE_IDS[dtype.name], OP_IDS.get(op, 0) if coll.reduces else 0)
        in_addr, out_addr = memcopy.call_addresses(inp, out)
        for i, v in enumerate(desc):
            self._me[DESC + i] = v
        self._me[IN_ADDR], self._me[OUT_ADDR] = in_addr, out_addr
        self._me[IN_PLACE] = int(in_addr == out_addr)
        self._publish(seq << 32)
        checked = [q == me for q in range(p)]
        return Call(schedule, dtype, op, plan, seq, deadline, desc, checked,
                    [self._view(dtype), inp, out], in_addr, out_addr)

    def _splits(self, schedule: Schedule, bc: int, dtype: dt.DType) -> bool:
        """A broadcast from 1 MiB whose root may call in place: the root, idle while
        the others read, then writes a share into their outputs (`push.push_split`). Ranks
        learn whether it is in place in Python, so smaller ones run one plan, cached in C
        (2 ranks in place: 64 KiB 13.3 -> 4.6 us; 1 MiB 33 us split, 106 not)."""
        return self.options.push and schedule.collective.name == "broadcast" and \
            bc * dtype.itemsize >= 1 << 20 and self.nranks > 1 and \
            is_direct(schedule, bc, dtype.itemsize, self.options, self.cma and self.options.cma)

    def _split_plan(self, call: Call, bc: int) -> ActionPlan:
        """Only the root knows whether it calls in place: it says so in its control segment,
        and the others read it on entry."""
        root = call.schedule.root
        if root != self.rank:
            self._wait(root, call.base, call.deadline)
            self._check_peer(root, call.desc, call.schedule, call.dtype, call.op)
            call.checked[root] = True
        if self._progs[root][IN_PLACE]:
            return self.plan(call.schedule, bc, call.dtype.itemsize, in_place_root=True)[0]
        return call.plan

    def barrier(self, timeout: float | None = None) -> None:
        """No rank leaves before every rank has arrived."""
        # An empty schedule (entering a call and checking every peer's entry is a barrier),
        # made once: plans are cached by schedule identity, so a new one would recompile.
        if self._barrier is None:
            self._barrier = Schedule("barrier", self.nranks, "shm", 1, ())
        self.execute(self._barrier, None, None, timeout=timeout)

    def _fail(self, err: BaseException) -> None:
        if self.broken is None:
            self.broken = f"{type(err).__name__}: {err}"
        try:
            msg = str(err).encode()[:511]
            self._mine[MSG_OFF:MSG_OFF + 512] = msg.ljust(512, b"\0")
            self._me[STATE] = FAILED
        except (ValueError, TypeError):
            pass

    # --- shutting down ------------------------------------------------------------------
    def close(self) -> None:
        """Leave the job: mark this rank closed and remove its segments."""
        try:
            if self._me[STATE] == RUNNING:
                self._me[STATE] = CLOSED
        except ValueError:
            return
        self._data_views, self._peer_views = {}, {}
        self._ll_close()
        for seg in [self._data, *self._p2p_out.values()]:
            if seg is not None:
                seg.close()
        for _, seg in [*self._peer_data.values(), *self._p2p_in.values()]:
            seg.close()
        if self._ctrl is not None:  # always, once __init__ returned
            self._ctrl.unlink()


__all__ = ["ShmTransport", "pid_alive"]
