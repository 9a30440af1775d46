"""The chain frontier (simulate/chain.py) against the general engine it stands for."""

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.schedule import Schedule
from gpucomm.simulate import analytic, simulate
from gpucomm.simulate.chain import chain_many, chain_shape
from gpucomm.simulate.core import coster, path_table
from gpucomm.simulate.protocol import get_protocol
from gpucomm.topology import build_topology

CASES = [  # system, nodes, ranks, collective, root, chunks, channels, protocol, lanes
    ("dgx-h100", 2, 16, "broadcast", 0, 8, 8, "simple", 1.0),
    ("dgx-h100", 2, 16, "reduce", 5, 3, 4, "ll", 2.0),
    ("dgx-h100", 3, 24, "broadcast", 17, 40, 2, "ll128", 1.0),  # more pieces than hops
    ("dgx-a100", 2, 12, "reduce", 0, 1, 1, "simple", 1.0),  # part of the nodes, one piece
    ("dgx-h100", 4, 32, "broadcast", 9, 1, 8, "ll", 2.0),  # one piece on every channel
    ("dgx-v100", 1, 8, "broadcast", 3, 5, 3, "ll", 1.5),  # a hybrid cube-mesh: no switch
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-{c[3]}" for c in CASES])
def test_chain_frontier_equals_the_general_engine_to_the_bit(case):
    system, nodes, p, coll, root, chunks, channels, proto, lanes = case
    topo = build_topology(system, nodes=nodes)
    rng = np.random.default_rng(p + chunks)
    gpus = rng.permutation(topo.nranks)[:p]
    ranks = np.stack([rng.permutation(gpus) for _ in range(2)])  # an order per channel parity
    sched = build(coll, "ring", p, root=root, chunks=chunks, channels=channels)
    cst = coster(path_table(topo, ranks), get_protocol(proto, "hopper", nodes), lanes, channels)
    # sizes of a sweep, some not a multiple of the pieces (unequal chunks), one of 0 bytes
    bounds = np.array([sched.chunk_bounds(n) for n in (0, 7, 1000, 1 << 20, (1 << 24) + 3)])
    shape = chain_shape(sched)
    assert shape is not None
    fast = chain_many(sched, shape, cst, bounds, 4)
    slow = analytic.run(sched, cst, bounds, 4)
    assert np.array_equal(fast.end_s, slow.end_s)
    assert fast.ops == slow.events
    np.testing.assert_allclose(fast.busy_bytes, slow.busy_bytes, rtol=1e-12)


def test_simulate_answers_chains_from_the_frontier_with_the_engines_time():
    topo = build_topology("dgx-h100", nodes=4)
    sched = build("broadcast", "ring", 32, chunks=16, channels=8)
    fast = simulate(sched, topo, 1 << 26, protocol="simple")
    traced = simulate(sched, topo, 1 << 26, protocol="simple", trace=True)  # the engine
    assert "chain frontier" in fast.note and "chain frontier" not in traced.note
    assert fast.time_s == traced.time_s
    assert fast.events == traced.events == len(traced.timeline)


def test_a_schedule_that_only_looks_like_a_chain_goes_to_the_general_engine():
    sched = build("broadcast", "ring", 8, chunks=4, channels=2)
    steps = list(sched.steps())
    steps[2], steps[3] = steps[3], steps[2]  # a step out of order
    held = Schedule("broadcast", 8, "ring", sched.chunks_per_block, tuple(steps), root=0,
                    channels=2, params=sched.params)
    assert chain_shape(held) is None
    assert chain_shape(Schedule("broadcast", 8, "ring", sched.chunks_per_block,
                                tuple(sched.steps()), channels=2,
                                params=sched.params)) is not None

