"""The communicator: a torch.distributed-like API that turns each call into a Schedule and
hands it to a transport (`execute(schedule, inp, out, op, dtype, timeout)`).

    import gpucomm
    comm = gpucomm.init()               # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    x = np.full(4, comm.rank, np.float32)
    comm.all_reduce(x)                  # rank 0 and 1 (of 2): array([1., 1., 1., 1.])
"""
from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache, partial
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..algorithms import REGISTRY, build
from ..collectives import get_collective
from ..errors import ConfigError, GpucommError, TransportError
from ..schedule import Schedule
from .arrays import DTYPE_OF, as_flat
from .contracts import Transport
from .work import DONE, Work

# "auto": what works best on shared memory, where a rank reads any peer directly. Few large
# direct rounds beat many small ring steps (each step costs a synchronisation, not bandwidth);
# one-shot wins for small messages, where latency is all there is.
SMALL_BYTES = 32 << 10
DIRECT_BCAST_BYTES = 4 << 20
PREFERENCE = {
    "all_reduce": (("one_shot", "recursive_doubling", "ring"), ("two_shot", "ring")),
    "reduce_scatter": (("direct", "ring"), ("direct", "ring")),
    "all_gather": (("direct", "ring"), ("direct", "ring")),
    "broadcast": (("direct", "binomial_tree", "ring"), ("direct", "ring")),
    "reduce": (("direct", "binomial_tree", "ring"), ("direct", "ring")),
    "all_to_all": (("direct", "bruck"), ("direct", "bruck")),
    "gather": (("direct", "binomial_tree"), ("direct", "binomial_tree")),
    "scatter": (("direct", "binomial_tree"), ("direct", "binomial_tree")),
    "sendrecv": (("direct",), ("direct",)),
}


def choose_algorithm(collective, nbytes: int, nranks: int, direct: bool = False,
                     small_message_bytes: int = 0) -> str:
    """The algorithm `auto` runs: by collective, message size and rank count (deterministic,
    so every rank picks the same one). `direct`: the transport reads large chunks straight
    from the peers' buffers, so a large broadcast is best read whole (one copy per rank, the
    root idle) rather than pipelined through staging chunks (two copies of every byte); on 2
    ranks at every size, where a pipeline has no one to forward to (64 KiB: 4.7 against
    13.0 us; 1 MiB 28 against 41 us in place, the whole call in C). And a 2-rank all-reduce
    beyond the small-message path (`small_message_bytes`: its reach, one_shot up to there)
    runs two_shot: in place, one_shot waits for the peer's read of its input before writing
    (medians of 5 paired rounds: 32 KiB 5.9 against 12.1 us, 16 KiB 5.6 against 8.1; out of
    place 5.5 against 6.1 and 5.6 against 4.6; 4-8 KiB even or better)."""
    coll = get_collective(collective).name
    small, large = PREFERENCE.get(coll, ((), ()))
    if direct and coll == "broadcast" and _bcast_whole(nbytes, nranks):
        large = ("binomial_tree", *large)
    if direct and coll == "all_reduce" and nranks == 2 and nbytes > small_message_bytes:
        small = ("two_shot", *small)
    for name in (small if nbytes <= SMALL_BYTES else large):
        if (coll, name) in REGISTRY:
            return name
    names = [n for (c, n) in REGISTRY if c == coll]
    if not names:
        raise ConfigError(f"no algorithm is registered for {coll}")
    return names[0]


def _bcast_whole(nbytes: int, nranks: int) -> bool:
    return nranks == 2 or nbytes >= DIRECT_BCAST_BYTES


@lru_cache(maxsize=512)
def _schedule(coll: str, name: str, nranks: int, root: int) -> Schedule:
    return build(coll, name, nranks, root=root).materialize()


_GENERAL = object()  # `Communicator._straight`: not run, the general path takes the call


