"""One rank of the runtime tests (run by tests/test_runtime.py under the launcher).

    python tests/test_runtime_worker.py MODE RESULT_DIR

Writes RESULT_DIR/rank<k>.json: {"cases": n, "failures": [...], "digests": {...}, ...}.
Every case's inputs come from a seed, so each rank computes the reference for all ranks.
"""
import json
import os
import sys
import time
import traceback
import zlib

import numpy as np

import gpucomm.runtime
from gpucomm import dtypes as dt
from gpucomm.algorithms import REGISTRY, build
from gpucomm.collectives import buffer_counts, check_outputs, get_collective, reference
from gpucomm.errors import ConfigError, GpucommError


def inputs_for(coll, p, bc, dtype, op, root, seed):
    rng = np.random.default_rng(seed)
    ins = []
    for r in range(p):
        n, _ = buffer_counts(coll, bc, r, p, root)
        n = n or buffer_counts(coll, bc, root, p, root)[0]  # reference wants every rank's
        ins.append(dt.random_array(rng, n, dtype, op))
    return ins


def run_case(comm, coll, algo, dtype, op, root, bc, seed, inplace=False):
    """Run one call through the public API; returns (my output or None, my input)."""
    p, r = comm.world_size, comm.rank
    ins = inputs_for(coll, p, bc, dtype, op, root, seed)
    mine = ins[r].copy()
    kw = {"algorithm": algo, "dtype": dtype.name}
    name = coll.name
    if name == "all_reduce":
        comm.all_reduce(mine, op, **kw)
        return mine, ins
    if name == "reduce_scatter":
        if inplace:
            comm.reduce_scatter(mine[r * bc:(r + 1) * bc], mine, op, **kw)
            return mine[r * bc:(r + 1) * bc], ins
        out = np.zeros(bc, dtype.storage)
        comm.reduce_scatter(out, mine, op, **kw)
        return out, ins
    if name == "all_gather":
        out = np.zeros(p * bc, dtype.storage)
        if inplace:
            out[r * bc:(r + 1) * bc] = mine
            comm.all_gather(out, out[r * bc:(r + 1) * bc], **kw)
        else:
            comm.all_gather(out, mine, **kw)
        return out, ins
    if name == "broadcast":
        buf = mine if r == root else np.zeros(bc, dtype.storage)
        comm.broadcast(buf, root, **kw)
        return buf, ins
    if name == "reduce":
        before = mine.copy()
        comm.reduce(mine, root, op, **kw)
        if r != root and not np.array_equal(mine.view(np.uint8), before.view(np.uint8)):
            raise AssertionError(f"rank {r}: reduce changed a non-root buffer")
        return (mine if r == root else None), ins
    if name == "all_to_all":
        out = np.zeros(p * bc, dtype.storage)
        comm.all_to_all(out, mine, **kw)
        return out, ins
    if name == "gather":
        out = np.zeros(p * bc, dtype.storage) if r == root else None
        comm.gather(out, mine, root, **kw)
        return out, ins
    if name == "scatter":
        out = np.zeros(bc, dtype.storage)
        comm.scatter(out, mine if r == root else None, root, **kw)
        return out, ins
    if name == "sendrecv":
        out = np.zeros(bc, dtype.storage)
        sched = build(name, algo, p).materialize()
        comm.transport.execute(sched, mine, out, op, dtype, comm.timeout)
        return out, ins
    if name == "barrier":
        comm.transport.execute(build(name, algo, p).materialize(), None, None, op, dtype,
                               comm.timeout)
        return None, ins
    raise AssertionError(name)


def check(coll, out, ins, rank, op, dtype, root, what):
    want = reference(coll, ins, op, dtype, root)
    outs = list(want)
    outs[rank] = out
    check_outputs(coll, outs, ins, op, dtype, root, what=what)


def cases(p):
    """(collective, algorithm, dtype, op, root, block count, in-place) for p ranks.

    RUNTIME_CASES=light keeps every algorithm but only float32 and int32 (for many ranks)."""
    floats = ("float32", "float64", "float16", "bfloat16")
    light = os.environ.get("RUNTIME_CASES") == "light"
    for cname, algo in sorted(REGISTRY):
        coll = get_collective(cname)
        try:
            build(cname, algo, p, root=p - 1 if coll.rooted else 0)
        except GpucommError:
            continue  # this algorithm does not serve p ranks
        roots = sorted({0, p - 1}) if coll.rooted else [0]
        for root in roots:
            for bc in (1, 7, 3000):
                yield cname, algo, "float32", "sum", root, bc, False
            yield cname, algo, "int32", "sum", root, 5, False
            if coll.reduces and not light:
                for d in dt.DTYPES:
                    for op in dt.REDUCE_OPS:
                        if op == "avg" and d not in floats:
                            continue
                        if d in ("uint32", "uint64", *dt.FP8) and op not in ("sum", "min"):
                            continue  # unsigned: wrap and order; fp8: round and saturate
                        if (d, op) != ("float32", "sum"):
                            yield cname, algo, d, op, root, 6, False
        if cname in ("all_gather", "reduce_scatter"):
            yield cname, algo, "float32", "sum", 0, 33, True


