"""The shared-memory transport: executes any Schedule between processes on one host.

Each rank owns a *control* segment (counters it alone writes, read by everyone) and a *data*
segment holding its logical buffer (see `collectives`). A rank executes the ops whose
destination it is (`plan.compile_plan`), reading the source straight from the peer's mapped
buffer and reducing with numpy ufuncs (`out=`): no pickling, no intermediate copies. Chunks of
3 MiB and more skip the staging altogether where Linux allows cross-memory attach (`cma`): the
reader copies them out of the peer's own input or output array, one copy instead of two; and
where that balances the work or saves a pass over memory, a rank writes into a peer's output
instead (an idle broadcast root takes a share; on 2 ranks a reduced half goes to the peer
straight from cache, and so does an all-gather's own block) — see `push.push_split`,
`push.push_results` and `push.push_copies`. Large local copies in those plans use streaming
stores (`memcopy`), so an output nobody reads soon costs no read-for-ownership and does not
evict the input the rank is about to send on.

Synchronisation is one 64-bit counter per rank, `seq << 32 | actions done`: a dependency
"peer q has done k actions of call seq" is one load. Waits spin briefly, then yield, then sleep
with a growing interval, so more ranks than cores still progress; every wait has a deadline and,
while sleeping, checks that the peer is alive (pid), not failed and not closed.

Memory ordering: a counter is stored after the data it announces and read before that data.
x86-64 keeps stores and loads in program order (TSO), which is what this relies on.
"""
from __future__ import annotations

import os
import time
import zlib

import numpy as np

from .. import dtypes as dt
from ..collectives import COLLECTIVES
from ..errors import CommTimeout, ConfigError, TransportError
from ..schedule import Schedule
from . import cma, memcopy
from .actions import IN, OUT, PEER, PEER_IN, PEER_OUT
from .plan import compile_plan
from .push import fused_push, fused_result_push
from .segment import Segment, new_name, unlink_name
from .signals import trapped

DONE = 0xFFFFFFFF
# control segment layout, in int64 words
PROG, PID, STATE, GEN, CAP, IN_ADDR, OUT_ADDR = 0, 8, 9, 10, 11, 12, 13  # progress: own line
IN_PLACE = 14  # this call's input is its output (a broadcast root's peers read it)
WAITING = 15  # 1 + the rank this one is blocked on (0: none), so a timeout names the culprit
DESC = 16  # 8 words: seq, collective, algorithm hash, nranks, root, block count, dtype, op
ACK = 32  # + j: generation of rank j's data segment that this rank has mapped
P2P = 32 + 64  # + 4j: messages sent to j, their nbytes, dtype, generation of the segment for j
P2P_RECVD = P2P + 4 * 64  # + j: messages consumed from j
P2P_ACK = P2P_RECVD + 64  # + j: generation of j's segment-for-me that this rank has mapped
WORDS = P2P_ACK + 64
NAME_OFF = WORDS * 8  # 64 bytes: data segment name
P2P_NAME_OFF = NAME_OFF + 64  # + 64j: name of the segment for messages to j
MSG_OFF = P2P_NAME_OFF + 64 * 64  # 512 bytes: why this rank failed
CTRL_BYTES = MSG_OFF + 512
MAX_RANKS = 64

