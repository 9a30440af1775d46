"""Direct copy-only plans run in C (`runtime.cplan`, `_stream.Waits.run_plan`) on real
processes: all-to-all on 2..8 ranks and the other copy-only collectives, bit for bit against
numpy's reference on every rank, in place and out of place, odd element counts, ranks that run
the plan in C mixed with ranks that interpret it in Python, a dead peer named.

`GPUCOMM_DIRECT_MIN_BYTES` and `GPUCOMM_A2A_DIRECT_MIN_BYTES` are lowered so that small
buffers take the direct (cross-memory) plans the runtime uses for large chunks. Ranks run this
file as a script (`python test_runtime_cplan.py MODE OUT_DIR`) under the launcher; each writes
OUT_DIR/rank<k>.json.
"""
import os
import sys
import time
import traceback

import numpy as np
import pytest
from launched import DIRECT_ENV, all_right, c_built as built, finish, inputs, run_ranks

HERE = os.path.abspath(__file__)
COUNTS = [1, 7, 1000, 65537]  # elements per block: tiny, odd, several pages
LATE = {"s": 0.0}  # rank k enters each call k times this late (mode "yielding")


def _call(comm, coll, inp, count, in_place):
    """Run one call; returns this rank's output."""
    p, r = comm.world_size, comm.rank
    time.sleep(LATE["s"] * r)
    if coll == "all_to_all":
        out = inp if in_place else np.empty(p * count, np.float32)
        comm.all_to_all(out, inp if not in_place else out)
    elif coll == "all_gather":
        out = np.empty(p * count, np.float32)
        comm.all_gather(out, inp)
    elif coll == "broadcast":
        out = inp if r == 0 else np.empty(count, np.float32)
        comm.broadcast(out, root=0)
    elif coll == "gather":
        out = np.empty(p * count, np.float32) if r == 0 else None
        comm.gather(out, inp, root=0)
    else:  # scatter
        out = np.empty(count, np.float32)
        comm.scatter(out, inp if r == 0 else None, root=0)
    return out


def _cases(comm, colls):
    from gpucomm.collectives import reference
    p, r, wrong, seed = comm.world_size, comm.rank, [], 0
    for coll in colls:
        # a broadcast from 1 MiB: the in-place root writes a share (`ShmTransport._splits`)
        for count in COUNTS + ([(1 << 18) + 1] if coll == "broadcast" else []):
            for in_place in ((False, True) if coll == "all_to_all" else (False,)):
                seed += 1
                ins = inputs(coll, p, count, seed)
                want = reference(coll, ins, root=0)[r]
                got = _call(comm, coll, ins[r].copy(), count, in_place)
                if want is not None and got.tobytes() != want.tobytes():
                    wrong.append(f"{coll} count={count} in_place={in_place}")
    return wrong


def _alternating(comm, rounds=12):
    """Direct all-to-alls (in C, no entry wait after them) between staged all-reduces and
    all-gathers (peers read the shared buffer), fresh values every call, the staged size
    growing (a new shared buffer): every output bit for bit the reference's."""
    from gpucomm.collectives import reference
    p, r, wrong = comm.world_size, comm.rank, []
    for i in range(rounds):
        count = 5000 + 3000 * i  # 20 KB .. 130 KB per block: staged, above the small path
        for j, coll in enumerate(("all_to_all", "all_reduce", "all_to_all", "all_gather")):
            # integer values, no -0.0: a sum is exact in any order (the reference adds in
            # rank order)
            ins = [np.round(a * 64) + np.float32(0) for a in inputs(coll, p, count, 100 * i + j)]
            want = reference(coll, ins, root=0)[r]
            x = ins[r].copy()
            if coll == "all_reduce":
                comm.all_reduce(x)
                got = x
            else:
                got = _call(comm, coll, x, count, False)
            if got.tobytes() != want.tobytes():
                wrong.append(f"{coll} round {i}")
    return wrong


REDUCE_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")


