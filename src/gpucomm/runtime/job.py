"""Where this process sits in its job, from its launcher's environment, and how the shm
transport's ranks find each other there.

- `gpucomm launch` or torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
  Under torchrun MASTER_PORT is torchrun's own store, so the rendezvous goes through that
  store (`StoreRendezvous`) instead of listening on the port.
- mpiexec (MPICH's Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID; Open MPI: OMPI_COMM_WORLD_*):
  rank 0 picks a port and a token and sends them over MPI (a polled Ibcast, so a rank that
  never comes is a timeout), then the usual TCP rendezvous; MASTER_ADDR/MASTER_PORT win
  when set.
- nothing: a world of one.
"""
from __future__ import annotations

import math
import os
import secrets
import time
from dataclasses import dataclass

from ..errors import CommTimeout, ConfigError
from .options import env_timeout

DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 1e6  # ~11.6 days: finite, so every wait has a deadline
MPI_VARS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
            ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"))


@dataclass(frozen=True)
class Job:
    rank: int
    world: int
    local_rank: int
    launcher: str  # "env" (torchrun / gpucomm launch / by hand), "torchrun", "mpi" or "none"


def env_int(name: str, default=None) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        if default is None:
            raise ConfigError(f"environment variable {name} is not set: run under "
                              f"`gpucomm launch --nproc N`, torchrun or mpiexec, or set RANK, "
                              f"WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"environment variable {name}={text!r} is not an integer") from None


def resolve_timeout(timeout=None) -> float:
    """init(timeout=) first, then GPUCOMM_TIMEOUT (seconds), then 300 s; finite and > 0."""
    what = "timeout"
    if timeout is None:
        text = env_timeout()
        if not text:
            return DEFAULT_TIMEOUT_S
        what = f"GPUCOMM_TIMEOUT={text!r}"
        try:
            timeout = float(text)
        except ValueError:
            raise ConfigError(f"{what} is not a number of seconds") from None
    try:
        ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and \
            math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S
    except TypeError:
        ok = False
    if not ok:
        raise ConfigError(f"{what}: timeout must be a finite number of seconds in "
                          f"(0, {MAX_TIMEOUT_S:g}], got {timeout!r} (every wait has a deadline)")
    return float(timeout)


def job_env() -> Job:
    """This process's rank, world size and local rank, and which launcher said so."""
    if os.environ.get("WORLD_SIZE"):
        world = env_int("WORLD_SIZE")
        rank = env_int("RANK", 0 if world == 1 else None)
        launcher = "torchrun" if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" \
            else "env"
        return _checked(rank, world, env_int("LOCAL_RANK", rank), launcher, "RANK", "WORLD_SIZE")
    for rank_var, size_var, local_var in MPI_VARS:
        if os.environ.get(size_var):
            world, rank = env_int(size_var), env_int(rank_var)
            return _checked(rank, world, env_int(local_var, rank), "mpi", rank_var, size_var)
    return Job(0, 1, 0, "none")


def _checked(rank, world, local, launcher, rank_var, size_var) -> Job:
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"{rank_var}={rank} is out of range for {size_var}={world}: allowed "
                          f"are 0..{max(world - 1, 0)}")
    return Job(rank, world, local, launcher)


def master_port() -> int:
    port = env_int("MASTER_PORT")
    if not 1 <= port <= 65535:
        raise ConfigError(f"MASTER_PORT={port} is not a TCP port: allowed are 1..65535")
    return port


def shm_rendezvous(job: Job, timeout: float):
    """The rendezvous the shm transport's set-up uses in this job (None for one rank)."""
    from .rendezvous import Rendezvous
    if job.world == 1:
        return None
    if job.launcher == "torchrun":
        return _torchrun_store(job, timeout)
    if job.launcher == "mpi" and not os.environ.get("MASTER_PORT"):
        port, token = _port_over_mpi(job, timeout)
        return Rendezvous(job.rank, job.world, "127.0.0.1", port, timeout, token=token)
    addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
    return Rendezvous(job.rank, job.world, addr, master_port(), timeout)


def _torchrun_store(job: Job, timeout: float):
    from datetime import timedelta

    from .store_rendezvous import StoreRendezvous
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise ConfigError(f"under torchrun the shm rendezvous uses torch's store, but torch "
                          f"does not import: {e}") from None
    addr, port = os.environ.get("MASTER_ADDR") or "127.0.0.1", master_port()
    try:
        store = dist.TCPStore(addr, port, is_master=False,
                              timeout=timedelta(seconds=timeout))
    except Exception as e:  # torch raises RuntimeError subclasses here
        raise CommTimeout(f"rank {job.rank}: cannot reach torchrun's store at {addr}:{port} "
                          f"within {timeout:g}s: {str(e).strip().splitlines()[0]}") from None
    run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return StoreRendezvous(store, job.rank, job.world, timeout,
                           prefix=f"gpucomm/{run}/{restart}")


def _port_over_mpi(job: Job, timeout: float) -> tuple[int, str]:
    """Rank 0's rendezvous port and token, sent to every rank with a polled MPI Ibcast."""
    try:
        import numpy as np
        from mpi4py import MPI
    except ImportError as e:
        raise ConfigError(f"running under mpiexec without MASTER_ADDR/MASTER_PORT: the shm "
                          f"rendezvous needs mpi4py (pip install mpi4py mpich) or those "
                          f"variables ({e})") from None
    from .launch import free_port
    buf = np.zeros(3, np.uint64)
    if job.rank == 0:
        token = secrets.token_bytes(16)
        buf[0] = free_port()
        buf[1:] = np.frombuffer(token, np.uint64)
    req = MPI.COMM_WORLD.Ibcast(buf, root=0)
    deadline = time.monotonic() + timeout
    while not req.Test():
        if time.monotonic() > deadline:
            raise CommTimeout(f"rank {job.rank}: waited {timeout:g}s under mpiexec for rank 0 "
                              f"to send the rendezvous port (did every rank call "
                              f"gpucomm.init()?)")
        time.sleep(0.002)
    return int(buf[0]), buf[1:].tobytes().hex()
