"""Where ranks outnumber the cores they may run on, a wait spins only briefly
(`SHARED_SPIN_S`) and yields its core before it sleeps
(`shm_wait.cores_of`, `yields`, `YIELD_S`, `_stream.Waits.set_yield`).
Pure and in-process: the processes here are this one and `sleep` children; launched ranks:
test_runtime_cplan."""
import mmap
import os
import subprocess

import pytest
from launched import c_built

from gpucomm.runtime import shm_wait
from gpucomm.runtime.shm_ll import WaitsRunner

linux = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                           reason="CPU affinities are Linux's")


@linux
def test_ranks_yield_wherever_they_share_cores():
    me, cores = os.getpid(), len(os.sched_getaffinity(0))
    assert shm_wait.cores_of([me, me]) == cores
    assert [shm_wait.yields([me] * n) for n in (cores, cores + 1, 2 * cores, 4 * cores)] \
        == [False, True, True, True]


@linux
def test_waits_spin_briefly_where_ranks_outnumber_their_cores():
    """A rank with a core of its own spins SPIN_S on a late peer (it runs elsewhere); where
    ranks outnumber their cores, SHARED_SPIN_S (the peer may need this core), in Python and
    in every C wait (they read the transport's `_spin_s`)."""
    me, cores = os.getpid(), len(os.sched_getaffinity(0))

    class Waits(shm_wait.PeerWaits):
        def __init__(self, n):
            self.pids = [me] * n

    for n, spin in ((cores, shm_wait.SPIN_S), (cores + 1, shm_wait.SHARED_SPIN_S),
                    (4 * cores, shm_wait.SHARED_SPIN_S)):
        w = Waits(n)
        w._yield_where_cores_are_shared()
        assert w._spin_s == spin, n
    assert shm_wait.SHARED_SPIN_S < shm_wait.SPIN_S


@linux
def test_processes_bound_one_per_core_share_none():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: two processes always share it")
    kids = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    try:
        for kid, core in zip(kids, cores):
            os.sched_setaffinity(kid.pid, {core})
        assert shm_wait.cores_of([k.pid for k in kids]) == 2
        assert not shm_wait.yields([k.pid for k in kids])
        os.sched_setaffinity(kids[1].pid, {cores[0]})  # both on one core now
        assert shm_wait.cores_of([k.pid for k in kids]) == 1
        assert shm_wait.yields([k.pid for k in kids])
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()


@linux
def test_a_process_gone_counts_this_ones_cores():
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert shm_wait.cores_of([gone.pid]) == len(os.sched_getaffinity(0))


@c_built
def test_waits_takes_a_yield_time_in_range():
    seg = mmap.mmap(-1, 4096)  # one rank's control words
    # word indices: progress, waiting, input and output address, in place, descriptor (8),
    # generation, acks
    waits = WaitsRunner(0, [seg], [os.getpid()], (0, 1, 2, 3, 4, 5, 13, 14))
    try:
        waits.set_yield(shm_wait.YIELD_S * 1e9)
        waits.set_yield(0)
        for bad in (-1.0, 2e9, float("nan")):
            with pytest.raises(ValueError, match="set_yield"):
                waits.set_yield(bad)
    finally:
        waits.close()
