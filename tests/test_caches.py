"""The simulator's caches belong to the objects whose data they hold (simulate/caches.py):
typed records with named slots on a Topology, a PathTable and a Schedule, cleared by the
caller, and no answer changes whether they are warm, cold or cleared."""
import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.memo import Memo
from gpucomm.simulate import predict, simulate
from gpucomm.simulate import analytic, core
from gpucomm.simulate.caches import UNSET, PathMemo, TopologyMemo, schedule_memo, topology_memo
from gpucomm.simulate.core import SizeSweep, path_table
from gpucomm.topology import build_topology


def test_a_misspelt_slot_is_an_error_not_a_silent_miss():
    topo = build_topology("dgx-h100")
    with pytest.raises(AttributeError):
        topo.cache.rotuer = None  # noqa: B018
    with pytest.raises(AttributeError):
        topology_memo(topo).path = {}
    with pytest.raises(AttributeError):
        path_table(topo, np.arange(8)).cache.shm = None


def test_each_topology_owns_its_records_and_clear_forgets_them():
    a, b = build_topology("dgx-h100", nodes=2), build_topology("dgx-h100", nodes=2)
    placement = np.arange(16)
    pa = path_table(a, placement)
    assert path_table(a, placement) is pa                    # kept on the topology
    assert path_table(b, placement) is not pa                # an equal topology has its own
    assert topology_memo(a) is a.cache.of(TopologyMemo) and topology_memo(a) is not \
        topology_memo(b)
    router = a.router
    a.cache.clear()
    assert a.cache.router is None and a.router is not router  # derived again
    assert a.cache.replica is not None                       # what the builder said stays
    assert path_table(a, placement) is not pa


def test_answers_are_the_same_warm_cold_and_cleared():
    topo = build_topology("dgx-h100", nodes=2)
    first = [predict(c, 1 << 20, topo).time_s for c in ("all_reduce", "all_to_all")]
    warm = [predict(c, 1 << 20, topo).time_s for c in ("all_reduce", "all_to_all")]
    paths = path_table(topo, np.arange(topo.nranks))
    assert paths.cache.costers and paths.cache.p2p_plan is not None
    paths.cache.clear()
    assert not paths.cache.costers and paths.cache.shm_plan is UNSET
    cleared = [predict(c, 1 << 20, topo).time_s for c in ("all_reduce", "all_to_all")]
    topo.cache.clear()
    cold = [predict(c, 1 << 20, topo).time_s for c in ("all_reduce", "all_to_all")]
    assert first == warm == cleared == cold


def test_a_schedule_remembers_whether_it_is_a_ring():
    ring, tree = build("all_reduce", "ring", 8), build("all_reduce", "double_binary_tree", 8)
    assert schedule_memo(ring).is_ring is None
    assert analytic.is_ring(ring) and not analytic.is_ring(tree)
    assert schedule_memo(ring).is_ring is True and schedule_memo(tree).is_ring is False
    ring.cache.clear()
    assert schedule_memo(ring).is_ring is None


def test_a_sweep_is_a_value_the_caller_holds():
    topo = build_topology("dgx-h100")
    sched = build("all_reduce", "ring", 8)
    sweep = SizeSweep([1 << 10, 1 << 20])
    swept = simulate(sched, topo, 1 << 20, protocol="simple", sweep=sweep)
    assert len(sweep.answers) == 1 and swept.time_s == simulate(sched, topo, 1 << 20,
                                                                protocol="simple").time_s
    sweep.clear()
    assert not sweep.answers
    assert not hasattr(core, "_SWEEP") and not hasattr(core, "size_sweep")


def test_memo_makes_one_record_per_class():
    memo = Memo()
    assert memo.of(PathMemo) is memo.of(PathMemo)
    assert "PathMemo" in repr(memo)
    memo.clear()
    assert repr(memo) == "Memo()"