INIT, RUNNING, CLOSED, FAILED = 0, 1, 2, 3
# Chunks at least this large are read from the peer's own buffers by cross-memory attach
# (one copy) instead of being staged through shared memory (two copies).
DIRECT_MIN_BYTES = int(os.environ.get("GPUCOMM_DIRECT_MIN_BYTES", 3 << 20))
DIRECT_SLICE_BYTES = int(os.environ.get("GPUCOMM_DIRECT_SLICE_BYTES", 16 << 20))
# Staged chunks are cut into slices of this size so consecutive steps pipeline; 4 MiB copies
# are large enough for non-temporal stores (measured: 2 MiB pieces copy ~30% slower here).
SLICE_BYTES = int(os.environ.get("GPUCOMM_SLICE_BYTES", 4 << 20))
# A reduction read by cross-memory attach goes through a buffer this large, so the peer's
# piece, the sum and (pushed on to the peer) the result stay in the core's L2 cache
# (measured, 16 MiB all-reduce on 2 ranks: 1 MiB pieces 1.9 ms, 4 MiB pieces 2.5 ms).
PIECE_BYTES = int(os.environ.get("GPUCOMM_PIECE_BYTES", 1 << 20))
# Direct plans let a rank write into a peer's output where that saves a pass over memory or
# puts an idle core to work (`push.push_split`, `push.push_results`, `push.push_copies`);
# 0 turns that off.
PUSH = os.environ.get("GPUCOMM_PUSH", "1") != "0"
_UFUNC_OK = frozenset(dt.REDUCE_OPS)
DTYPE_IDS = {name: i for i, name in enumerate(dt.DTYPES)}
OP_IDS = {name: i for i, name in enumerate(dt.REDUCE_OPS)}
COLL_IDS = {name: i for i, name in enumerate(COLLECTIVES)}


