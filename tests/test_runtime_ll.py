"""The shm runtime's small-message path (`runtime.shm_ll`, `_stream.LL`) on real processes:
bit-for-bit against numpy's rank-order reduction on every rank, calls mixed with the general
path, the fallbacks (path off, no C extension), mismatched calls, a dead or stuck peer.


Ranks run this file as a script (`python test_runtime_ll.py MODE OUT_DIR`) under the launcher;
each writes OUT_DIR/rank<k>.json with its digests and failures.
"""
import hashlib
import os
import sys
import time
import traceback

import numpy as np
import pytest
from launched import all_right, finish, run_ranks

from gpucomm.errors import ConfigError
from gpucomm.runtime.options import RuntimeOptions

HERE = os.path.abspath(__file__)
ll_built = pytest.mark.skipif(
    __import__("gpucomm.runtime.shm_ll", fromlist=["LLRunner"]).LLRunner is None,
    reason="the C extension (gpucomm.runtime._stream) is not built")

UFUNC = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum,
         "max": np.maximum}
DTYPES = ["float32", "float64", "int8", "uint8", "int32", "int64", "float16", "bfloat16"]
HALVES = ("float16", "bfloat16")  # stored in 16 bits, reduced in float32
COUNTS = [0, 1, 2, 13, 14, 15, 29, 100, 1000]  # lines of 56 B: partial, whole, several


def widen(a, dtype):
    """A float16 or bfloat16 (uint16 bits) array as float32, exactly."""
    return a.astype(np.float32) if dtype == "float16" else (a.astype(np.uint32) << 16).view(
        np.float32)


def narrow(a, dtype):
    """float32 to float16 or bfloat16, to nearest even (bfloat16 NaNs quiet): numpy's cast,
    and for bfloat16 the rounding written out on the bits."""
    if dtype == "float16":
        return a.astype(np.float16)
    bits = a.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def data(seed, n, dtype, op):
    rng = np.random.default_rng(seed)
    if dtype in HALVES:
        if op in ("min", "max"):  # every bit pattern: NaNs, infinities, subnormals, zeros
            return rng.integers(0, 1 << 16, n, dtype=np.uint16).view(
                np.float16 if dtype == "float16" else np.uint16)
        lo, hi = (0.5, 1.5) if op == "prod" else (-4.0, 4.0)
        x = rng.uniform(lo, hi, n).astype(np.float32)
        if op == "sum" and n > 4:  # overflow to inf, subnormals that round on every step
            x[:4] = [60000.0, 3e-5, -6.1e-5, 1e-7]
        return narrow(x, dtype)
    if np.dtype(dtype).kind == "f":
        lo, hi = (0.5, 1.5) if op == "prod" else (-4.0, 4.0)
        return rng.uniform(lo, hi, n).astype(dtype)
    return rng.integers(-100 if dtype.startswith("int") else 0, 100, n).astype(dtype)


def reference(p, n, dtype, op, seed):
    """numpy, reducing rank 0's array with rank 1's, then rank 2's ...: what every rank of
    the path must return, bit for bit. float16 and bfloat16 round after every step (widen
    both operands to float32, reduce, round to nearest even), as NCCL does."""
    acc = data(seed, n, dtype, op)
    if dtype in HALVES:
        for q in range(1, p):
            acc = narrow(UFUNC[op](widen(acc, dtype), widen(data(seed + q, n, dtype, op),
                                                            dtype)), dtype)
        if op == "avg":
            acc = narrow(widen(acc, dtype) / np.float32(p), dtype)
        return acc
    for q in range(1, p):
        acc = UFUNC[op](acc, data(seed + q, n, dtype, op)).astype(dtype)
    if op == "avg":
        acc = acc / np.dtype(dtype).type(p)
    return acc