class Communicator:
    """Collectives among the ranks of one job. Build it with `gpucomm.init()`.

    Buffers: numpy arrays, CPU torch tensors, anything with the buffer protocol or DLPack;
    C-contiguous; every rank passes the same sizes and dtype. bfloat16 comes from torch
    tensors or `dtype="bfloat16"` on uint16 arrays.

    Threads: a communicator serves the thread that created it; a call from any other thread
    raises ConfigError before anything reaches a peer. Calls meet across ranks in program
    order, and two threads cannot promise one order on every rank, so a lock would only turn
    wrong answers into differently wrong ones. `async_op=True` runs calls in the background
    in order. (`any_thread=True`, used by the torch backend, serialises calls from every
    thread instead: torch.distributed's contract that every rank issues them in one order.)
    """

    def __init__(self, rank: int, world_size: int, transport: Transport, timeout: float,
                 local_rank: int | None = None, any_thread: bool = False):
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        self.local_rank = rank if local_rank is None else local_rank
        self.transport = transport
        self.any_thread = any_thread
        self._owner = threading.get_ident()
        self._pid = os.getpid()   # a forked child shares the segments, never the calls
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self._schedules: dict[tuple[Any, ...], Schedule] = {}
        self._pending: list[Future[Any]] = []
        self._lock = threading.Lock()
        # the transport's small-message all-reduce (shm): tried first by a blocking `auto`
        # all_reduce of a numpy array from the owner thread; it declines what it cannot take
        self._ll = getattr(transport, "ll_all_reduce", None)
        # calls up to this size run on the calling thread when nothing is queued (`_submit`):
        # on shm the one-shot sizes, where handing a call to the worker costs more than the
        # call (torch backend, DDP on 2 ranks, 16.6 KiB buckets: 1.61-1.65 ms a step handed
        # over, 1.23-1.27 run inline; such a call takes 10 us alone)
        self._inline_bytes = SMALL_BYTES if hasattr(transport, "small_message_bytes") else 0
        self._last: Future[Any] | None = None  # the worker's last call (FIFO: done = all done)
        atexit.register(self.close)

    @property
    def size(self) -> int:
        return self.world_size

    # --- collectives --------------------------------------------------------------------
    def all_reduce(self, buf, op="sum", *, algorithm="auto", async_op=False, dtype=None):
        """In place: every rank ends with the reduction of every rank's `buf`.

        >>> # Rank 0: x = [1, 2]   Rank 1: x = [10, 20]
        >>> # comm.all_reduce(x)   both ranks: x = [11, 22]
        """
        bf16 = dtype == "bfloat16"  # uint16 bits; any other dtype goes the checked way
        now = self._now(buf, algorithm, async_op)
        if now and self._ll is not None and (dtype is None or bf16 and buf.dtype == np.uint16) \
                and self._ll(buf, buf, op, bf16):
            return None
        res = self._straight("all_reduce", buf, buf, op, 0, algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        a, d = as_flat(buf, "buf", dtype)
        return self._call("all_reduce", a, a, op, d, algorithm, 0, async_op)

    def reduce_scatter(self, out, inp, op="sum", *, algorithm="auto", async_op=False,
                       dtype=None):
        """Rank r ends with block r (of P equal blocks) of the reduction of every `inp`."""
        res = self._straight("reduce_scatter", inp, out, op, 0, algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        o, d = as_flat(out, "out", dtype)
        i, _ = as_flat(inp, "inp", d)
        return self._call("reduce_scatter", i, o, op, d, algorithm, 0, async_op)

    def all_gather(self, out, inp, *, algorithm="auto", async_op=False, dtype=None):
        """`out` = every rank's `inp`, concatenated in rank order."""
        res = self._straight("all_gather", inp, out, "sum", 0, algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        o, d = as_flat(out, "out", dtype)
        i, _ = as_flat(inp, "inp", d)
        return self._call("all_gather", i, o, "sum", d, algorithm, 0, async_op)

    def broadcast(self, buf, root=0, *, algorithm="auto", async_op=False, dtype=None):
        """Every rank's `buf` becomes the root's."""
        res = self._straight("broadcast", buf if self.rank == root else None, buf, "sum", root,
                             algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        a, d = as_flat(buf, "buf", dtype)
        return self._call("broadcast", a if self.rank == root else None, a, "sum", d,
                          algorithm, root, async_op)

    def reduce(self, buf, root=0, op="sum", *, algorithm="auto", async_op=False, dtype=None):
        """The root's `buf` becomes the reduction of every rank's; the others' are unchanged."""
        res = self._straight("reduce", buf, buf if self.rank == root else None, op, root,
                             algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        a, d = as_flat(buf, "buf", dtype)
        return self._call("reduce", a, a if self.rank == root else None, op, d, algorithm,
                          root, async_op)

    def all_to_all(self, out, inp, *, algorithm="auto", async_op=False, dtype=None):
        """Block j of rank i's `inp` becomes block i of rank j's `out`."""
        res = self._straight("all_to_all", inp, out, "sum", 0, algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        o, d = as_flat(out, "out", dtype)
        i, _ = as_flat(inp, "inp", d)
        return self._call("all_to_all", i, o, "sum", d, algorithm, 0, async_op)

    def gather(self, out, inp, root=0, *, algorithm="auto", async_op=False, dtype=None):
        """The root's `out` = every rank's `inp` in rank order (`out` may be None elsewhere)."""
        res = self._straight("gather", inp, out if self.rank == root else None, "sum", root,
                             algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        i, d = as_flat(inp, "inp", dtype)
        o = as_flat(out, "out", d)[0] if self.rank == root else None
        return self._call("gather", i, o, "sum", d, algorithm, root, async_op)

    def scatter(self, out, inp=None, root=0, *, algorithm="auto", async_op=False, dtype=None):
        """Rank r's `out` = block r of the root's `inp` (`inp` may be None elsewhere)."""
        res = self._straight("scatter", inp if self.rank == root else None, out, "sum", root,
                             algorithm, async_op, dtype)
        if res is not _GENERAL:
            return res
        o, d = as_flat(out, "out", dtype)
        i = as_flat(inp, "inp", d)[0] if self.rank == root else None
        return self._call("scatter", i, o, "sum", d, algorithm, root, async_op)

    def barrier(self, *, async_op=False):
        """No rank returns before every rank has called it."""
        return self._submit(self.transport.barrier, async_op, inline=True)

    def send(self, buf, peer: int, *, dtype=None, async_op=False):
        """Send `buf` to `peer`, which must `recv` a buffer of the same size and dtype."""
        a, d = as_flat(buf, "buf", dtype)
        self._check_peer(peer)
        return self._submit(lambda: self.transport.send(a, peer, d), async_op)

    def recv(self, buf, peer: int, *, dtype=None, async_op=False):
        """Receive into `buf` what `peer` sends."""
        a, d = as_flat(buf, "buf", dtype)
        self._check_peer(peer)
        return self._submit(lambda: self.transport.recv(a, peer, d), async_op)

    # --- machinery ----------------------------------------------------------------------
    def schedule(self, collective, nbytes: int, algorithm="auto", root=0) -> Schedule:
        """The schedule a call runs (`auto` resolved by size and rank count), remembered per
        call shape (the transport's reach and cross-memory attach are fixed at start-up)."""
        key = (collective, nbytes, algorithm, root)
        sched = self._schedules.get(key)
        if sched is None:
            if len(self._schedules) > 512:
                self._schedules.clear()
            coll = get_collective(collective).name
            name = choose_algorithm(coll, nbytes, self.world_size,
                                    getattr(self.transport, "cma", False),
                                    getattr(self.transport, "small_message_bytes", 0)) \
                if algorithm == "auto" else algorithm
            sched = self._schedules[key] = _schedule(coll, name, self.world_size, root)
        return sched

    def _now(self, buf, algorithm, async_op) -> bool:
        """A blocking `auto` call on a numpy array from the owner thread, nothing queued: on
        a flat one (`arrays.is_flat`) it goes to the transport at once, as `_call` would send
        it (2 ranks, 1 MiB all-reduce: 85 -> 72-74 us a call, the transport's own 67-70)."""
        return buf.__class__ is np.ndarray and algorithm == "auto" and not async_op and \
            not self.any_thread and not self._pending and not self._closed and \
            threading.get_ident() == self._owner and os.getpid() == self._pid

    def _straight(self, coll: str, inp, out, op: str, root, algorithm, async_op, dtype):
        """Run the call on the transport at once, as `_call` would (`_GENERAL`: not done, the
        general path checks it): `auto` calls on flat numpy arrays of one dtype, blocking
        ones from the owner thread (`_now`), or the torch backend's small ones inline (2
        ranks, 8 B all-gather: 4.8 us through `_call`, 2.9 so; the transport's own 1.8)."""
        ref = out if out is not None else inp
        if dtype is not None or algorithm != "auto" or ref.__class__ is not np.ndarray or \
                ref.ndim != 1 or not ref.flags.c_contiguous:
            return _GENERAL
        if inp is not None and inp is not ref and (
                inp.__class__ is not np.ndarray or inp.ndim != 1 or
                not inp.flags.c_contiguous or inp.dtype != ref.dtype):
            return _GENERAL
        d = DTYPE_OF.get(ref.dtype)
        if d is None or out is not None and not out.flags.writeable:
            return _GENERAL
        if coll != "all_gather":
            nbytes = ref.nbytes
        elif inp is not None:
            nbytes = inp.nbytes * self.world_size
        else:
            return _GENERAL
        now = self._now(ref, algorithm, async_op)
        if not (now or self.any_thread and nbytes <= self._inline_bytes):
            return _GENERAL
        # a call shape seen before; any root but a plain int is checked first (True would
        # find root 1's schedule)
        sched = self._schedules.get((coll, nbytes, "auto", root)) if root.__class__ is int \
            else None
        if sched is None:
            sched = self.schedule(coll, nbytes, "auto", self._check_root(root))
        if sched.collective.reduces:
            dt.check_op(op, d)
        if now:
            return self.transport.execute(sched, inp, out, op, d, self.timeout)
        return self._submit(partial(self.transport.execute, sched, inp, out, op, d,
                                    self.timeout), async_op, inline=True)

    def _call(self, coll, inp, out, op, dtype, algorithm, root, async_op):
        root = self._check_root(root)
        ref = inp if inp is not None else out
        nbytes = ref.nbytes * (self.world_size if coll == "all_gather" else 1)
        sched = self.schedule(coll, nbytes, algorithm, root)
        if sched.collective.reduces:
            dt.check_op(op, dtype)
        return self._submit(lambda: self.transport.execute(sched, inp, out, op, dtype,
                                                           self.timeout), async_op,
                            nbytes <= self._inline_bytes)

    def _submit(self, fn, async_op, inline=False):
        """Run `fn` (which returns nothing) now (blocking, owner thread) or on the worker.
        `inline`: a call so small that handing it to the worker costs more than running it
        (`_inline_bytes`): with nothing queued, it runs here, under the lock, and its Work is
        already done."""
        self._check_usable()
        if not async_op and not self.any_thread:
            self._drain()
            fn()
            return None
        with self._lock:  # any_thread: every call runs on the one worker, in arrival order
            if inline and (self._last is None or self._last.done()):
                try:
                    fn()
                except BaseException as e:
                    if not async_op:
                        raise
                    failed: Future[Any] = Future()  # delivered by wait(), as from the worker
                    failed.set_exception(e)
                    return Work(failed)
                return DONE if async_op else None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpucomm")
            fut = self._last = self._pool.submit(fn)
            self._pending.append(fut)
        if not async_op:
            self._drain()
            return None
        return Work(fut)

    def _drain(self) -> None:
        """Calls run in program order: a blocking call first finishes the async ones."""
        with self._lock:
            pending, self._pending = self._pending, []
        for fut in pending:
            fut.result()

    def _check_usable(self) -> None:
        if os.getpid() != self._pid:
            raise TransportError(
                f"rank {self.rank}: this communicator belongs to process {self._pid}; process "
                f"{os.getpid()} is a fork of it and may not use it (its peers would count its "
                f"calls as the parent's): call gpucomm.init() in a process of its own")
        if self._closed:
            raise TransportError(f"rank {self.rank}: this communicator is closed (close() was "
                                 f"called); make a new one with gpucomm.init()")
        if not self.any_thread and threading.get_ident() != self._owner:
            raise ConfigError(
                f"rank {self.rank}: communicator called from thread "
                f"{threading.current_thread().name!r}, but it serves only the thread that "
                f"created it: calls must reach every rank in one order, which threads sharing "
                f"a communicator cannot promise (use async_op=True, or one thread)")

    def _check_root(self, root) -> int:
        if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)) \
                or not 0 <= root < self.world_size:
            raise ConfigError(f"root {root!r} is not a rank: allowed are the integers "
                              f"0..{self.world_size - 1}")
        return int(root)

    def _check_peer(self, peer) -> None:
        if not isinstance(peer, (int, np.integer)) or not 0 <= peer < self.world_size \
                or peer == self.rank:
            raise ConfigError(f"rank {self.rank}: peer {peer!r} must be another rank in "
                              f"0..{self.world_size - 1}")

    def close(self) -> None:
        """Leave the job (also done at exit). Removes this rank's shared memory."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:   # a fork exiting: the parent's segments are not its own
            return
        if self._pool is not None:
            try:
                self._drain()
            except GpucommError:
                pass
            self._pool.shutdown(wait=True)
            self._pool = None
        self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"Communicator(rank={self.rank}, world_size={self.world_size})"


__all__ = ["Communicator", "Work", "choose_algorithm"]
