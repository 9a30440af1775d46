"""The runtime's contracts as types: what a transport, an engine and an array kind must offer.

A **Transport** runs one rank's part of a Schedule (`Communicator` hands it every call);
`ShmTransport`, `TorchTransport` and `MPITransport` implement it, and mypy checks that they do
(`runtime/_conformance.py`). Most transports need not be written from scratch: an **Engine**
that only moves bytes between ranks, plus an **Arrays** value that allocates, packs and reduces
buffers of the engine's kind, becomes a Transport through `P2PTransport(engine, arrays)`
(that is how the torch.distributed and MPI transports are built).

    class LoopbackEngine:                      # a one-rank engine, enough for the contract
        rank, nranks = 0, 1
        def post(self, sends, recvs): return []
        def wait(self, pending, deadline): pass

    t: Transport = P2PTransport(LoopbackEngine())

Buffers are typed `Any`: numpy arrays, torch tensors or whatever the engine's Arrays makes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..dtypes import DType
from ..schedule import Schedule

Buffer = Any
"""A flat buffer of the engine's kind: a numpy array, a torch tensor, ..."""

Posting = tuple[int, Buffer, int]
"""(peer rank, contiguous 1-D buffer, tag): one send or receive handed to `Engine.post`."""


@runtime_checkable
class Transport(Protocol):
    """Executes schedules for one rank of a job.

    Every rank calls `execute` with the same schedule, dtype, op and block size, in the same
    order; a rank that fails or times out raises `TransportError` / `CommTimeout` naming the
    peer (never hangs: every wait ends by `timeout`, default the transport's own).
    """

    @property
    def rank(self) -> int: ...

    @property
    def nranks(self) -> int: ...

    def execute(self, schedule: Schedule, inp: Buffer | None, out: Buffer | None,
                op: str = "sum", dtype: DType = ..., timeout: float | None = None) -> None:
        """Run this rank's part: read `inp`, write `out` (None where the collective gives this
        rank no input or output), laid out as the collective's input and output blocks."""

    def barrier(self, timeout: float | None = None) -> None:
        """Return only after every rank of the job has called it."""

    def send(self, arr: Buffer, dst: int, dtype: DType, timeout: float | None = None) -> None:
        """Send `arr` to rank `dst`, which receives a buffer of the same size and dtype."""

    def recv(self, arr: Buffer, src: int, dtype: DType, timeout: float | None = None) -> None:
        """Receive into `arr` what rank `src` sends."""

    def close(self) -> None:
        """Leave the job and release what the transport holds (idempotent)."""


@runtime_checkable
class Engine(Protocol):
    """Moves bytes between the ranks of a group; `P2PTransport` does the rest.

    Optional attributes, read with getattr: `batched` (True when a step's operations must be
    posted in one group call, as NCCL needs; receives are then never posted a step ahead) and
    `close()`.
    """

    @property
    def rank(self) -> int: ...

    @property
    def nranks(self) -> int: ...

    def post(self, sends: Sequence[Posting], recvs: Sequence[Posting]) -> list[Any]:
        """Start every send and receive at once; one pending handle per buffer, receives first,
        then sends, in the order given."""
        ...

    def wait(self, pending: list[Any], deadline: float) -> None:
        """Until every handle is done, or `deadline` (`time.monotonic()`) passes: then raise
        `CommTimeout` naming the peer; a failed peer raises `TransportError` naming it."""


class Gatherer(Protocol):
    """What a transport's set-up needs of the job's rendezvous (`Rendezvous`,
    `StoreRendezvous`): every rank's value, in rank order."""

    def allgather(self, obj: Any) -> list[Any]: ...


@runtime_checkable
class Arrays(Protocol):
    """Buffers of one kind (numpy arrays, torch tensors on a device) for `P2PTransport`."""

    def empty(self, n: int, dtype: DType) -> Buffer:
        """A new flat buffer of `n` elements of `dtype`'s storage type."""

    def pack(self, views: list[Buffer], n: int, dtype: DType) -> Buffer:
        """The views laid end to end (the view itself when there is one)."""

    def reduce(self, dst: Buffer, src: Buffer, op: str, dtype: DType) -> None:
        """dst = dst op src, in place, with `gpucomm.dtypes`' numerics."""

    def finish_avg(self, buf: Buffer, nranks: int, dtype: DType) -> None:
        """Turn a sum into an average over `nranks`, in place."""

    def as_buffer(self, x: Any, dtype: DType, what: str) -> Buffer:
        """A user's array as a flat buffer of the storage type; ConfigError naming `what`."""

    def dtype_of(self, x: Any) -> DType:
        """The gpucomm dtype of a user's array."""

    def write_back(self, out: Any, flat: Buffer) -> None:
        """Make sure the user's `out` holds `flat` (a no-op when `flat` is a view of it)."""


__all__ = ["Arrays", "Buffer", "Engine", "Gatherer", "Posting", "Transport"]
