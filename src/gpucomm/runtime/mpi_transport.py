"""Run gpucomm schedules over MPI (mpi4py): non-blocking Isend/Irecv on numpy buffers.

Each step posts its receives and sends and polls them until a deadline, so a peer that never
answers gives a CommTimeout naming it instead of a hang (MPI_Wait has no timeout). Received
sizes are checked, so a peer passing a buffer of another size is an error, never a silently
short message.

    # mpiexec -n 4 python3 script.py (doctests skip it: it needs 4 MPI ranks)
    >>> from mpi4py import MPI  # doctest: +SKIP
    >>> from gpucomm.algorithms import build
    >>> t = MPITransport(MPI.COMM_WORLD)  # doctest: +SKIP
    >>> x = np.full(1024, float(MPI.COMM_WORLD.rank), np.float32)  # doctest: +SKIP
    >>> t.execute(build("all_reduce", "ring", 4), x, x)  # every rank: 6.0  # doctest: +SKIP
"""
from __future__ import annotations

import signal
import threading
import time

import numpy as np

from ..errors import ConfigError, TransportError
from .p2p import DEFAULT_TIMEOUT_S, P2P_SLICE_BYTES, P2PTransport, peer_error

try:
    from mpi4py import MPI
except ImportError:  # optional engine
    MPI = None  # type: ignore[assignment]

_SPIN_S = 2e-4  # poll without sleeping this long: most steps finish within it
_MAX_SLEEP_S = 1e-3


class MPIEngine:
    """Point-to-point over an MPI communicator, raw bytes, tags modulo TAG_UB."""

    def __init__(self, comm=None):
        if MPI is None:
            raise ConfigError("the mpi transport needs mpi4py and an MPI library: "
                              "pip install mpi4py mpich")
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.nranks = self.comm.Get_rank(), self.comm.Get_size()
        # Report errors instead of aborting the job, so they reach the caller named by rank.
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        _survive_peer_failure_notice()
        tag_ub = self.comm.Get_attr(MPI.TAG_UB)
        self.tag_ub = int(tag_ub) if tag_ub else 32767

    def post(self, sends, recvs) -> list:
        """Post receives then sends; one pending [request, peer, verb, bytes] per buffer."""
        pending = []
        try:
            for peer, buf, tag in recvs:
                view = _bytes(buf)
                pending.append([self.comm.Irecv([view, MPI.BYTE], source=peer,
                                                tag=tag % self.tag_ub), peer, "recv",
                                view.nbytes])
            for peer, buf, tag in sends:
                view = _bytes(buf)
                pending.append([self.comm.Isend([view, MPI.BYTE], dest=peer,
                                                tag=tag % self.tag_ub), peer, "send", None])
        except MPI.Exception as e:
            raise TransportError(f"rank {self.rank}: posting to/from ranks "
                                 f"{sorted({x[0] for x in sends + recvs})} failed: "
                                 f"{e.Get_error_string()}") from e
        return pending

    def wait(self, pending: list, deadline: float) -> None:
        """Poll until every request is done (MPI_Wait has no timeout); check received sizes."""
        start, status = time.monotonic(), MPI.Status()
        while pending:
            still = []
            for item in pending:
                req, peer, verb, want = item
                try:
                    done = req.Test(status)
                except MPI.Exception as e:
                    raise peer_error(self.rank, peer, verb, e.Get_error_string(), False) from e
                if not done:
                    still.append(item)
                elif want is not None and status.Get_count(MPI.BYTE) != want:
                    raise TransportError(f"rank {self.rank}: rank {peer} sent "
                                         f"{status.Get_count(MPI.BYTE)} bytes, want {want}: "
                                         "do all ranks pass buffers of the same size?")
            pending = still
            if not pending:
                break
            now = time.monotonic()
            if now > deadline:
                for req, _, _, _ in pending:
                    _cancel(req)
                peers = sorted({p for _, p, _, _ in pending})
                verbs = sorted({v for _, _, v, _ in pending})
                raise peer_error(self.rank, peers[0], "/".join(verbs),
                                 f"{len(pending)} request(s) to/from rank(s) {peers} still "
                                 f"open at the deadline", True)
            if now - start > _SPIN_S:  # back off so ranks sharing cores can run
                time.sleep(min(_MAX_SLEEP_S, (now - start) / 10))


def _survive_peer_failure_notice() -> None:
    """Hydra (MPICH's mpiexec, with -disable-auto-cleanup) tells the survivors of a dead rank
    with SIGUSR1; MPICH's handler passes it on to the default action, which ends the process,
    so the survivors would vanish instead of reporting the dead rank by number. Ignore it
    (main thread; unless Python code installed its own handler): the failed requests and the
    deadlines say which rank died."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _bytes(buf: np.ndarray) -> np.ndarray:
    if not buf.flags.c_contiguous:
        raise TransportError("MPI buffers must be contiguous")
    return buf.reshape(-1).view(np.uint8)


def _cancel(req) -> None:
    try:
        req.Cancel()
    except Exception:  # best effort: the job is failing anyway
        pass


class MPITransport(P2PTransport):
    """A P2PTransport over an MPI communicator (default COMM_WORLD), numpy buffers."""

    def __init__(self, comm=None, timeout: float = DEFAULT_TIMEOUT_S,
                 slice_bytes: int = P2P_SLICE_BYTES):
        engine = MPIEngine(comm)
        super().__init__(engine, timeout=timeout, slice_bytes=slice_bytes)
        self.engine: MPIEngine = engine


def local_rank(comm=None) -> int:
    """This rank's index among the ranks of `comm` on its host (MPI_COMM_TYPE_SHARED)."""
    if MPI is None:
        raise ConfigError("the mpi transport needs mpi4py and an MPI library: "
                          "pip install mpi4py mpich")
    comm = comm if comm is not None else MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, comm.Get_rank())
    try:
        return node.Get_rank()
    finally:
        node.Free()
