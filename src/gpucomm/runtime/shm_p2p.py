"""Point-to-point messages of the shm transport: a buffered send copies the message into a
segment for its receiver (grown as needed, announced in the sender's control segment) and
bumps a counter; the receiver waits for the counter, checks size and dtype, copies it out and
acknowledges, so the sender may reuse the segment.
"""
from __future__ import annotations

import mmap
import time
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes as dt
from ..errors import TransportError
from .segment import Segment
from .shm_control import DTYPE_IDS, P2P, P2P_ACK, P2P_NAME_OFF, P2P_RECVD, PROG


class PointToPoint:
    """send/recv of `ShmTransport`, which provides the attributes declared here."""

    rank: int
    timeout: float
    _progs: list[memoryview]  # per rank: the words of its control segment
    _ctrls: list[Segment]  # per rank: its control segment
    _mine: mmap.mmap  # this rank's control segment
    _me: memoryview  # its words (_progs[rank])
    _p2p_out: dict[int, Segment]  # dst -> the segment this rank sends to dst in
    _p2p_in: dict[int, tuple[int, Segment]]  # src -> (generation, the segment src sends in)
    _call: tuple[str, int, float]  # the call in progress: (name, number, timeout in s)

    if TYPE_CHECKING:
        def _wait(self, q: int, need: int, deadline: float, word: int = PROG) -> None: ...

        def _fail(self, err: BaseException) -> None: ...

    def send(self, arr: np.ndarray, dst: int, dtype: dt.DType,
             timeout: float | None = None) -> None:
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

    def recv(self, arr: np.ndarray, src: int, dtype: dt.DType,
             timeout: float | None = None) -> None:
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