def mode_cases(comm, res):
    p, r = comm.world_size, comm.rank
    digests = {}
    for i, (cname, algo, dname, op, root, bc, inplace) in enumerate(cases(p)):
        coll, dtype = get_collective(cname), dt.get_dtype(dname)
        what = f"{cname}/{algo}/{dname}/{op}/root{root}/bc{bc}{'/inplace' if inplace else ''}: "
        res["cases"] += 1
        try:
            out, ins = run_case(comm, coll, algo, dtype, op, root, bc, seed=1000 * p + i,
                                inplace=inplace)
            if coll.name != "barrier":
                check(coll, out, ins, r, op, dtype, root, what)
            if cname == "all_reduce" and out is not None:
                digests[what] = zlib.crc32(out.tobytes())
        except AssertionError as e:
            res["failures"].append(str(e))
    res["digests"] = digests
    res["cma"] = comm.transport.cma


def mode_api(comm, res):
    """Async handles, torch tensors, send/recv, the buffer protocol."""
    p, r = comm.world_size, comm.rank
    x = np.full(1000, r + 1, np.float32)
    work = comm.all_reduce(x, async_op=True)
    y = np.full(10, r, np.int64)
    work2 = comm.all_reduce(y, op="max", async_op=True)
    work.wait(timeout=60)
    work2.wait(timeout=60)
    _expect(res, "async all_reduce", x, np.full(1000, p * (p + 1) / 2, np.float32))
    _expect(res, "async all_reduce max", y, np.full(10, p - 1, np.int64))
    comm.barrier()
    # send/recv around a ring, twice with different sizes (the segment grows)
    for n in (5, 100_000):
        if p > 1:
            msg = np.arange(n, dtype=np.float64) + r
            got = np.empty(n, np.float64)
            if r % 2 == 0:
                comm.send(msg, (r + 1) % p)
                comm.recv(got, (r - 1) % p)
            else:
                comm.recv(got, (r - 1) % p)
                comm.send(msg, (r + 1) % p)
            _expect(res, f"send/recv {n}", got, np.arange(n, dtype=np.float64) + (r - 1) % p)
    _straight_calls(comm, res)
    ba = bytearray(np.full(4, r, np.int32).tobytes())
    comm.all_reduce(ba, dtype="int32")
    _expect(res, "bytearray all_reduce", np.frombuffer(bytes(ba), np.int32),
            np.full(4, p * (p - 1) // 2, np.int32))
    try:
        import torch
    except ImportError:
        res["torch"] = "absent"
        return
    t = torch.full((3, 4), float(r + 1))
    comm.all_reduce(t)
    _expect(res, "torch all_reduce", t.numpy(), np.full((3, 4), p * (p + 1) / 2, np.float32))
    tb = torch.full((8,), 1.5, dtype=torch.bfloat16)
    comm.all_reduce(tb)
    _expect(res, "torch bfloat16 all_reduce", tb.float().numpy(), np.full(8, 1.5 * p, np.float32))
    tg = torch.zeros(p * 2, dtype=torch.int64)
    comm.all_gather(tg, torch.tensor([r, -r]))
    _expect(res, "torch all_gather", tg.numpy(), np.array([v for q in range(p) for v in (q, -q)]))
    res["torch"] = "tested"


def _straight_calls(comm, res):
    """Every collective through the API on flat numpy arrays, `auto`, runs straight on the
    transport (`Communicator._straight`), none through `_call`; a bad root or a missing
    buffer is still refused with the general path's message."""
    p, r, n, last = comm.world_size, comm.rank, 3, comm.world_size - 1
    general, real = [], comm._call
    comm._call = lambda *a: general.append(a[0]) or real(*a)
    x = np.arange(n * p, dtype=np.float32) + 100 * r
    out = np.zeros(n * p, np.float32)
    comm.all_gather(out, x[:n])
    _expect(res, "straight all_gather", out, np.concatenate(
        [np.arange(n, dtype=np.float32) + 100 * q for q in range(p)]))
    o = np.zeros(n, np.float32)
    comm.reduce_scatter(o, x, "max")
    _expect(res, "straight reduce_scatter", o, np.arange(r * n, r * n + n) + 100 * last)
    b = x.copy()
    comm.broadcast(b, last)
    _expect(res, "straight broadcast", b, np.arange(n * p) + 100 * last)
    b = x.copy()
    comm.reduce(b, last, "min")
    _expect(res, "straight reduce", b, np.arange(n * p) if r == last else x)
    comm.all_to_all(out, x)
    _expect(res, "straight all_to_all", out, np.concatenate(
        [np.arange(r * n, r * n + n) + 100 * q for q in range(p)]))
    comm.gather(out, x[:n], last)
    if r == last:
        _expect(res, "straight gather", out, np.concatenate(
            [np.arange(n, dtype=np.float32) + 100 * q for q in range(p)]))
    comm.scatter(o, x, 0)
    _expect(res, "straight scatter", o, np.arange(r * n, r * n + n))
    comm.broadcast(b, 1)  # root 1's schedule cached: root True must not find it
    for bad, says in ((lambda: comm.broadcast(b, p), "root"),
                      (lambda: comm.broadcast(b, True), "root"),
                      (lambda: comm.all_gather(out, None), "inp is None")):
        try:
            bad()
            res["failures"].append(f"no error for a call that must fail ({says})")
        except ConfigError as e:
            if says not in str(e):
                res["failures"].append(f"{says}: {e}")
    comm._call = real
    if general:
        res["failures"].append(f"through _call: {general}")


def _expect(res, what, got, want):
    res["cases"] += 1
    if not np.array_equal(np.asarray(got), want):
        res["failures"].append(f"{what}: got {np.asarray(got)[:6]}, want {want[:6]}")


def mode_kill(comm, res):
    """The last rank dies inside a collective; the others must name it, within the timeout."""
    p, r = comm.world_size, comm.rank
    x = np.ones(1 << 16, np.float32)
    comm.all_reduce(x)
    if r == p - 1:
        os.kill(os.getpid(), 9)  # dies after entering nothing: the others are inside the call
    t0 = time.monotonic()
    try:
        for _ in range(3):
            comm.all_reduce(x, algorithm="ring")
        res["failures"].append("all_reduce with a dead rank returned")
    except GpucommError as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["elapsed"] = time.monotonic() - t0


def mode_timeout(comm, res):
    """Rank 1 never calls: rank 0 must time out naming it."""
    if comm.rank == 1:
        time.sleep(2.5)
        return
    t0 = time.monotonic()
    try:
        comm.all_reduce(np.ones(4, np.float32))
        res["failures"].append("all_reduce without rank 1 returned")
    except GpucommError as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["elapsed"] = time.monotonic() - t0


def mode_mismatch(comm, res):
    kinds = os.environ.get("MISMATCH", "size")
    x = np.ones(64 if comm.rank == 0 or kinds != "size" else 128, np.float32)
    if kinds == "plan":  # large enough for a plan (smaller ones: the LL path, no plan)
        x = np.ones(16384, np.float32)
    try:
        if kinds == "size":
            comm.all_reduce(x)
        elif kinds == "op":
            comm.all_reduce(x, op="sum" if comm.rank == 0 else "max")
        elif kinds == "collective":
            if comm.rank == 0:
                comm.all_reduce(x)
            else:
                comm.broadcast(x, root=0)
        elif kinds == "root":
            comm.broadcast(x, root=comm.rank)
        elif kinds == "dtype":
            comm.all_reduce(x if comm.rank == 0 else x.astype(np.float64))
        elif kinds == "plan":  # same call, but this rank's settings compile another plan
            if comm.rank == 1:  # a staged plan in small slices (the others read directly)
                tr = comm.transport
                tr.options = tr.options.replace(slice_bytes=24, direct_min_bytes=1 << 30)
            comm.all_reduce(x)
        res["failures"].append(f"mismatched ({kinds}) call returned")
    except GpucommError as e:
        res["error"] = f"{type(e).__name__}: {e}"


def main():
    mode, outdir = sys.argv[1], sys.argv[2]
    res = {"cases": 0, "failures": []}
    t0 = time.monotonic()
    rank = int(os.environ.get("RANK", "0"))
    try:
        comm = gpucomm.runtime.init(timeout=float(os.environ.get("GPUCOMM_TIMEOUT", "60")))
        globals()[f"mode_{mode}"](comm, res)
    except Exception:
        res["failures"].append(traceback.format_exc())
        traceback.print_exc()
    res["seconds"] = time.monotonic() - t0
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