# --- rank side ----------------------------------------------------------------------------
def _cases(comm, mode):
    """Every dtype x op x count, in place through the API and out of place through the
    transport; returns the digest of every result."""
    tr, p, r = comm.transport, comm.world_size, comm.rank
    h, wrong = hashlib.sha256(), []
    seed = 0
    for dtype in DTYPES:
        ops = ["sum", "prod", "min", "max"] + (["avg"] if "float" in dtype else [])
        api_dtype = "bfloat16" if dtype == "bfloat16" else None  # uint16 bits: say so
        for op in ops:
            for n in COUNTS:
                seed += 100
                want = reference(p, n, dtype, op, seed)
                x = data(seed + r, n, dtype, op)
                comm.all_reduce(x, op, dtype=api_dtype)
                out = np.empty_like(x)
                sched = comm.schedule("all_reduce", x.nbytes)
                tr.execute(sched, data(seed + r, n, dtype, op), out, op, dtype)
                for got, how in ((x, "api"), (out, "execute")):
                    if got.tobytes() != want.tobytes():
                        wrong.append(f"{how} {dtype} {op} n={n}: {got[:4]} != {want[:4]}")
                    h.update(got.tobytes())
    return h.hexdigest(), wrong


def _mixed(comm):
    """Small calls of the path between general-path calls (large, float16, other
    collectives), many times: counters and halves stay consistent."""
    p, r, wrong = comm.world_size, comm.rank, []
    for i in range(60):
        small = data(i * 10 + r, 3, "float32", "sum")
        comm.all_reduce(small)
        if small.tobytes() != reference(p, 3, "float32", "sum", i * 10).tobytes():
            wrong.append(f"small call {i}")
        if i % 3 == 0:
            big = np.full(20000, r + 1, np.float32)  # 80 KB: the general path
            comm.all_reduce(big)
            if not np.all(big == p * (p + 1) / 2):
                wrong.append(f"large call {i}")
        if i % 5 == 0:
            h = np.full(4, r + 1, np.float16)  # float16: the path, rounding every step
            comm.all_reduce(h)
            if not np.all(h == p * (p + 1) / 2):
                wrong.append(f"float16 call {i}")
            g = np.empty(p, np.int32)
            comm.all_gather(g, np.array([r], np.int32))
            if g.tolist() != list(range(p)):
                wrong.append(f"all_gather {i}")
    return wrong


def _threads(comm):
    """`any_thread` (the torch backend's communicator): small calls from two threads taking
    turns, blocking and async, and async small calls queued behind a large one; every result
    must be the rank-order reduction, and nothing may take the general path except the large
    calls."""
    import threading
    p, r, wrong, works = comm.world_size, comm.rank, [], []
    turn = [threading.Event(), threading.Event()]
    general, calls = comm._call, []
    comm._call = lambda *a: calls.append(a[0]) or general(*a)  # what reaches the general path

    def worker(k):
        for i in range(k, 40, 2):
            turn[k].wait(60)
            turn[k].clear()
            x = data(i + r, 5, "float32", "sum")
            w = comm.all_reduce(x, async_op=bool(i % 4))
            if w is not None and not w.is_completed():
                wrong.append(f"call {i}: an async small call with nothing queued is not done")
            if x.tobytes() != reference(p, 5, "float32", "sum", i).tobytes():
                wrong.append(f"call {i} from thread {k}")
            turn[1 - k].set()

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    turn[0].set()
    for t in threads:
        t.join(120)
    general_before = comm.transport._data is not None or bool(calls)
    if not comm.barrier(async_op=True).is_completed():  # a barrier is as small: inline too
        wrong.append("an async barrier with nothing queued is not done")
    for i in range(20):  # a large async call, then small ones queued behind it
        big = np.full(20000, r + 1, np.float32)
        works.append((comm.all_reduce(big, async_op=True), big, None))
        x = data(100 + i + r, 5, "float32", "sum")
        works.append((comm.all_reduce(x, async_op=True), x, 100 + i))
    for w, x, seed in works:
        w.wait()
        want = np.full(20000, p * (p + 1) / 2, np.float32) if seed is None else \
            reference(p, 5, "float32", "sum", seed)
        if x.tobytes() != want.tobytes():
            wrong.append(f"queued call (seed {seed})")
    return wrong, general_before


