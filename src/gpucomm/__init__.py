"""gpucomm: collective communication on GPU clusters — modelled, simulated, run and measured."""
from .collectives import COLLECTIVES, get_collective, layout, reference
from .dtypes import DTYPES, REDUCE_OPS, get_dtype, parse_size
from .errors import (CommTimeout, ConfigError, GpucommError, ScheduleError, TopologyError,
                     TransportError)
from .schedule import Schedule, Step, step
from .verify import VerifyError, verify

__version__ = "0.1.0"
__all__ = ["COLLECTIVES", "DTYPES", "REDUCE_OPS", "CommTimeout", "ConfigError", "GpucommError",
           "Schedule", "ScheduleError", "Step", "TopologyError", "TransportError", "VerifyError",
           "get_collective", "get_dtype", "layout", "parse_size", "reference", "step", "verify"]