def _reductions(comm, cplan):
    """Every reducing collective whose plan reduces what cross-memory attach reads, for every
    dtype and op C reduces, in place and out of place: run in C, then the same call with the
    plan interpreted in Python (numpy), and the two outputs must match bit for bit. Returns
    (the mismatches, a digest of this rank's all-reduce outputs: the same on every rank)."""
    import hashlib
    import zlib

    from gpucomm import dtypes as dt
    p, r, wrong, digest = comm.world_size, comm.rank, [], hashlib.sha256()
    real_get = cplan.CPlans.get
    for dtype in REDUCE_DTYPES:
        d = dt.get_dtype(dtype)
        for op in ("sum", "prod", "min", "max", "avg"):
            if op == "avg" and not d.is_float:
                continue
            for count in (7, 65537):
                rng = np.random.default_rng([zlib.crc32(f"{dtype} {op}".encode()), count, r])
                x = dt.random_array(rng, p * count, d, op)
                for coll in ("all_reduce", "reduce_scatter", "reduce"):
                    for in_place in (False, True):
                        got = []
                        for python in (False, True):
                            cplan.CPlans.get = (lambda self, plan, rank, isz: None) if python \
                                else real_get
                            inp = x.copy()
                            if coll == "all_reduce":
                                out = inp if in_place else np.empty_like(inp)
                                if in_place:
                                    comm.all_reduce(out, op, dtype=dtype)
                                else:
                                    comm.transport.execute(
                                        comm.schedule(coll, inp.nbytes), inp, out, op, d, 60)
                            elif coll == "reduce_scatter":
                                out = inp[r * count:(r + 1) * count] if in_place \
                                    else np.empty(count, inp.dtype)
                                comm.reduce_scatter(out, inp, op, dtype=dtype)
                            else:
                                out = inp
                                comm.reduce(out, 0, op, dtype=dtype)
                            got.append(out.tobytes())
                        cplan.CPlans.get = real_get
                        if got[0] != got[1]:
                            wrong.append(f"{coll} {dtype} {op} count={count} "
                                         f"in_place={in_place}")
                        if coll == "all_reduce":
                            digest.update(got[0])
    return wrong, digest.hexdigest()


def _late_reductions(comm, calls=3):
    """Direct all-reduces (2 ranks: each reduced piece pushed into the peer) whose peer enters
    50 ms late, beyond C's 20 ms wait: C gives the call back to Python, which waits for the
    reduction's and its fused push's dependencies, and C resumes at that row."""
    from gpucomm.collectives import reference
    p, r, wrong = comm.world_size, comm.rank, []
    for i in range(calls):
        ins = [np.round(a * 64) + np.float32(0) for a in inputs("all_reduce", p, 65537, 50 + i)]
        want = reference("all_reduce", ins, root=0)[r]
        x = ins[r].copy()
        time.sleep(0.05 * r)
        comm.all_reduce(x)
        if x.tobytes() != want.tobytes():
            wrong.append(f"call {i}")
    return wrong


def rank_main(mode, out_dir):
    import gpucomm.runtime as rt
    from gpucomm.runtime import cplan, shm_fast
    ran = []  # calls run in C: by `cplan.run`, or whole (`shm_fast`)
    real_run, real_fast = cplan.run, shm_fast.FastCalls._fast_call
    cplan.run = lambda *a: (ran.append(1), real_run(*a))[1]

    def fast(self, *a):
        done = real_fast(self, *a)
        ran.extend([1] * done)
        return done
    shm_fast.FastCalls._fast_call = fast
    # alternating: only all-to-all direct, the rest staged
    comm = rt.init(options=rt.RuntimeOptions(a2a_direct_min_bytes=4)) \
        if mode == "alternating" else rt.init()
    res = {"rank": comm.rank}
    try:
        if mode == "mixed" and comm.rank == 0:  # this rank interprets the plans in Python
            cplan.CPlans.get = lambda self, plan, rank, isz: None
        if mode in ("a2a", "mixed"):
            res["wrong"] = _cases(comm, ["all_to_all"])
        elif mode == "others":
            res["wrong"] = _cases(comm, ["all_gather", "broadcast", "gather", "scatter"])
        elif mode == "alternating":
            res["wrong"] = _alternating(comm)
        elif mode == "late_reductions":
            res["wrong"] = _late_reductions(comm)
        elif mode == "reductions":
            res["wrong"], res["digest"] = _reductions(comm, cplan)
        elif mode == "mismatch":  # both direct plans in C: all-to-all against all-gather
            x = np.ones(comm.world_size * 4096, np.float32)
            _call(comm, "all_to_all" if comm.rank == 0 else "all_gather",
                  x if comm.rank == 0 else x[:4096], 4096, False)
        elif mode == "yielding":  # waits yield the core first (forced), peers enter late
            tr = comm.transport
            res["yields"] = tr._yield_s > 0
            tr._yield_s = 0.05
            tr._waiter.set_yield(50e6)  # C: up to its 20 ms per wait, then back to Python
            LATE["s"] = 0.002
            res["wrong"] = _cases(comm, ["all_to_all", "all_gather", "broadcast"])
        elif mode == "dead":  # rank 1 leaves without calling
            if comm.rank == 1:
                os._exit(0)
            _call(comm, "all_to_all", np.ones(comm.world_size * 4096, np.float32), 4096, False)
        res["c_calls"] = len(ran)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["trace"] = traceback.format_exc()
    finish(comm, res, out_dir)


