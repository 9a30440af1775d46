import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.collectives import get_collective


def make_inputs(coll, nranks: int, block_count: int, dtype, op: str = "sum", root: int = 0,
                seed: int = 0) -> list:
    """Random per-rank inputs for a collective (None where a rank passes no input)."""
    coll, dtype = get_collective(coll), dt.get_dtype(dtype)
    rng = np.random.default_rng(seed)
    out = []
    for r in range(nranks):
        blocks = coll.inputs(r, nranks, root)
        out.append(None if blocks is None else dt.random_array(rng, blocks[1] * block_count,
                                                               dtype, op))
    return out


@pytest.fixture
def inputs_for():
    return make_inputs
