"""gpucomm: collective communication on GPU clusters — modelled, simulated, run and measured."""
from .collectives import COLLECTIVES, get_collective, layout, reference
from .dtypes import DTYPES, REDUCE_OPS, get_dtype, parse_size
from .errors import (CommTimeout, ConfigError, GpucommError, ScheduleError, TopologyError,
                     TransportError)
from .schedule import Schedule, Step, step
from .verify import VerifyError, verify

__version__ = "0.1.0"


def init(timeout=None, **kwargs):
    """This process's communicator, from the torchrun/mpiexec environment (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT); `transport="shm"` (one host, the default),
    `"torch"` (torch.distributed: gloo, or NCCL on GPUs) or `"mpi"`. See `gpucomm.runtime.init`.

    >>> comm = gpucomm.init()  # under `gpucomm launch --nproc 2 script.py`  # doctest: +SKIP
    >>> comm.all_reduce(x)             # doctest: +SKIP
    """
    from .runtime import init as _init
    return _init(timeout=timeout, **kwargs)

__all__ = ["COLLECTIVES", "DTYPES", "REDUCE_OPS", "CommTimeout", "ConfigError", "GpucommError",
           "Schedule", "ScheduleError", "Step", "TopologyError", "TransportError", "VerifyError",
           "get_collective", "get_dtype", "init", "layout", "parse_size", "reference", "step",
           "verify"]
