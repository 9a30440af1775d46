"""Run a schedule on real numpy buffers in one process: the reference executor.

Each rank gets a logical buffer (see `collectives`); inputs are copied into their blocks, the
steps run in order, outputs are read from their blocks. Floating types narrower than their
compute type are widened, reduced and rounded op by op, as the runtimes do, so every
transport gives the same bits.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .errors import ConfigError
from .schedule import Schedule


def block_count_of(schedule: Schedule, inputs: list) -> int:
    """Elements per block, from the inputs; ConfigError if ranks disagree."""
    coll, p = schedule.collective, schedule.nranks
    if len(inputs) != p:
        raise ConfigError(f"{coll.name} on {p} ranks needs {p} input buffers, got {len(inputs)}")
    counts = set()
    for r, x in enumerate(inputs):
        rng = coll.inputs(r, p, schedule.root)
        if rng is None or x is None:
            continue
        n = np.asarray(x).size
        if n % rng[1]:
            raise ConfigError(f"rank {r}: {coll.name} input of {n} elements does not divide into "
                              f"{rng[1]} blocks")
        counts.add(n // rng[1])
    if len(counts) > 1:
        raise ConfigError(f"{coll.name}: ranks pass buffers of different sizes "
                          f"(block sizes {sorted(counts)}); every rank must pass the same size")
    return counts.pop() if counts else 0


def execute(schedule: Schedule, inputs: list, op: str = "sum", dtype=None) -> list:
    """Outputs (one per rank; None where a rank has no output) of running `schedule`.

    >>> from gpucomm.algorithms import build
    >>> outs = execute(build("all_reduce", "ring", 2), [np.ones(4), np.arange(4.0)])
    >>> outs[1]
    array([1., 2., 3., 4.])
    """
    coll, p = schedule.collective, schedule.nranks
    dtype = dt.get_dtype(dtype if dtype is not None else next(
        (np.asarray(x).dtype for x in inputs if x is not None), np.float32))
    if coll.reduces:
        dt.check_op(op, dtype)
    bc = block_count_of(schedule, inputs)
    bounds = schedule.chunk_bounds(bc)
    bufs = [np.zeros(bounds[-1], dtype=dtype.storage) for _ in range(p)]
    for r, x in enumerate(inputs):
        rng = coll.inputs(r, p, schedule.root)
        if rng is not None:
            if x is None:
                raise ConfigError(f"rank {r} needs an input buffer for {coll.name}")
            x = np.asarray(x)
            if x.dtype != dtype.storage:
                raise ConfigError(f"rank {r} passes {x.dtype}, the others {dtype.name}")
            bufs[r][rng[0] * bc:(rng[0] + rng[1]) * bc] = x.reshape(-1)

    for st in schedule.steps():
        moves = []
        for src, dst, sc, dc, n, red in zip(*(c.tolist() for c in st.columns()[:6])):
            lo, hi = bounds[sc], bounds[sc + n]
            # Concurrent semantics: read every source before any write of this step.
            moves.append((dst, bounds[dc], bufs[src][lo:hi].copy(), red))
        for dst, lo, data, red in moves:
            view = bufs[dst][lo:lo + len(data)]
            if red:
                dt.reduce_into(view, data, op, dtype)
            else:
                view[...] = data

    outputs: list[np.ndarray | None] = []
    for r in range(p):
        rng = coll.outputs(r, p, schedule.root)
        if rng is None:
            outputs.append(None)
            continue
        out = bufs[r][rng[0] * bc:(rng[0] + rng[1]) * bc].copy()
        if coll.reduces and op == "avg":
            dt.finish_avg(out, p, dtype)
        outputs.append(out)
    return outputs

