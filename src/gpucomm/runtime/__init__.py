"""The runtime: real collectives between processes, over a transport that executes schedules.

    import gpucomm
    comm = gpucomm.init()            # under `gpucomm launch -n 4 script.py`, torchrun or mpiexec
    comm.all_reduce(x)               # numpy array or CPU torch tensor, in place

Transports implement `execute(schedule, inp, out, op, dtype, timeout)` for their rank, plus
`barrier`, `send`, `recv` and `close`; `ShmTransport` is the one for ranks on one host,
`TorchTransport` and `MPITransport` run the same schedules over torch.distributed and MPI
(`init(transport="torch" | "mpi")`), across hosts.
"""
from __future__ import annotations

import os

from ..errors import ConfigError
from .communicator import Communicator, Work, choose_algorithm
from .rendezvous import Rendezvous

DEFAULT_TIMEOUT_S = 300.0


def env_int(name: str, default=None) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        if default is None:
            raise ConfigError(f"environment variable {name} is not set: run under "
                              f"`gpucomm launch -n N`, torchrun or mpiexec, or set RANK, "
                              f"WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"environment variable {name}={text!r} is not an integer") from None


def resolve_timeout(timeout=None) -> float:
    """init(timeout=) first, then GPUCOMM_TIMEOUT (seconds), then 300 s."""
    if timeout is None:
        text = os.environ.get("GPUCOMM_TIMEOUT")
        if not text:
            return DEFAULT_TIMEOUT_S
        try:
            timeout = float(text)
        except ValueError:
            raise ConfigError(f"GPUCOMM_TIMEOUT={text!r} is not a number of seconds") from None
    if not timeout > 0:
        raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}")
    return float(timeout)


TRANSPORTS = ("shm", "torch", "mpi")


def init(timeout=None, transport: str = "shm") -> Communicator:
    """The communicator of this process, from the torchrun/mpiexec environment.

    `transport`: "shm" (default; ranks on one host, over shared memory), "torch" (gpucomm's
    schedules over torch.distributed point-to-point: gloo on CPUs, NCCL when CUDA is there;
    any number of hosts, e.g. under `torchrun --nnodes N`) or "mpi" (over mpi4py, under
    mpiexec). For shm and torch it reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT (WORLD_SIZE 1 needs none of the others); for mpi, MPI's own world.

    >>> comm = init()  # doctest: +SKIP
    >>> comm.rank, comm.world_size  # doctest: +SKIP
    (0, 2)
    >>> comm = init(transport="torch")  # doctest: +SKIP  (under torchrun, on any host)
    """
    timeout = resolve_timeout(timeout)
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}: allowed are {', '.join(TRANSPORTS)}")
    if transport == "torch":
        from .torch_transport import init_torch_transport
        tr = init_torch_transport(timeout)
        return Communicator(tr.rank, tr.nranks, tr, timeout,
                            env_int("LOCAL_RANK", tr.rank))
    if transport == "mpi":
        from .mpi_transport import MPITransport, local_rank
        tr = MPITransport(timeout=timeout)
        return Communicator(tr.rank, tr.nranks, tr, timeout, local_rank(tr.engine.comm))
    world = env_int("WORLD_SIZE", 1)
    rank = env_int("RANK", 0 if world == 1 else None)
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is out of range for WORLD_SIZE={world}: allowed are "
                          f"0..{world - 1}")
    local_rank = env_int("LOCAL_RANK", rank)
    from .shm import ShmTransport
    rdzv = None
    if world > 1:
        addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
        rdzv = Rendezvous(rank, world, addr, env_int("MASTER_PORT"), timeout)
    try:
        tr = ShmTransport(rank, world, timeout, rdzv)
    finally:
        if rdzv is not None:
            rdzv.close()
    return Communicator(rank, world, tr, timeout, local_rank)


__all__ = ["Communicator", "TRANSPORTS", "Work", "init", "choose_algorithm", "resolve_timeout"]
