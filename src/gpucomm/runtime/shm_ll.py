"""The shm transport's small-message path: all-reduces up to `RuntimeOptions.ll_max_bytes`
run one-shot through cache lines that carry their own sequence number (NCCL's LL idea, here
a 64-byte line: 56 bytes of data and one flag word, stored after the data), in each rank's
control segment, mapped by every peer at start-up. The C extension's `LL.run` posts this
rank's input, polls every peer's lines without a system call and reduces them in rank order
(so every rank gets the same bits); Python only looks up the call's key and, when a peer is
late, waits as the general path does (yield, then sleep; liveness and the deadline checked
every 20 ms). See `_stream.c` for the protocol. Without the extension, or for other dtypes
(float16, bfloat16) and collectives, calls take the general path.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes as dt
from ..errors import CommTimeout, TransportError
from .plan import schedule_key
from .shm_control import (ACK, COLL_IDS, DESC, DONE, DTYPE_IDS, GEN, IN_ADDR, IN_PLACE, LL_ALGO,
                          LL_HALF, LL_OFF, OP_IDS, OUT_ADDR, PROG, WAITING, describe_call)

if TYPE_CHECKING:
    from ..schedule import Schedule
    from .options import RuntimeOptions
    from .segment import Segment

try:
    from . import _stream
    LLRunner: Any = getattr(_stream, "LL", None)  # None: an extension built before the path
    # None too for an extension built from an older `_stream.c` (other arguments)
    WaitsRunner: Any = getattr(_stream, "Waits", None) \
        if getattr(_stream, "WAITS_VERSION", 0) == 6 else None
    _INELIGIBLE = getattr(_stream, "LL_INELIGIBLE", -1000)
except ImportError:  # built without a compiler
    LLRunner, WaitsRunner, _INELIGIBLE = None, None, -1000

# what `LL.run` reduces (in this order in its id table); other dtypes take the general path
LL_DTYPES = ("float32", "float64", "int8", "uint8", "int32", "int64", "float16", "bfloat16")
LL_OPS = ("sum", "prod", "min", "max", "avg")


class SmallMessages:
    """The small-message half of `ShmTransport`, which provides the attributes declared here."""

    rank: int
    nranks: int
    timeout: float
    seq: int
    broken: str | None
    options: RuntimeOptions
    pids: list[int]
    _progs: list[memoryview]
    _ctrls: list[Segment]
    _me: memoryview
    _call: tuple[str, int, float]
    _spin_s: float
    _ll: Any = None  # the C runner, once connected (None: no extension, or turned off)
    _waiter: Any = None  # the general path's blocking waits (`shm_wait`), made here too
    _ll_sched: Schedule | None = None  # the last schedule `_ll_serves` accepted

    if TYPE_CHECKING:
        def _check_alive(self, q: int, need: int, word: int) -> None: ...
        def _unlink_peer(self, q: int) -> None: ...
        def _timeout_text(self, q: int, need: int, word: int) -> str: ...
        def _fail(self, err: BaseException) -> None: ...

    def _ll_connect(self) -> None:
        """Map every rank's area (after every control segment is mapped), and every rank's
        progress counter for the general path's blocking waits (`shm_wait`)."""
        self._ll = None
        if WaitsRunner is not None:
            self._waiter = WaitsRunner(self.rank, [c.mm for c in self._ctrls], self.pids,
                                       (PROG, WAITING, IN_ADDR, OUT_ADDR, IN_PLACE, DESC,
                                        GEN, ACK))
        if LLRunner is not None and self.options.ll_max_bytes > 0:
            ids = (COLL_IDS["all_reduce"], LL_ALGO, *(DTYPE_IDS[d] for d in LL_DTYPES),
                   *(OP_IDS[o] for o in LL_OPS))
            self._ll = LLRunner(self.rank, [c.mm for c in self._ctrls], LL_OFF, LL_HALF,
                                self.options.ll_max_bytes, PROG, DESC, ids)

    def _ll_close(self) -> None:
        """Release the C side's views of the control segments (before they close)."""
        for runner in (self._ll, self._waiter):
            if runner is not None:
                runner.close()
        self._ll = self._waiter = None

    @property
    def small_message_bytes(self) -> int:
        """All-reduces up to this size run on the small-message path (0: it is off)."""
        return self.options.ll_max_bytes if self._ll is not None else 0

    def _ll_try(self, schedule: Schedule, inp, out, op, dtype: dt.DType) -> bool:
        """Ran this call on the small-message path (False: not a call it serves). The path
        knows a type by its buffer's format, so a type stored as another (fp8 as uint8) is
        not one it serves."""
        if dtype.name not in LL_DTYPES:
            return False
        return (inp is not None and out is not None and self._ll_serves(schedule)
                and self.ll_all_reduce(inp, out, op, dtype.name == "bfloat16"))

    def _ll_serves(self, schedule: Schedule) -> bool:
        """Is this the registered one-shot all-reduce (the schedule this path runs)?"""
        if schedule is self._ll_sched:
            return True
        if schedule.collective.name != "all_reduce" or schedule.algorithm != "one_shot" or \
                schedule.nranks != self.nranks:
            return False
        from ..algorithms import build
        ref = build("all_reduce", "one_shot", self.nranks).materialize()
        if schedule_key(schedule) != schedule_key(ref) or schedule.to_json() != ref.to_json():
            return False
        self._ll_sched = schedule
        return True

    def ll_all_reduce(self, inp: np.ndarray, out: np.ndarray, op: str,
                      bf16: bool = False) -> bool:
        """Run this all-reduce on the small-message path if it takes it (True), else do
        nothing (False: the caller takes the general path). `inp` may be `out` (in place).
        The path takes C-contiguous arrays of LL_DTYPES up to `ll_max_bytes`, ops LL_OPS;
        `bf16`: uint16 arrays hold bfloat16 (float16 and bfloat16 round after every step, in
        rank order, as the general path does)."""
        ll = self._ll
        if ll is None or self.broken is not None:
            return False
        seq = self.seq + 1
        r = ll.run(inp, out, seq, op, self._spin_s * 1e9, bf16)  # `shm_wait`'s spin
        if r == -1:
            self.seq = seq
            return True
        if r == _INELIGIBLE:
            return False
        self.seq = seq
        try:
            self._ll_wait(r, (inp, out, seq, op), bf16)
        except BaseException as e:
            self._fail(e)
            raise
        return True

    def _ll_wait(self, r: int, call: tuple, bf16: bool) -> None:
        """A peer is late: poll as `PeerWaits._wait` does (yield, then sleep), checking every
        20 ms that it lives and that the deadline holds; `r` is what `LL.run` returned for
        `call` = (inp, out, seq, op)."""
        seq = call[2]
        self._call = ("all_reduce", seq, self.timeout)
        deadline = time.monotonic() + self.timeout
        t0 = time.perf_counter()
        pause, next_check = 50e-6, time.monotonic() + 0.02
        try:
            while r != -1:
                if r < -1:
                    self._ll_mismatch(-2 - r, seq)
                self._me[WAITING] = r + 1
                now = time.monotonic()
                if now >= next_check:
                    self._ll_check(r, seq, deadline, now)
                    next_check = now + 0.02
                if time.perf_counter() - t0 < 0.02:
                    os.sched_yield()
                else:
                    time.sleep(pause)
                    pause = min(pause * 1.5, 1e-3)
                r = self._ll.run(*call, 2e3, bf16)
        finally:
            self._me[WAITING] = 0

    def _ll_check(self, q: int, seq: int, deadline: float, now: float) -> None:
        theirs = self._progs[q]  # its counter, then its descriptor, then the first word again
        if theirs[PROG] >> 32 == seq and theirs[DESC] == seq and \
                theirs[DESC + 2] != LL_ALGO and theirs[DESC] == seq:
            self._ll_mismatch(q, seq)  # q runs this call on the general path
        self._check_alive(q, (seq << 32) | DONE, PROG)
        if now >= deadline:
            self._unlink_peer(q)
            raise CommTimeout(self._timeout_text(q, (seq << 32) | 1, PROG))

    def _ll_mismatch(self, q: int, seq: int) -> None:
        mine = tuple(self._me[DESC + i] for i in range(8))
        theirs = tuple(self._progs[q][DESC + i] for i in range(8))
        raise TransportError(
            f"collective mismatch at call #{seq}: rank {self.rank} called "
            f"{describe_call(mine)} but rank {q} called {describe_call(theirs)}")


__all__ = ["LL_DTYPES", "LL_OPS", "LLRunner", "SmallMessages"]
