"""Every limit gpucomm puts on what it is asked, in one place, each with why.

A request past a limit is refused up front with a ConfigError naming the limit, instead of
hanging, exhausting memory or printing a number no machine could produce. docs/limits.md
lists them.
"""
from __future__ import annotations

import math

from .errors import ConfigError

# A text input and how it is read (size, type, UTF-8, YAML/JSON budgets): gpucomm.inputs.

# One buffer (nccl-tests' size S) of at most 1 TiB: over 3x the memory of the largest GPU
# (B300, 288 GB) and of typical hosts, so nothing real is refused; above it the simulator's
# answers describe no machine (1e19 B "in 10 us") and the runtime would only exhaust memory.
MAX_SIZE_BYTES = 1 << 40

# GPUs in one modelled cluster (sim, topo, plan): 2^17 = 131,072 keeps 12,500 8-GPU nodes
# (100,000 GPUs, the largest clusters built so far) and refuses what no one has built.
MAX_MODEL_RANKS = 1 << 17

# Ranks of a schedule built and printed op by op (algo show, algo run, demo): a ring
# all-reduce on P ranks is 2(P-1) steps of P ops and a Bruck all-to-all moves P/2 blocks per
# rank in each of log2(P) steps, so P = 256 already prints tens of MB for a minute.
MAX_SCHEDULE_RANKS = 128

# algo verify --max-ranks N proves every rank count 1..N: about N^3 work, minutes at 128.
MAX_VERIFY_RANKS = 128

# Processes started on this host (bench): the shared-memory runtime's control segment holds
# 64 ranks (runtime/shm.py MAX_RANKS), and more processes than that on one host measure
# the scheduler, not the interconnect.
MAX_LOCAL_RANKS = 64

# Sizes in one -b/-e sweep (nccl-tests -f / -i): 1,000 rows is far more than a table or a
# plot shows; `-f 1.000001` or `-b 1 -e 1G -i 1` would be millions of rows.
MAX_SWEEP_POINTS = 1000

# algo run executes a schedule in this process on random data to check it: ranks x S bytes
# of buffers in all at most 256 MiB (128 ranks x 2 MiB), which the executor checks in under
# a minute on a busy 2-core machine; a checker, not a benchmark (bench runs large sizes).
MAX_EXECUTE_BYTES = 256 << 20

# What the in-process reference executor (algo run) and a benchmark's ranks may allocate:
# this fraction of the host's available memory, so a run never pushes the host into swap.
HOST_MEMORY_FRACTION = 0.5


def check_size(nbytes: int, what: str = "size") -> int:
    """nbytes if it is a size some machine holds, else ConfigError naming the limit."""
    if nbytes > MAX_SIZE_BYTES:
        raise ConfigError(f"{what} {nbytes} B is more than the largest buffer gpucomm accepts, "
                          f"{MAX_SIZE_BYTES} B (1 TiB; more than any GPU or host holds)")
    return nbytes


def check_ranks(nranks: int, limit: int, what: str) -> int:
    """nranks if 1 <= nranks <= limit, else ConfigError naming `what` and the limit."""
    if nranks < 1:
        raise ConfigError(f"{what} must be >= 1, got {nranks}")
    if nranks > limit:
        raise ConfigError(f"{what} {nranks} is more than the limit of {limit}")
    return nranks


def check_model_ranks(nodes: int, gpus_per_node: int) -> None:
    """A modelled cluster of nodes x gpus_per_node GPUs within MAX_MODEL_RANKS."""
    gpus = nodes * gpus_per_node
    if gpus > MAX_MODEL_RANKS:
        raise ConfigError(f"{nodes} nodes x {gpus_per_node} GPUs = {gpus} GPUs is more than "
                          f"the largest cluster gpucomm models, {MAX_MODEL_RANKS} GPUs (at most "
                          f"{MAX_MODEL_RANKS // gpus_per_node} nodes of {gpus_per_node})")


def check_finite(value: float, what: str, *, low: float | None = None,
                 above: float | None = None) -> float:
    """A finite number, >= low or > above when given."""
    if not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number, got {value}")
    if low is not None and value < low:
        raise ConfigError(f"{what} must be >= {low:g}, got {value:g}")
    if above is not None and value <= above:
        raise ConfigError(f"{what} must be > {above:g}, got {value:g}")
    return value


def sweep_points(minbytes: int, maxbytes: int, factor: float, step: int) -> int:
    """How many sizes nccl-tests' sweep -b MIN -e MAX (-f FACTOR | -i STEP) has."""
    if step:
        return (maxbytes - minbytes) // step + 1
    return int(math.floor(math.log(maxbytes / minbytes) / math.log(factor) + 1e-9)) + 1


def host_available_bytes() -> int | None:
    """Memory this host can still give (MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_host_memory(nbytes: int, what: str) -> None:
    """Refuse a run that would need more than HOST_MEMORY_FRACTION of the available memory."""
    avail = host_available_bytes()
    if avail is None:
        return
    budget = int(avail * HOST_MEMORY_FRACTION)
    if nbytes > budget:
        raise ConfigError(f"{what} needs about {_gib(nbytes)} of memory; this host has "
                          f"{_gib(avail)} available and runs may use at most "
                          f"{HOST_MEMORY_FRACTION:.0%} of it ({_gib(budget)})")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"
