"""Proof, for mypy, that the runtime's transports, engines and array kinds implement
`runtime.contracts`: each function below only type-checks if its argument is structurally
a Transport / Engine / Arrays. Nothing here runs (the imports are for the type checker)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .contracts import Arrays, Engine, Transport
    from .mpi_transport import MPIEngine, MPITransport
    from .p2p import NumpyArrays, P2PTransport
    from .shm import ShmTransport
    from .torch_transport import TorchArrays, TorchEngine, TorchTransport

    def _shm(t: ShmTransport) -> Transport:
        return t

    def _p2p(t: P2PTransport) -> Transport:
        return t

    def _torch(t: TorchTransport) -> Transport:
        return t

    def _mpi(t: MPITransport) -> Transport:
        return t

    def _engines(torch: TorchEngine, mpi: MPIEngine) -> tuple[Engine, Engine]:
        return torch, mpi

    def _arrays(numpy: NumpyArrays, torch: TorchArrays) -> tuple[Arrays, Arrays]:
        return numpy, torch
