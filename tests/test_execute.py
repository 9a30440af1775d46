"""Every registered algorithm, on random data, against the numpy reference."""
import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.algorithms import algorithms
from gpucomm.collectives import check_outputs
from gpucomm.errors import ConfigError, ScheduleError
from gpucomm.execute import execute

from conftest import make_inputs

RANKS = list(range(1, 18)) + [32, 64]
ALGOS = [(a.collective, a.name) for a in algorithms()]
DTYPES = list(dt.DTYPES)


def _build(alg, p, root=0):
    from gpucomm.algorithms import build
    try:
        return build(alg[0], alg[1], p, root=root)
    except ScheduleError as e:
        pytest.skip(f"{alg[1]} does not serve {p} ranks: {e}")


def _run(alg, p, block_count, dtype, op, root=0, seed=0):
    sched = _build(alg, p, root)
    op = op if sched.collective.reduces else "sum"
    ins = make_inputs(sched.collective, p, block_count, dtype, op, root, seed)
    outs = execute(sched, ins, op, dtype)
    check_outputs(sched.collective, outs, ins, op, dtype, root, what=f"{alg[1]} P={p}: ")
    if sched.collective.name == "all_reduce":  # identical bits on every rank
        assert all(np.array_equal(o.view(np.uint8), outs[0].view(np.uint8)) for o in outs)


@pytest.mark.parametrize("p", RANKS)
@pytest.mark.parametrize("alg", ALGOS, ids=[f"{c}-{n}" for c, n in ALGOS])
def test_every_algorithm_every_rank_count(alg, p):
    dtype = DTYPES[p % len(DTYPES)]
    op = ["sum", "max", "prod", "min", "avg"][p % 5]
    if op == "avg" and not dt.get_dtype(dtype).is_float:
        op = "sum"
    for block_count in (0, 1, 13):  # empty, tiny, and sizes that do not divide
        root = (p - 1) if p > 2 else 0
        _run(alg, p, block_count, dtype, op, root=root, seed=p)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alg", ALGOS, ids=[f"{c}-{n}" for c, n in ALGOS])
def test_every_dtype_and_op(alg, dtype):
    ops = [o for o in dt.REDUCE_OPS if o != "avg" or dt.get_dtype(dtype).is_float]
    for op in ops:
        _run(alg, 6, 29, dtype, op, root=1)
        _run(alg, 8, 16, dtype, op, root=0)


def test_mismatched_sizes_are_rejected():
    from gpucomm.algorithms import build
    with pytest.raises(ConfigError, match="different sizes"):
        execute(build("all_reduce", "ring", 2), [np.ones(4), np.ones(5)])
