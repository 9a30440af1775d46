"""Cached calls run whole in C (`runtime.shm_fast`, `_stream.Waits.call`) on real processes:
repeated calls on the same buffers with fresh values every call are bit for bit numpy's
reference, on 2 and 3 ranks; a peer late beyond C's wait, a collective mismatch and a dead
peer all end in Python as on the general path; overlapping buffers C must not take go the
general way (which copies).

Ranks run this file as a script (`python test_runtime_fast.py MODE OUT_DIR`) under the
launcher; each writes OUT_DIR/rank<k>.json.
"""
import os
import sys
import time
import traceback

import numpy as np
import pytest
from launched import DIRECT_ENV, all_right, c_built as built, finish, inputs, run_ranks

HERE = os.path.abspath(__file__)
COLLS = ("all_to_all", "all_to_all in place", "all_gather", "broadcast",
         "broadcast out of place", "gather", "gather in place", "scatter", "scatter in place")
COUNT = 3001  # elements per block: odd, a few pages


class Buffers:
    """One collective's buffers on this rank, kept across calls (what the cache keys on)."""

    def __init__(self, comm, coll, count):
        from gpucomm.collectives import get_collective
        p, r = comm.world_size, comm.rank
        self.comm, self.coll, self.count = comm, coll, count
        rng = get_collective(coll.split()[0]).inputs(r, p, 0)
        self.inp = np.empty(rng[1] * count if rng else count, np.float32)
        self.out = self.inp if coll.endswith(" in place") or coll == "broadcast" and r == 0 \
            else np.empty(count if coll.split()[0] in ("broadcast", "scatter") else p * count,
                          np.float32)
        if coll == "gather in place" and r == 0:  # nccl-tests' layout: the input is the
            self.out = np.empty(p * count, np.float32)  # root's own block of the output
            self.inp = self.out[:count]
        elif coll == "scatter in place":  # ... the output the root's own block of the input
            self.out = self.inp[:count] if r == 0 else np.empty(count, np.float32)

    def call(self, ins):
        """Fill the input with this rank's `ins` and run the call; returns the output."""
        c, r, name = self.comm, self.comm.rank, self.coll.split()[0]
        self.inp[:] = ins[r] if ins[r].size else 0
        if name == "all_to_all":
            c.all_to_all(self.out, self.inp)
        elif name == "all_gather":
            c.all_gather(self.out, self.inp)
        elif self.coll == "broadcast out of place":  # as nccl-tests calls it: every rank
            # passes both buffers, the root's input is copied to its output too
            sched = c.schedule("broadcast", self.out.nbytes)
            c.transport.execute(sched, self.inp, self.out, "sum", "float32")
        elif name == "broadcast":
            c.broadcast(self.out, root=0)
        elif name == "gather":
            c.gather(self.out if r == 0 else None, self.inp, root=0)
            return self.out if r == 0 else None
        else:
            c.scatter(self.out, self.inp if r == 0 else None, root=0)
        return self.out


def _repeat(comm, counts, calls=6, late=False):
    """Every collective `calls` times on the same buffers, fresh values each time; `late`:
    rank 1 starts some calls 60 ms after the others (beyond C's 20 ms wait). Counts each
    collective's calls run whole in C in counts["per_coll"]."""
    from gpucomm.collectives import reference
    wrong, per_coll = [], counts.setdefault("per_coll", {})
    for k, coll in enumerate(COLLS):
        name = coll.split()[0]
        bufs = Buffers(comm, coll, COUNT)
        before = counts["fast"]
        for i in range(calls):
            ins = inputs(name, comm.world_size, COUNT, 100 * k + i)
            want = reference(name, ins, root=0)[comm.rank]
            if late and comm.rank == 1 and i % 2:
                time.sleep(0.06)
            got = bufs.call(ins)
            if want is not None and got.tobytes() != want.tobytes():
                wrong.append(f"{coll} call {i}")
        per_coll[coll] = counts["fast"] - before
    return wrong


def _overlapping(comm):
    """all-to-all whose output overlaps its input, shifted: not the in-place layout."""
    from gpucomm.collectives import reference
    p, wrong = comm.world_size, []
    buf = np.empty(2 * p * COUNT, np.float32)
    inp, out = buf[:p * COUNT], buf[COUNT:COUNT + p * COUNT]
    for i in range(3):
        ins = inputs("all_to_all", p, COUNT, 7 + i)
        want = reference("all_to_all", ins)[comm.rank]
        inp[:] = ins[comm.rank]
        comm.all_to_all(out, inp)
        if out.tobytes() != want.tobytes():
            wrong.append(f"overlapping call {i}")
    return wrong


def _values(dtype, n, seed):
    """n values of `dtype` with the awkward floats in (infinities, -0.0, subnormals)."""
    from gpucomm import dtypes as dt
    d = dt.get_dtype(dtype)
    rng = np.random.default_rng(seed)
    if not d.is_float:
        return rng.integers(-100, 100, n).astype(d.storage)
    x = rng.standard_normal(n).astype(np.float32) * 3
    x[:4] = [np.inf, -np.inf, -0.0, 1e-41]
    return dt.to_storage(x, d)