def _failing(comm, mode, res):
    """The modes where a call must fail: mismatched calls, a dead or stuck peer."""
    if mode == "mismatch":  # rank 0 reduces 2 elements, the others 3
        comm.all_reduce(np.ones(2 if comm.rank == 0 else 3, np.float32))
    elif mode == "mismatch_general":  # 8 bytes (the path) against 80 KB (general)
        comm.all_reduce(np.ones(2 if comm.rank == 0 else 20000, np.float32))
    elif mode == "mismatch_dtype":  # float16 against bfloat16: both on the path
        x = np.ones(2, np.float16 if comm.rank == 0 else np.uint16)
        comm.all_reduce(x, dtype=None if comm.rank == 0 else "bfloat16")
    elif mode == "mismatch_settings":  # the path off on rank 1 only: one_shot, general
        if comm.rank == 1:
            comm.transport._ll_close()
        comm.all_reduce(np.ones(2, np.float32))
    elif mode in ("dead", "dead_async"):  # rank 1 leaves without calling
        if comm.rank == 1:
            os._exit(0)
        w = comm.all_reduce(np.ones(2, np.float32), async_op=mode == "dead_async")
        res["returned"] = True  # dead_async: the error comes from Work.wait
        if w is not None:
            w.wait()
    elif mode == "stuck":  # rank 1 lives on but never calls
        if comm.rank == 1:
            time.sleep(8)
            os._exit(0)
        comm.all_reduce(np.ones(2, np.float32))


def rank_main(mode, out_dir):
    import gpucomm.runtime as rt
    if mode == "noext":  # as if built without a compiler
        import gpucomm.runtime.shm_ll as shm_ll
        shm_ll.LLRunner = None
    comm = rt.init()
    if mode in ("threads", "dead_async"):  # as the torch backend builds it
        comm = rt.Communicator(comm.rank, comm.world_size, comm.transport, comm.timeout,
                               any_thread=True)
    res = {"rank": comm.rank}
    try:
        if mode in ("cases", "off", "noext"):
            res["digest"], res["wrong"] = _cases(comm, mode)
            res["general_used"] = comm.transport._data is not None
        elif mode == "mixed":
            res["wrong"] = _mixed(comm)
        elif mode == "threads":
            res["wrong"], res["general_used"] = _threads(comm)
        else:
            _failing(comm, mode, res)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["trace"] = traceback.format_exc()
    finish(comm, res, out_dir)


# --- test side ----------------------------------------------------------------------------
def run(nranks, mode, tmp_path, env=None, timeout=240):
    """The path reaches its largest allowed size (32 KiB), not the default's, so every size a
    host's tuning may give it is checked."""
    return run_ranks(HERE, nranks, mode, tmp_path, {"GPUCOMM_TIMEOUT": "60",
                                                    "GPUCOMM_LL_MAX_BYTES": str(32 << 10),
                                                    **(env or {})}, timeout)


@ll_built
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_small_all_reduce_is_bitwise_the_rank_order_reduction_on_every_rank(nranks, tmp_path):
    results, log, _ = run(nranks, "cases", tmp_path)
    all_right(results, log, nranks)
    for res in results:
        assert not res["general_used"], "a call took the general path"
    assert len({res["digest"] for res in results}) == 1  # the same bits on every rank


@pytest.mark.parametrize("mode,env", [("off", {"GPUCOMM_LL_MAX_BYTES": "0"}), ("noext", {})])
def test_without_the_path_the_general_one_gives_the_same_bits(mode, env, tmp_path):
    results, log, _ = run(2, mode, tmp_path, env)
    all_right(results, log, 2)
    for res in results:
        assert res["general_used"]


@ll_built
def test_small_calls_mix_with_general_ones(tmp_path):
    results, log, _ = run(3, "mixed", tmp_path)
    all_right(results, log, 3)


@ll_built
@pytest.mark.parametrize("mode", ["mismatch", "mismatch_general", "mismatch_dtype",
                                  "mismatch_settings"])