class ShmTransport:
    """Executes schedules for one rank. Built by `gpucomm.init()`; see `execute`."""

    def __init__(self, rank: int, nranks: int, timeout: float, rendezvous=None,
                 slice_bytes: int = SLICE_BYTES):
        if nranks > MAX_RANKS:
            raise ConfigError(f"the shm transport serves at most {MAX_RANKS} ranks, got {nranks}")
        self.rank, self.nranks, self.timeout = rank, nranks, timeout
        self.slice_bytes = slice_bytes
        self.seq = 0
        self.cma = False
        # Spin briefly, then poll between sched_yield calls (as MPICH's progress engine does):
        # a rank that shares its core with the peer it waits for hands the core over at once.
        self._spin_s = 50e-6
        self.broken = None  # the error that broke this communicator
        self._plans: dict = {}
        self._tmp = None  # cache-sized buffer for reductions read by cross-memory attach
        self._data: Segment | None = None
        self._data_views: dict = {}
        self._peer_data: dict = {}  # q -> (gen, Segment)
        self._peer_views: dict = {}  # (q, dtype name) -> (gen, array)
        self._p2p_out: dict = {}  # dst -> Segment
        self._p2p_in: dict = {}  # src -> (gen, Segment)
        self._ctrls = [None] * nranks
        self._progs = [None] * nranks
        self.pids = [0] * nranks
        self._ctrl = None
        # Set-up is the one stretch where this rank's control segment has a name in /dev/shm
        # (peers map it by name). Names are announced before the segments exist, so when a
        # rank dies here the others remove every announced name as their set-up fails with
        # it; SIGTERM/SIGHUP (how torchrun stops ranks) unwind through the same path.
        names: list = []
        try:
            with _signals_exit():
                self._connect(rendezvous, names)
        except BaseException:
            if self._ctrl is not None:
                self._ctrl.close()
            for name in names:
                unlink_name(name)
            raise
        self._ctrl.unlink()
        for name in names:  # every rank mapped every one: a rank that died just now leaks none
            unlink_name(name)
        self._me[STATE] = RUNNING

    def _create_ctrl(self, name=None) -> None:
        self._ctrl = Segment.create(CTRL_BYTES, name)
        self._mine = self._ctrl.mm
        self._me = memoryview(self._mine).cast("q")
        self._me[PID] = os.getpid()
        self._me[PROG] = DONE  # "call 0 is finished"
        me = self.rank
        self._ctrls[me], self._progs[me], self.pids[me] = self._ctrl, self._me, os.getpid()

    def _connect(self, rendezvous, names: list) -> None:
        """Create this rank's control segment, map every peer's and agree on cross-memory
        attach; `names` collects the control-segment names announced so far."""
        rank, nranks = self.rank, self.nranks
        if nranks == 1:
            self._create_ctrl()
            return
        mine = new_name()
        names.append(mine)
        info = rendezvous.allgather({"ctrl": mine, "pid": os.getpid(),
                                     "host": os.uname().nodename})
        names[:] = [i["ctrl"] for i in info]
        self._create_ctrl(mine)
        rendezvous.allgather({"created": True})
        hosts = {i["host"] for i in info}
        if len(hosts) > 1:
            raise TransportError(f"the shm transport needs every rank on one host; ranks run "
                                 f"on {', '.join(sorted(hosts))}")
        for q, i in enumerate(info):
            if q != rank:
                self._ctrls[q] = Segment.attach(i["ctrl"])
                self._progs[q] = memoryview(self._ctrls[q].mm).cast("q")
                self.pids[q] = i["pid"]
        # Cross-memory attach only if every rank can read every peer (and nobody opted out).
        magic = np.frombuffer(os.urandom(16), np.uint8).copy()
        addr = magic.__array_interface__["data"][0]
        want = os.environ.get("GPUCOMM_CMA", "1") != "0"
        probes = rendezvous.allgather({"addr": addr, "magic": magic.tobytes().hex(),
                                       "want": want})
        ok = want and all(cma.probe(self.pids[q], pr["addr"], bytes.fromhex(pr["magic"]))
                          for q, pr in enumerate(probes) if q != rank)
        oks = rendezvous.allgather({"ok": ok})  # everyone mapped every control segment too
        self.cma = all(o["ok"] for o in oks)
        del magic

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
            v = np.frombuffer(self._data.mm, dtype=dtype.storage,
                              count=self._data.nbytes // dtype.itemsize)
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
        self._me[ACK + q] = gen
        return seg

    # --- executing a schedule ---------------------------------------------------------
    def plan(self, schedule: Schedule, block_count: int, itemsize: int, in_place_root=False):
        """The compiled plan and the schedule's hash for the call descriptor (cached).
        `in_place_root`: the schedule's root calls in place (every rank must agree)."""
        key = (id(schedule), block_count, itemsize, in_place_root)
        hit = self._plans.get(key)
        if hit is None or hit[0] is not schedule:
            if len(self._plans) > 256:
                self._plans.clear()
            chunk_bytes = block_count * itemsize // schedule.chunks_per_block
            direct = self.cma and chunk_bytes >= DIRECT_MIN_BYTES
            # Direct reads need no pipelining through staging slices: big pieces make fewer
            # calls and let large copies use non-temporal stores.
            slice_bytes = DIRECT_SLICE_BYTES if direct else self.slice_bytes
            plan = compile_plan(schedule, block_count,
                                slice_elems=max(1, slice_bytes // itemsize), direct=direct,
                                push_root=schedule.root if in_place_root else None,
                                push=PUSH, stream=memcopy.ENABLED)
            # the whole plan goes into the call descriptor's hash: ranks whose settings
            # (slice sizes, push, streaming) would compile different plans fail the check
            hit = (schedule, plan, zlib.crc32(repr((plan.schedule_key, plan.actions)).encode()))
            self._plans[key] = hit
        return hit[1], hit[2]

    def execute(self, schedule: Schedule, inp, out, op: str = "sum", dtype="float32",
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
        coll, p = schedule.collective, self.nranks
        if schedule.nranks != p:
            raise ConfigError(f"schedule is for {schedule.nranks} ranks, the job has {p}")
        if coll.reduces and (op not in _UFUNC_OK or not dtype.is_float and op == "avg"):
            dt.check_op(op, dtype)
        bc = _block_count(schedule, self.rank, inp, out)
        if inp is not None and out is not None:
            inp, out = _unalias(schedule, self.rank, bc, inp, out)
        timeout = self.timeout if timeout is None else timeout
        try:
            self._run(schedule, bc, inp, out, op, dtype, timeout)
        except BaseException as e:
            self._fail(e)
            raise

    def _run(self, schedule, bc, inp, out, op, dtype, timeout) -> None:
        coll, p, me = schedule.collective, self.nranks, self.rank
        plan, algo_hash = self.plan(schedule, bc, dtype.itemsize)
        # A large broadcast whose root calls in place leaves the root idle while the others
        # read: let it write a share into their outputs (`push.push_split`). Only the root
        # knows, so it says so in its control segment and the others read it on entry.
        split = PUSH and coll.name == "broadcast" and p > 1 and self.cma and \
            bc * dtype.itemsize // schedule.chunks_per_block >= DIRECT_MIN_BYTES
        self.seq += 1
        seq = self.seq
        base = seq << 32
        self._call = (coll.name, seq, timeout)
        deadline = time.monotonic() + timeout
        # Nobody may still read my buffer from the previous call when I overwrite it.
        for q in range(p):
            if q != me:
                self._wait(q, ((seq - 1) << 32) | DONE, deadline)
        self._ensure_capacity(plan.shm_elems * dtype.itemsize)
        self._maybe_unlink()
        desc = (seq, COLL_IDS[coll.name], algo_hash, p,
                schedule.root, bc, DTYPE_IDS[dtype.name], OP_IDS.get(op, 0) if coll.reduces else 0)
        isz = dtype.itemsize
        in_addr = inp.__array_interface__["data"][0] if inp is not None else -1
        out_addr = out.__array_interface__["data"][0] if out is not None else -2
        for i, v in enumerate(desc):
            self._me[DESC + i] = v
        self._me[IN_ADDR], self._me[OUT_ADDR] = in_addr, out_addr
        self._me[IN_PLACE] = int(in_addr == out_addr)
        self._me[PROG] = base
        checked = [False] * p
        checked[me] = True
        if split:
            root = schedule.root
            if root != me:
                self._wait(root, base, deadline)
                self._check_peer(root, desc, schedule, dtype, op)
                checked[root] = True
            if self._progs[root][IN_PLACE]:
                plan, _ = self.plan(schedule, bc, dtype.itemsize, in_place_root=True)
        arrs = [self._view(dtype), inp, out]
        tmp = None
        ufunc = dt.UFUNCS[op] if coll.reduces else None
        native = dtype.compute == dtype.storage
        progs, mine = self._progs, self._me
        acts, skip = plan.actions[me], -1
        for i, (red, sl, sr, slo, dl, dlo, n, cl, clo, deps) in enumerate(acts):
            if i == skip:
                continue
            self._await(deps, checked, base, deadline, desc, schedule, dtype, op)
            if sl >= PEER_IN:  # the peer's private buffer: one cross-memory copy
                raddr = progs[sr][IN_ADDR if sl == PEER_IN else OUT_ADDR] + slo * isz
                if not red:
                    dst = arrs[dl]
                    self._cma(sr, raddr, dst.__array_interface__["data"][0] + dlo * isz,
                              n * isz)
                    mine[PROG] = base | (i + 1)
                    continue
                # reduce piece by piece through a cache-sized buffer; where the next action
                # writes the result into the peer's output (push.push_results), write each
                # piece right after reducing it, while it is still in cache
                nxt = acts[i + 1] if i + 1 < len(acts) else None
                fused = None
                if fused_result_push(acts[i], nxt):
                    self._await(nxt[9], checked, base, deadline, desc, schedule, dtype, op)
                    fused = (nxt[2], progs[nxt[2]][OUT_ADDR] + nxt[5] * isz)
                step = max(1, min(self.slice_bytes, PIECE_BYTES) // isz)
                if tmp is None:  # one buffer for the communicator's life: no per-call malloc
                    if self._tmp is None:
                        self._tmp = np.empty(max(min(self.slice_bytes, PIECE_BYTES), 64),
                                             np.uint8)
                    tmp = self._tmp[:step * isz].view(dtype.storage)
                cur, dsts = arrs[cl], arrs[dl]
                for j in range(0, n, step):
                    m = min(step, n - j)
                    self._cma(sr, raddr + j * isz, tmp.__array_interface__["data"][0], m * isz)
                    if native:
                        ufunc(cur[clo + j:clo + j + m], tmp[:m], out=dsts[dlo + j:dlo + j + m])
                    else:
                        dsts[dlo + j:dlo + j + m] = dt.to_storage(ufunc(
                            dt.to_compute(cur[clo + j:clo + j + m], dtype),
                            dt.to_compute(tmp[:m], dtype)), dtype)
                    if fused is not None:
                        self._cma(fused[0], fused[1] + j * isz,
                                  dsts.__array_interface__["data"][0] + (dlo + j) * isz,
                                  m * isz, write=True)
                mine[PROG] = base | (i + 1)
                if fused is not None:
                    mine[PROG] = base | (i + 2)
                    skip = i + 1
                continue
            elif dl == PEER_OUT:  # push into the peer's output: one cross-memory write
                self._cma(sr, progs[sr][OUT_ADDR] + dlo * isz,
                          arrs[sl].__array_interface__["data"][0] + slo * isz, n * isz,
                          write=True)
                mine[PROG] = base | (i + 1)
                continue
            else:
                src = self._peer_view(sr, dtype) if sl == PEER else arrs[sl]
            dst = arrs[dl]
            if not red:
                nxt = acts[i + 1] if i + 1 < len(acts) else None
                if fused_push(acts[i], nxt):
                    # the copy goes on to the peer (push.push_copies): copy a piece past the
                    # cache, then write it to the peer from the source, which is still cached
                    self._await(nxt[9], checked, base, deadline, desc, schedule, dtype, op)
                    q, raddr = nxt[2], progs[nxt[2]][OUT_ADDR] + nxt[5] * isz
                    saddr = src.__array_interface__["data"][0] + slo * isz
                    daddr = dst.__array_interface__["data"][0] + dlo * isz
                    step = n if saddr == daddr else max(1, PIECE_BYTES // isz)
                    for j in range(0, n, step):
                        m = min(step, n - j) * isz
                        if saddr != daddr:
                            memcopy.copy(daddr + j * isz, saddr + j * isz, m)
                        self._cma(q, raddr + j * isz, saddr + j * isz, m, write=True)
                    mine[PROG] = base | (i + 2)
                    skip = i + 1
                    continue
                if sl == IN and dl == OUT and in_addr + slo * isz == out_addr + dlo * isz:
                    pass  # in place: the input already sits where the output goes
                elif plan.direct:
                    # direct plans' copies are large (beyond what stays cached until anyone
                    # reads them): `memcopy` streams them past the cache, which keeps what
                    # this rank reuses
                    memcopy.copy(dst.__array_interface__["data"][0] + dlo * isz,
                                 src.__array_interface__["data"][0] + slo * isz, n * isz)
                else:
                    dst[dlo:dlo + n] = src[slo:slo + n]
            elif native:
                ufunc(arrs[cl][clo:clo + n], src[slo:slo + n], out=dst[dlo:dlo + n])
            else:
                dst[dlo:dlo + n] = dt.to_storage(ufunc(dt.to_compute(arrs[cl][clo:clo + n], dtype),
                                                       dt.to_compute(src[slo:slo + n], dtype)),
                                                 dtype)
            mine[PROG] = base | (i + 1)
        if coll.reduces and op == "avg" and out is not None:
            dt.finish_avg(out, p, dtype)
        for q in range(p):  # every rank checks every peer's call, even if it read none
            if not checked[q]:
                self._wait(q, base, deadline)
                self._check_peer(q, desc, schedule, dtype, op)
        mine[PROG] = base | DONE

    def _cma(self, q: int, remote: int, local: int, nbytes: int, write=False) -> None:
        try:
            (cma.write if write else cma.read)(self.pids[q], remote, local, nbytes)
        except TransportError as e:
            self._check_alive(q, 1 << 62, PROG)  # names the rank if it died
            what = "writing" if write else "reading"
            raise TransportError(f"rank {self.rank}: {what} rank {q}'s buffer: {e}") from None

    def barrier(self, timeout: float | None = None) -> None:
        """No rank leaves before every rank has arrived."""
        # An empty schedule: entering a call and checking every peer's entry is a barrier.
        sched = Schedule("barrier", self.nranks, "shm", 1, ())
        self.execute(sched, None, None, timeout=timeout)

    # --- checks -------------------------------------------------------------------------
    def _check_peer(self, q, desc, schedule, dtype, op) -> None:
        theirs = tuple(self._progs[q][DESC + i] for i in range(len(desc)))
        if theirs[0] != desc[0]:
            return  # cannot happen while the counters are consistent
        if theirs[1:] != desc[1:]:
            raise TransportError(
                f"collective mismatch at call #{desc[0]}: rank {self.rank} called "
                f"{_describe(desc, schedule)} but rank {q} called {_describe(theirs)}")
        self._map_peer(q)  # map a grown buffer now, so its owner can unlink the name

    def _await(self, deps, checked, base, deadline, desc, schedule, dtype, op) -> None:
        """Wait until every (peer q, action count k) in `deps` holds; the first wait on a
        peer in a call also checks that it runs the same collective."""
        progs = self._progs
        for q, k in deps:
            if not checked[q]:
                self._wait(q, base, deadline)
                self._check_peer(q, desc, schedule, dtype, op)
                checked[q] = True
            if k and progs[q][PROG] < (base | k):
                self._wait(q, base | k, deadline)

    def _wait(self, q: int, need: int, deadline: float, word: int = PROG) -> None:
        prog = self._progs[q]
        if prog[word] >= need:
            return
        # Spin a few microseconds (the peer is usually about to publish), then yield the core
        # for a while (oversubscribed ranks need it to progress), then sleep, checking
        # liveness and the deadline every 20 ms.
        t0 = time.perf_counter()
        spin_until = t0 + self._spin_s
        while time.perf_counter() < spin_until:
            for _ in range(32):
                if prog[word] >= need:
                    return
        yield_until = t0 + 0.02
        pause, next_check = 50e-6, time.monotonic() + 0.02
        self._me[WAITING] = q + 1
        try:
            while prog[word] < need:
                now = time.monotonic()
                if now >= next_check:
                    self._check_alive(q, need, word)
                    if now >= deadline:
                        self._unlink_peer(q)  # the job is over: q may never run again
                        raise CommTimeout(self._timeout_text(q, need, word))
                    next_check = now + 0.02
                if time.perf_counter() < yield_until:
                    os.sched_yield()
                    for _ in range(32):
                        if prog[word] >= need:
                            return
                else:
                    time.sleep(pause)
                    pause = min(pause * 1.5, 1e-3)
        finally:
            self._me[WAITING] = 0

    def _check_alive(self, q: int, need: int, word: int) -> None:
        prog = self._progs[q]
        if prog[word] >= need:
            return
        state = prog[STATE]
        what = self._what()
        if state == FAILED:
            msg = bytes(self._ctrls[q].mm[MSG_OFF:MSG_OFF + 512]).rstrip(b"\0").decode(
                errors="replace")
            raise TransportError(f"rank {self.rank}: rank {q} failed{what}: {msg}")
        if state == CLOSED:
            raise TransportError(f"rank {self.rank}: rank {q} has shut down{what} "
                                 f"(it left the job before this call)")
        if not pid_alive(self.pids[q]):
            self._unlink_peer(q)
            raise TransportError(f"rank {self.rank}: rank {q} (pid {self.pids[q]}) died{what} "
                                 f"(killed or crashed)")

    def _what(self) -> str:
        call = getattr(self, "_call", None)
        return f" during {call[0]} call #{call[1]}" if call else ""

    def _timeout_text(self, q, need, word) -> str:
        have = self._progs[q][word]
        call = getattr(self, "_call", ("?", 0, self.timeout))
        if word == PROG:
            qseq, qdone = have >> 32, have & DONE
            where = (f"rank {q} is still in call #{qseq}" if qseq < (need >> 32) else
                     f"rank {q} has done {qdone} of the {need & DONE} actions this waits for")
        else:
            where = f"rank {q} has not sent/received the message"
        chain = [q]  # q may itself be blocked on another rank: follow to the one that is not
        while 0 < self._progs[chain[-1]][WAITING] <= self.nranks:
            nxt = self._progs[chain[-1]][WAITING] - 1
            if nxt == self.rank or nxt in chain:
                break
            chain.append(nxt)
        if len(chain) > 1:
            where += "; " + ", ".join(f"rank {a} waits for rank {b}"
                                      for a, b in zip(chain, chain[1:]))
            where += f": rank {chain[-1]} makes no progress (stopped or stuck?)"
        return (f"rank {self.rank}: {call[0]} call #{call[1]} timed out after {call[2]:g}s "
                f"waiting for rank {q} ({where}); raise the limit with gpucomm.init(timeout=) "
                f"or GPUCOMM_TIMEOUT")

    def _unlink_peer(self, q: int) -> None:
        """A dead (or hopelessly stuck) rank cannot unlink its own segments: do it for it."""
        try:
            mm = self._ctrls[q].mm
            unlink_name(bytes(mm[NAME_OFF:NAME_OFF + 64]).rstrip(b"\0").decode())
            for j in range(self.nranks):
                off = P2P_NAME_OFF + 64 * j
                unlink_name(bytes(mm[off:off + 64]).rstrip(b"\0").decode())
        except (ValueError, UnicodeDecodeError):
            pass

    def _fail(self, err: BaseException) -> None:
        if self.broken is None:
            self.broken = f"{type(err).__name__}: {err}"
        try:
            msg = str(err).encode()[:511]
            self._mine[MSG_OFF:MSG_OFF + 512] = msg.ljust(512, b"\0")
            self._me[STATE] = FAILED
        except (ValueError, TypeError):
            pass

    # --- point to point -----------------------------------------------------------------
    def send(self, arr: np.ndarray, dst: int, dtype: dt.DType, timeout=None) -> None:
        """Buffered send: returns once the data sits in shared memory for `dst`."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._call = ("send", int(self._me[P2P + 4 * dst]) + 1, deadline - time.monotonic())
        k = self._me[P2P + 4 * dst] + 1
        try:
            self._wait(dst, k - 1, deadline, word=P2P_RECVD + self.rank)
            seg = self._p2p_out.get(dst)
            nbytes = arr.nbytes
            if seg is None or seg.nbytes < nbytes:
                if seg is not None:
                    seg.close()
                seg = Segment.create(1 << max(12, (max(nbytes, 1) - 1).bit_length()))
                self._p2p_out[dst] = seg
                off = P2P_NAME_OFF + 64 * dst
                self._mine[off:off + 64] = seg.name.encode().ljust(64, b"\0")
                self._me[P2P + 4 * dst + 3] += 1
            np.frombuffer(seg.mm, np.uint8, nbytes)[:] = arr.view(np.uint8).reshape(-1)
            self._me[P2P + 4 * dst + 1] = nbytes
            self._me[P2P + 4 * dst + 2] = DTYPE_IDS[dtype.name]
            self._me[P2P + 4 * dst] = k
            if self._progs[dst][P2P_ACK + self.rank] == self._me[P2P + 4 * dst + 3]:
                seg.unlink()
        except BaseException as e:
            self._fail(e)
            raise

    def recv(self, arr: np.ndarray, src: int, dtype: dt.DType, timeout=None) -> None:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        k = self._me[P2P_RECVD + src] + 1
        self._call = ("recv", k, deadline - time.monotonic())
        try:
            self._wait(src, k, deadline, word=P2P + 4 * self.rank)
            peer = self._progs[src]
            nbytes, dtype_id = peer[P2P + 4 * self.rank + 1], peer[P2P + 4 * self.rank + 2]
            if nbytes != arr.nbytes or dtype_id != DTYPE_IDS[dtype.name]:
                sent = list(DTYPE_IDS)[dtype_id]
                raise TransportError(f"rank {self.rank}: recv from rank {src} expects "
                                     f"{arr.nbytes} B of {dtype.name}, rank {src} sent "
                                     f"{nbytes} B of {sent}")
            gen = peer[P2P + 4 * self.rank + 3]
            have = self._p2p_in.get(src)
            if have is None or have[0] != gen:
                off = P2P_NAME_OFF + 64 * self.rank
                name = bytes(self._ctrls[src].mm[off:off + 64]).rstrip(b"\0").decode()
                if have is not None:
                    have[1].close()
                have = (gen, Segment.attach(name))
                self._p2p_in[src] = have
                self._me[P2P_ACK + src] = gen
            arr.view(np.uint8).reshape(-1)[:] = np.frombuffer(have[1].mm, np.uint8, nbytes)
            self._me[P2P_RECVD + src] = k
        except BaseException as e:
            self._fail(e)
            raise

    # --- shutting down ------------------------------------------------------------------
    def close(self) -> None:
        """Leave the job: mark this rank closed and remove its segments."""
        try:
            if self._me[STATE] == RUNNING:
                self._me[STATE] = CLOSED
        except ValueError:
            return
        self._data_views, self._peer_views = {}, {}
        for seg in [self._data, *self._p2p_out.values()]:
            if seg is not None:
                seg.close()
        for _, seg in [*self._peer_data.values(), *self._p2p_in.values()]:
            seg.close()
        self._ctrl.unlink()


def _signals_exit():
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) while the block runs (main thread
    only, and only where the default action would kill the process), so cleanup runs."""
    return trapped(lambda signum: SystemExit(128 + signum), only_default=True)


def pid_alive(pid: int) -> bool:
    """False for a process that is gone or a zombie (killed, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _block_count(schedule: Schedule, rank: int, inp, out) -> int:
    coll, p, root = schedule.collective, schedule.nranks, schedule.root
    counts = []
    for name, arr, rng in (("input", inp, coll.inputs(rank, p, root)),
                           ("output", out, coll.outputs(rank, p, root))):
        if rng is None:
            continue
        if arr is None:
            raise ConfigError(f"rank {rank}: {coll.name} needs an {name} buffer on this rank")
        if arr.size % rng[1]:
            raise ConfigError(f"rank {rank}: {coll.name} {name} of {arr.size} elements does not "
                              f"divide into {rng[1]} blocks (one per rank)")
        counts.append((name, arr.size // rng[1]))
    if len({c for _, c in counts}) > 1:
        raise ConfigError(f"rank {rank}: {coll.name} buffers disagree: " + ", ".join(
            f"{name} has {c} elements per block" for name, c in counts))
    return counts[0][1] if counts else 0


def _unalias(schedule, rank, bc, inp, out):
    """In-place calls must map each logical chunk to one address; other overlaps get a copy."""
    coll = schedule.collective
    irng = coll.inputs(rank, schedule.nranks, schedule.root)
    orng = coll.outputs(rank, schedule.nranks, schedule.root)
    if irng is None or orng is None:  # the rank has no such buffer: ignore the other one
        return (inp if irng else None), (out if orng else None)
    if inp is out:
        if irng[0] == orng[0]:
            return inp, out
    elif not np.may_share_memory(inp, out):
        return inp, out
    a_in = inp.__array_interface__["data"][0]
    a_out = out.__array_interface__["data"][0]
    if a_in - a_out == (irng[0] - orng[0]) * bc * inp.itemsize:
        return inp, out
    return inp.copy(), out


def _describe(desc, schedule=None) -> str:
    _, coll, algo, p, root, bc, dtype, op = desc
    cname = list(COLL_IDS)[coll] if 0 <= coll < len(COLL_IDS) else f"collective #{coll}"
    text = f"{cname}({list(DTYPE_IDS)[dtype]}, {bc} elements per block"
    c = COLLECTIVES.get(cname)
    if c is not None and c.reduces:
        text += f", op {dt.REDUCE_OPS[op]}"
    if c is not None and c.rooted:
        text += f", root {root}"
    if schedule is not None:
        text += f", algorithm {schedule.algorithm}"
    else:
        text += f", algorithm hash {algo:08x}"
    return text + ")"
