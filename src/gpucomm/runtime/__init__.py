"""The runtime: real collectives between processes, over a transport that executes schedules.

    import gpucomm
    comm = gpucomm.init()            # under `gpucomm launch --nproc 4 x.py`, torchrun or mpiexec
    comm.all_reduce(x)               # numpy array or CPU torch tensor, in place

Transports implement `execute(schedule, inp, out, op, dtype, timeout)` for their rank, plus
`barrier`, `send`, `recv` and `close`; `ShmTransport` is the one for ranks on one host,
`TorchTransport` and `MPITransport` run the same schedules over torch.distributed and MPI
(`init(transport="torch" | "mpi")`), across hosts.
"""
from __future__ import annotations

from ..errors import ConfigError
from .communicator import Communicator, Work, choose_algorithm
from .options import RuntimeOptions, use as use_options
from .job import (DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, env_int, job_env, resolve_timeout,
                  shm_rendezvous)
from .rendezvous import Rendezvous

TRANSPORTS = ("shm", "torch", "mpi")


def init(timeout: float | None = None, transport: str = "shm",
         options: RuntimeOptions | None = None) -> Communicator:
    """The communicator of this process, from the torchrun/mpiexec environment.

    `transport`: "shm" (default; ranks on one host, over shared memory), "torch" (gpucomm's
    schedules over torch.distributed point-to-point: gloo on CPUs, NCCL when CUDA is there;
    any number of hosts, e.g. under `torchrun --nnodes N`) or "mpi" (over mpi4py, under
    mpiexec). For shm and torch it reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT (WORLD_SIZE 1 needs none of the others); shm under mpiexec reads MPI's
    PMI_RANK/PMI_SIZE (or OMPI_COMM_WORLD_*) and agrees on a port over MPI, and under torchrun
    meets through torchrun's store (see `job`); for mpi, MPI's own world.
    `timeout`: seconds, finite, > 0 (every wait has a deadline). `options`: the shm
    runtime's `RuntimeOptions` (default: read from the GPUCOMM_* environment variables; see
    docs/runtime.md); every rank must pass the same, or its calls fail the plan check.

    >>> comm = init()  # doctest: +SKIP
    >>> comm.rank, comm.world_size  # doctest: +SKIP
    (0, 2)
    >>> comm = init(transport="torch")  # under torchrun, on any host  # doctest: +SKIP
    """
    timeout = resolve_timeout(timeout)
    use_options(options)
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}: allowed are {', '.join(TRANSPORTS)}")
    if transport == "torch":
        from .torch_transport import init_torch_transport
        ttr = init_torch_transport(timeout)
        return Communicator(ttr.rank, ttr.nranks, ttr, timeout,
                            env_int("LOCAL_RANK", ttr.rank))
    if transport == "mpi":
        from .mpi_transport import MPITransport, local_rank
        mtr = MPITransport(timeout=timeout)
        return Communicator(mtr.rank, mtr.nranks, mtr, timeout, local_rank(mtr.engine.comm))
    job = job_env()
    from .shm import ShmTransport
    rdzv = shm_rendezvous(job, timeout)
    try:
        tr = ShmTransport(job.rank, job.world, timeout, rdzv)
    finally:
        if rdzv is not None:
            rdzv.close()
    return Communicator(job.rank, job.world, tr, timeout, job.local_rank)


__all__ = ["Communicator", "TRANSPORTS", "Work", "init", "choose_algorithm", "resolve_timeout",
           "DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "Rendezvous", "RuntimeOptions", "env_int"]