def run(nranks, mode, tmp_path, timeout=300):
    return run_ranks(HERE, nranks, mode, tmp_path, DIRECT_ENV, timeout)


def ran_in_c(nranks, mode, tmp_path, timeout=300) -> list:
    """The ranks' results of `mode`: every output numpy's, and some calls run in C."""
    results, log, _ = run(nranks, mode, tmp_path, timeout)
    all_right(results, log, nranks)
    for res in results:
        assert res["c_calls"] > 0, "no call ran in C"
    return results


@built
@pytest.mark.parametrize("nranks", [2, 3, 5, 8])
def test_all_to_all_in_c_is_bitwise_numpys_on_every_rank(nranks, tmp_path):
    results, log, _ = run(nranks, "a2a", tmp_path)
    all_right(results, log, nranks)
    for res in results:
        assert res["c_calls"] >= len(COUNTS), "the calls did not run in C"


@built
@pytest.mark.parametrize("nranks", [2, 3])
def test_other_copy_only_collectives_in_c(nranks, tmp_path):
    ran_in_c(nranks, "others", tmp_path)


@built
@pytest.mark.parametrize("nranks", [2, 3])
def test_waits_that_yield_the_core_stay_exact(nranks, tmp_path):
    """Waits that yield the core before they sleep (set where ranks share their cores:
    `shm_wait.yields`; forced here), peers entering each call late: every
    output is numpy's. Ranks are bound one per core where there are enough, else unbound."""
    results = ran_in_c(nranks, "yielding", tmp_path)
    cores = len(os.sched_getaffinity(0))
    assert [res["yields"] for res in results] == [cores < nranks] * nranks


@built
def test_c_and_python_ranks_mix(tmp_path):
    results, log, _ = run(3, "mixed", tmp_path)
    all_right(results, log, 3)
    assert results[0]["c_calls"] == 0 and results[1]["c_calls"] > 0


@built
@pytest.mark.parametrize("nranks", [2, 3])
def test_direct_calls_between_staged_ones_stay_exact(nranks, tmp_path):
    """A rank enters its next call without waiting for peers to end a direct one (they
    read none of its shared buffer), but still waits after a staged one."""
    results, log, _ = run(nranks, "alternating", tmp_path)
    all_right(results, log, nranks)
    for res in results:
        assert res["c_calls"] >= 24


@built
@pytest.mark.parametrize("nranks", [2, 3])
def test_reductions_of_what_cma_reads_run_in_c_bit_for_bit(nranks, tmp_path):
    """Direct plans reduce a peer's data read by cross-memory attach, piece by piece (on 2
    ranks each reduced piece written into the peer as it is made): in C, for every dtype and
    op C reduces, the outputs are the Python interpreter's (numpy's) bit for bit, and an
    all-reduce's are the same on every rank."""
    results = ran_in_c(nranks, "reductions", tmp_path, timeout=600)
    assert len({res["digest"] for res in results}) == 1


@built
def test_a_late_peer_in_a_fused_reduction_and_push_resumes_exact(tmp_path):
    ran_in_c(2, "late_reductions", tmp_path)


@built
def test_a_mismatch_found_in_c_is_reported_on_every_rank(tmp_path):
    """C compares a peer's call descriptor with this rank's; a difference goes back to
    Python, which names both calls."""
    results, log, elapsed = run(2, "mismatch", tmp_path)
    assert len(results) == 2, log[-3000:]
    for res in results:
        assert "collective mismatch" in res.get("error", ""), res
    assert elapsed < 45


@built
def test_a_dead_peer_is_named(tmp_path):
    results, log, elapsed = run(2, "dead", tmp_path)
    assert len(results) == 1, log[-3000:]
    assert "rank 1" in results[0].get("error", ""), results[0]
    assert elapsed < 45


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2])
