"""Waiting for peers in the shm transport: a dependency is one load of the peer's progress
counter; a wait spins briefly, then blocks in the kernel on the counter (a futex, `_stream.
Waits`: the peer wakes it when it publishes), each sleep bounded by a growing timeout, so more
ranks than cores still progress and a waiting rank leaves its core to whoever else runs
there; without the C extension it yields, then sleeps. Where the ranks outnumber the cores
they may run on (`yields`), a wait yields the core for `YIELD_S` before it sleeps: the
rank the scheduler hands it to may be the peer it waits for, or one that can move, and runs
at once instead of after a futex wake-up (MPICH's ranks poll with sched_yield too). Every
wait has a deadline and, between sleeps, checks that the peer is alive (pid), not failed and
not closed. A timeout names the rank that makes no progress, following the chain of ranks
waiting for one another.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Sequence

from .. import dtypes as dt
from ..errors import CommTimeout, TransportError
from .segment import Segment, unlink_name
from .shm_control import (CLOSED, DESC, DONE, FAILED, MSG_OFF, NAME_OFF, P2P_NAME_OFF, PROG, STATE,
                          WAITING, describe_call, pid_alive)

if TYPE_CHECKING:
    from ..schedule import Schedule


# how long a wait yields its core before it sleeps (`yields`). 3 and 4 ranks on 2 cores,
# no-yield time / yield time, median of paired rounds in one job: all-to-all 1 MiB 1.13 /
# 1.16, 16 MiB 1.29 / 1.08; all-reduce 1 MiB 1.24 / 1.35 (every round faster); all-gather
# 1 MiB (4 ranks) 1.13. Yielding up to 1 or 3 ms: 3 ranks 1.34, 4 ranks 0.98; never
# sleeping: 0.5-1.4x on 4 ranks (notes/s13/a2a13). More ranks to a core yield too (they did
# not until notes/s21, from an older measurement: 8 ranks' all-to-all 1-64 MiB gained
# nothing then). 6, 8 and 16 ranks on 2 cores now, `gpucomm bench`, medians of 2-3 paired
# rounds, sleeping / yielding time, out of place: 8 ranks all-to-all 256 KiB 377 / 211 us,
# 1 MiB 833 / 606 (MPICH 719), 4 MiB 1940 / 1816; all-reduce 64 KiB 458 / 120, 1 MiB 1294 /
# 1117; all-gather 1 MiB 682 / 451; 6 ranks all-to-all 1 MiB 618 / 588, all-reduce 1 MiB 955 /
# 692; 16 ranks all-reduce 1 MiB 3043 / 2211. From 8 MiB even within the rounds' spread.
YIELD_S = 300e-6
# How long a wait spins on a late peer before it yields or sleeps: SPIN_S where every rank
# has a core (the peer runs elsewhere and is about to publish), SHARED_SPIN_S where ranks
# outnumber their cores (the peer may be waiting for this very core: spinning only delays
# it). 3 and 4 ranks on 2 cores, 50 us against 2 us, median of 4 paired rounds: all-to-all
# 1 MiB 328 -> 266 and 373 -> 265 us (MPICH 231-265), 16 MiB (4 ranks) 3.87 -> 3.63 ms,
# all-reduce 1 MiB (4 ranks) 581 -> 415 us.
SPIN_S = 50e-6
SHARED_SPIN_S = 2e-6


def cores_of(pids: Sequence[int]) -> int:
    """How many cores these processes may run on, all together (the union of their CPU
    affinities; a process whose affinity cannot be read counts this one's). 0: unknown (not
    Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        return 0
    cores: set[int] = set()
    for pid in pids:
        try:
            cores |= os.sched_getaffinity(pid)
        except OSError:
            cores |= os.sched_getaffinity(0)
    return len(cores)


def yields(pids: Sequence[int]) -> bool:
    """Do these ranks' waits yield the core before they sleep? Where they outnumber their
    cores: a core a waiter yields goes to another rank there, likely the peer it waits for
    or one that can move, at once; a sleeping waiter's core may sit idle until a futex wake
    brings it back (`YIELD_S`). Ranks bound one per core never share one."""
    cores = cores_of(pids)
    return 0 < cores < len(pids)


class PeerWaits:
    """The waiting half of `ShmTransport`, which provides the attributes declared here."""

    rank: int
    nranks: int
    timeout: float
    pids: list[int]  # per rank: its process id
    _progs: list[memoryview]  # per rank: the words of its control segment
    _ctrls: list[Segment]  # per rank: its control segment
    _me: memoryview  # this rank's words (_progs[rank])
    _spin_s: float
    _yield_s = 0.0  # after the spin, yield the core this long before sleeping (YIELD_S)
    _call: tuple[str, int, float]  # the call in progress: (name, number, timeout in s)
    _waiter: Any = None  # `_stream.Waits` over every control segment (None: no extension)
    _shm_read = True  # a peer may read this rank's shared buffer in the call it last ran

    if TYPE_CHECKING:
        def _map_peer(self, q: int) -> Segment: ...

    def _check_peer(self, q: int, desc: tuple[int, ...], schedule: Schedule,
                    dtype: dt.DType, op: str) -> None:
        prog = self._progs[q]
        theirs = tuple(prog[DESC + i] for i in range(len(desc)))
        if theirs[0] != desc[0] or prog[DESC] != desc[0]:
            # q has moved on to its next call (a small-message call starts without waiting
            # for peers to finish this one): its descriptor is being rewritten, first word
            # first, and q passed this call, so it ran the same one
            return
        if theirs[1:] != desc[1:]:
            raise TransportError(
                f"collective mismatch at call #{desc[0]}: rank {self.rank} called "
                f"{describe_call(desc, schedule)} but rank {q} called {describe_call(theirs)}")
        try:
            self._map_peer(q)  # map a grown buffer now, so its owner can unlink the name
        except TransportError:
            # q passed this call and left the job (a last barrier, then close) before this
            # rank got to map its grown buffer, which this call then does not read
            if prog[STATE] != CLOSED:
                raise

    def _yield_where_cores_are_shared(self) -> None:
        """Waits yield the core before they sleep where the ranks share their cores
        (`yields`), here and in C, after a spin that is then short (SHARED_SPIN_S);
        otherwise they sleep right after the spin."""
        shared = yields(self.pids)
        self._spin_s = SHARED_SPIN_S if shared else SPIN_S
        self._yield_s = YIELD_S if shared else 0.0
        if self._waiter is not None:
            self._waiter.set_yield(self._yield_s * 1e9)

    def _wait_previous(self, seq: int, deadline: float) -> None:
        """Before call `seq` may rewrite this rank's shared buffer: where a peer could still
        read it in call seq-1 (its plan reads it), wait until every peer has ended that call.
        Peers' reads of this rank's user buffers ended before this rank ended seq-1."""
        if self._shm_read:
            for q in range(self.nranks):
                if q != self.rank:
                    self._wait(q, ((seq - 1) << 32) | DONE, deadline)

    def _await(self, deps: Sequence[tuple[int, int]], checked: list[bool], base: int,
               deadline: float, desc: tuple[int, ...], schedule: Schedule,
               dtype: dt.DType, op: str) -> None:
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
        # Spin a few microseconds (the peer is usually about to publish), yield the core
        # where ranks share cores, then block until the peer publishes (yield, then sleep,
        # without the extension), checking liveness and the deadline every 20 ms.
        t0 = time.perf_counter()
        spin_until = t0 + self._spin_s
        while time.perf_counter() < spin_until:
            for _ in range(32):
                if prog[word] >= need:
                    return
        waiter = self._waiter
        yield_until = t0 + (0.02 if waiter is None else self._yield_s)
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
                elif waiter is not None:
                    if waiter.wait(q, word, need, pause):
                        return
                else:
                    time.sleep(pause)
                # the timeout bounds the latency of publishers that do not wake (the
                # small-message path, point-to-point words)
                pause = min(pause * 1.5, 1e-3)
        finally:
            self._me[WAITING] = 0

    def _publish(self, value: int) -> None:
        """This rank's progress counter = `value`, waking a peer blocked on it."""
        if self._waiter is not None:
            self._waiter.publish(value)
        else:
            self._me[PROG] = value

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

    def _timeout_text(self, q: int, need: int, word: int) -> str:
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
            if nxt == self.rank:   # back to this rank: a cycle of waits that cannot end
                ring = [self.rank, *chain]
                where += ("; deadlock: " + ", ".join(f"rank {a} waits for rank {b}" for a, b
                                                     in zip(ring, ring[1:] + ring[:1]))
                          + " (each receives before the other sends?)")
                chain = [q]
                break
            if nxt in chain:
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