def test_mismatched_small_calls_fail_on_every_rank(mode, tmp_path):
    results, log, elapsed = run(2, mode, tmp_path)
    assert len(results) == 2, log[-3000:]
    for res in results:
        assert "collective mismatch" in res.get("error", ""), res
    assert elapsed < 50  # found at once, not at the 60 s timeout


@ll_built
def test_calls_from_any_thread_take_the_path_in_one_order(tmp_path):
    """The torch backend's communicator (`any_thread`): small calls run on the calling thread
    when nothing is queued, behind the queue otherwise."""
    results, log, _ = run(2, "threads", tmp_path)
    all_right(results, log, 2)
    for res in results:
        assert not res["general_used"], "a small call took the general path"


@ll_built
def test_an_async_call_on_any_thread_reports_a_dead_peer_on_wait(tmp_path):
    results, log, elapsed = run(2, "dead_async", tmp_path, {"GPUCOMM_TIMEOUT": "20"})
    err = results[0].get("error", "")
    assert results[0].get("returned"), results[0]  # the call returned a Work ...
    assert "rank 1" in err and ("died" in err or "shut down" in err), results[0]  # ... wait
    assert elapsed < 15


@ll_built
def test_a_dead_peer_is_named(tmp_path):
    results, log, elapsed = run(2, "dead", tmp_path, {"GPUCOMM_TIMEOUT": "20"})
    err = results[0].get("error", "")
    assert "rank 1" in err and ("died" in err or "shut down" in err), results[0]
    assert elapsed < 15


@ll_built
def test_a_stuck_peer_times_out_naming_it(tmp_path):
    results, log, elapsed = run(2, "stuck", tmp_path, {"GPUCOMM_TIMEOUT": "2"})
    err = results[0].get("error", "")
    assert err.startswith("CommTimeout") and "rank 1" in err, results[0]
    assert elapsed < 40


def test_the_option_is_checked_and_read_from_the_environment():
    assert RuntimeOptions().ll_max_bytes > 0
    assert RuntimeOptions.from_env({"GPUCOMM_LL_MAX_BYTES": "0"}).ll_max_bytes == 0
    with pytest.raises(ConfigError, match="ll_max_bytes must be at most 32768"):
        RuntimeOptions(ll_max_bytes=40000)
    with pytest.raises(ConfigError, match="GPUCOMM_LL_MAX_BYTES"):
        RuntimeOptions.from_env({"GPUCOMM_LL_MAX_BYTES": "-1"})
    from gpucomm.runtime.shm_control import LL_LINES
    assert LL_LINES * 56 >= 32768  # the area holds the largest payload the option allows


HOST = """format: 2
cma: true
bandwidth_Bps: 10.0e9
latency_s: 1.0e-5
ll_latency_s: 2.0e-6
ll_Bps: 1.0e9
cores: 2
cache_bytes: 1048576
rates:
  2: {copy_Bps: 10.0e9, reduce_Bps: 5.0e9, copy_cache_Bps: 40.0e9, reduce_cache_Bps: 20.0e9,
      stream_Bps: 16.0e9}
"""


@ll_built
def test_the_predictor_times_the_path_up_to_its_size(tmp_path, monkeypatch):
    from gpucomm.bench.plancost import add_predictions
    from gpucomm.runtime import options
    path = tmp_path / "host.yaml"
    path.write_text(HOST)
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    monkeypatch.setattr(options, "_active", RuntimeOptions(ll_max_bytes=4096))
    rows = [{"size": s, "count": s // 4, "type": t, "root": -1, "algorithm": "auto"}
            for s, t in ((8, "float32"), (4096, "float32"), (8192, "float32"), (8, "uint32"))]
    add_predictions(rows, "all_reduce", 3)
    got = [r["predicted_time_us"] * 1e-6 for r in rows]
    assert got[0] == pytest.approx(2e-6)
    assert got[1] == pytest.approx(2e-6 + 2 * (4096 - 8) / 1e9)  # two peers' lines
    assert got[2] > 1e-5 and got[3] > 1e-5  # beyond the path's size, or uint32: the plan


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2])