def _reductions(comm):
    """Staged reductions (C rows now) against the same calls interpreted in Python, bit for
    bit (NaN-free inputs: which NaN payload a sum keeps is the compiler's choice). In C each
    call runs twice, the second whole in C (`shm_fast`; an average divided after it)."""
    from gpucomm.runtime import cplan
    from gpucomm.runtime.shm_ll import LL_DTYPES
    p, n, out = comm.world_size, 12000 * comm.world_size, {}
    cases = [(c, d, op) for c in ("all_reduce", "reduce_scatter", "reduce") for d in LL_DTYPES
             for op in ("sum", "prod", "min", "max", "avg")
             if op != "avg" or d in ("float32", "float64", "float16", "bfloat16")]
    for in_c in (True, False):
        if not in_c:  # every rank: the same calls, interpreted
            comm.transport._fast.clear()
            comm.transport._interps.clear()
            cplan.CPlans.get = lambda self, plan, rank, isz: None
        for k, (coll, dtype, op) in enumerate(cases):
            for _ in range(2 if in_c else 1):
                x = _values(dtype, n, 1000 * comm.rank + k)
                o = np.zeros(n // p if coll == "reduce_scatter" else n, x.dtype)
                kw = {"dtype": dtype} if dtype == "bfloat16" else {}
                if coll == "all_reduce":
                    comm.all_reduce(x, op, **kw)
                    o = x
                elif coll == "reduce_scatter":
                    comm.reduce_scatter(o, x, op, **kw)
                else:
                    comm.reduce(x, 0, op, **kw)
                    o = x
            out.setdefault((coll, dtype, op), []).append(o.tobytes())
    return [f"{c} {d} {op}" for (c, d, op), (a, b) in out.items() if a != b]


def rank_main(mode, out_dir):
    import gpucomm.runtime as rt
    from gpucomm.runtime import cplan, shm_fast
    counts = {"fast": 0, "resumed": 0, "c_runs": 0}
    real_run = cplan.run

    def c_run(*a):
        counts["c_runs"] += 1
        return real_run(*a)
    cplan.run = c_run
    real_fast, real_resume = shm_fast.FastCalls._fast_call, shm_fast.FastCalls._fast_resume

    def fast(self, *a):
        done = real_fast(self, *a)
        counts["fast"] += done
        return done

    def resume(self, *a):
        counts["resumed"] += 1
        return real_resume(self, *a)
    shm_fast.FastCalls._fast_call, shm_fast.FastCalls._fast_resume = fast, resume
    comm = rt.init()
    res = {"rank": comm.rank}
    try:
        if mode in ("repeat", "late"):
            res["wrong"] = _repeat(comm, counts, late=mode == "late")
        elif mode == "overlap":
            res["wrong"] = _overlapping(comm)
        elif mode == "reduce":
            res["wrong"] = _reductions(comm)
        else:  # mismatch, dead: a cached all-to-all, then rank 1 calls another or leaves
            bufs = Buffers(comm, "all_to_all", COUNT)
            for i in range(3):
                bufs.call(inputs("all_to_all", comm.world_size, COUNT, i))
            res["before"] = dict(counts)
            if comm.rank == 1 and mode == "dead":
                os._exit(0)
            if comm.rank == 1:  # same output size, another collective
                comm.all_gather(bufs.out, bufs.inp[:COUNT])
            else:
                bufs.call(inputs("all_to_all", comm.world_size, COUNT, 9))
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["trace"] = traceback.format_exc()
    res.update(counts)
    finish(comm, res, out_dir)


def run(nranks, mode, tmp_path, timeout=300):
    return run_ranks(HERE, nranks, mode, tmp_path, DIRECT_ENV, timeout)


@built
@pytest.mark.parametrize("nranks", [2, 3])
def test_repeated_calls_run_whole_in_c_and_stay_exact(nranks, tmp_path):
    results, log, _ = run(nranks, "repeat", tmp_path)
    all_right(results, log, nranks)
    for res in results:
        # the first call of each collective (or two, until the shared buffer is unlinked)
        # takes the general path, the rest run whole in C on every rank (an all-to-all in
        # place too, its input's other blocks copied aside before each)
        assert {c: min(n, 4) for c, n in res["per_coll"].items()} == dict.fromkeys(COLLS, 4), res


@built
@pytest.mark.parametrize("nranks", [2, 3])
def test_reductions_in_c_are_bitwise_the_interpreters(nranks, tmp_path):
    results, log, _ = run_ranks(HERE, nranks, "reduce", tmp_path, {"GPUCOMM_TIMEOUT": "60"},
                                300)
    all_right(results, log, nranks)
    for res in results:
        assert res["c_runs"] >= 90, res  # the plans with reductions ran in C
        # and the second calls whole in C, the 12 averages too (94 before they could be)
        assert res["fast"] >= 104, res


@built
def test_a_peer_late_beyond_cs_wait_ends_the_call_in_python(tmp_path):
    results, log, _ = run(2, "late", tmp_path)
    all_right(results, log, 2)
    assert results[0]["resumed"] > 0, results[0]


@built
def test_overlapping_buffers_take_the_general_path(tmp_path):
    results, log, _ = run(2, "overlap", tmp_path)
    all_right(results, log, 2)
    for res in results:
        assert res["fast"] == 0, res


@built
def test_a_mismatch_after_cached_calls_is_reported_on_every_rank(tmp_path):
    results, log, elapsed = run(2, "mismatch", tmp_path)
    assert len(results) == 2, log[-3000:]
    assert results[0]["before"]["fast"] > 0, results[0]
    for res in results:
        assert "collective mismatch" in res.get("error", ""), res
        assert "all_to_all" in res["error"] and "all_gather" in res["error"], res
    assert elapsed < 45


@built
def test_a_dead_peer_is_named_by_a_cached_call(tmp_path):
    results, log, elapsed = run(2, "dead", tmp_path)
    assert len(results) == 1, log[-3000:]
    assert results[0]["before"]["fast"] > 0, results[0]
    assert "rank 1" in results[0].get("error", ""), results[0]
    assert elapsed < 45


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2])
