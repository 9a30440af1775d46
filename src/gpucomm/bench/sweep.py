"""nccl-tests' sweep, run inside every rank: for each size, time the out-of-place and the in-place
call (`warmup` untimed, then `iters` × `agg_iters` timed back to back, averaged over ranks as
`average` says, as nccl-tests -a), then
check one call against the reference (`count_wrong`) and count wrong elements.

Run by `gpucomm bench` as `python -m gpucomm.bench.sweep CONFIG.json` under the launcher (shm,
gloo, torch) or mpiexec (mpi); rank 0 appends one JSON row per size to the config's `out` file.
"""
from __future__ import annotations

import json
import sys
import time
import traceback

import numpy as np

from .. import dtypes as dt
from ..collectives import buffer_counts, get_collective, layout, reduce_all, tolerance
from .backends import make_backend

CHECK_PIECE = 1 << 20  # elements of expected output built at a time by `count_wrong`


def pattern(q: int, n: int, dtype: dt.DType, op: str, salt: int = 0) -> np.ndarray:
    """Rank q's data: small integers, so sums and products are exact in every dtype.

    Filled piece by piece into one fresh array: large temporaries, once freed, raise glibc's
    mmap threshold and put the benchmark's buffers on the heap instead of fresh mappings,
    which measurably changes memory-bound timings (the same for every engine, but noisy).
    """
    return pattern_range(q, 0, n, dtype, op, salt)


def pattern_range(q: int, lo: int, hi: int, dtype: dt.DType, op: str,
                  salt: int = 0) -> np.ndarray:
    """Elements lo..hi of `pattern(q, ...)` (each element depends on its index only)."""
    out = np.empty(hi - lo, dtype.storage)
    piece = 1 << 15
    for a in range(lo, hi, piece):
        i = np.arange(a, min(hi, a + piece), dtype=np.int64)
        if op == "prod":
            vals = np.where((i + q + salt) % 5 == 0, 2, 1)
        elif dtype.name in ("uint8",):
            vals = (i * 7 + q * 13 + salt) % 9
        else:
            vals = (i * 7 + q * 13 + salt) % 9 - 4
        if dtype.name == "bfloat16" or dtype.name in dt.FP8:
            out[a - lo:a - lo + len(i)] = dt.to_storage(vals.astype(np.float32), dtype)
        else:
            out[a - lo:a - lo + len(i)] = vals
    return out


def buffers(coll, rank, p, bc, dtype, op, root, inplace, salt=0):
    """(input, output, the output view to check) as nccl-tests lays them out."""
    counts = buffer_counts(coll, bc, rank, p, root)
    # a rank's buffers by what the collective gives it; 0 elements (nccl-tests' size under
    # 16 B a rank) is an empty buffer, not a missing one
    n_in = counts[0] if coll.inputs(rank, p, root) is not None else None
    n_out = counts[1] if coll.outputs(rank, p, root) is not None else None
    name = coll.name
    inp = pattern(rank, n_in, dtype, op, salt) if n_in is not None else None
    if not inplace:
        out = np.zeros(n_out, dtype.storage) if n_out is not None else None
        return inp, out, out
    if name in ("all_reduce", "reduce", "broadcast"):
        buf = inp if inp is not None else np.zeros(n_out or 0, dtype.storage)
        return inp, (buf if n_out is not None else None), (buf if n_out is not None else None)
    if name == "reduce_scatter" and inp is not None:
        return inp, inp[rank * bc:(rank + 1) * bc], inp[rank * bc:(rank + 1) * bc]
    if name in ("all_gather", "gather") and n_out is not None:
        out = np.zeros(n_out, dtype.storage)
        out[rank * bc:(rank + 1) * bc] = inp
        return out[rank * bc:(rank + 1) * bc], out, out
    if name == "scatter" and inp is not None:
        return inp, inp[rank * bc:(rank + 1) * bc], inp[rank * bc:(rank + 1) * bc]
    if name == "all_to_all":
        return inp, inp, inp
    out = np.zeros(n_out, dtype.storage) if n_out is not None else None
    return inp, out, out


def count_wrong(coll, got, rank, p, bc, dtype, op, root, salt=0) -> int:
    """Elements of this rank's output that differ from the reference.

    The expected output is built piece by piece from the collective's postcondition: each
    output block names the input blocks it must hold (one, or all ranks' for a reduction),
    and those are regenerated from `pattern` and reduced as `reference` does. Memory stays
    at one piece per contribution and only this rank's output is computed, at any size.
    """
    rng = coll.outputs(rank, p, root)
    if got is None or rng is None:
        return 0
    first, nblocks = rng
    premul = op == dt.PREMULSUM
    op = "sum" if premul else op
    tol = tolerance(op, dtype, p) if coll.reduces else 0.0
    wrong = 0
    for k in range(nblocks):
        value = coll.post(rank, first + k, p, root)
        if value is None:
            continue
        for lo in range(0, bc, CHECK_PIECE):
            hi = min(bc, lo + CHECK_PIECE)
            parts = []
            for q, block in sorted(value):
                off = (block - coll.inputs(q, p, root)[0]) * bc
                part = pattern_range(q, off + lo, off + hi, dtype, op, salt)
                if premul and coll.reduces:
                    dt.premultiply(part, part, q, dtype)
                parts.append(part)
            want = reduce_all(parts, op, dtype) if coll.reduces else parts[0]
            wrong += _mismatches(got[k * bc + lo:k * bc + hi], want, tol, p, dtype)
    return wrong


def _prepare(backend, coll, inp, outb, op, dtype, root, cfg, size, inplace, rank):
    """The call to time: the collective, or for nccl-tests' mulsum (NCCL's PreMulSum) the
    scaling of this rank's input by its scalar and then a sum (NCCL fuses the two)."""
    if op != dt.PREMULSUM or not coll.reduces:
        return backend.prepare(coll.name, inp, outb, op, dtype, root, cfg["algorithm"], size,
                               inplace)
    src = inp if inplace else np.empty_like(inp)  # in place: scaled where it lies
    run = backend.prepare(coll.name, src, outb, "sum", dtype, root, cfg["algorithm"], size,
                          inplace)

    def premulsum():
        dt.premultiply(inp, src, rank, dtype)
        run()
    return premulsum


def _mismatches(got, want, tol, p, dtype) -> int:
    if tol == 0.0:
        gb = got.view(np.uint8).reshape(got.size, -1)
        return int((gb != want.view(np.uint8).reshape(want.size, -1)).any(axis=1).sum())
    g = dt.to_compute(got, dtype).astype(np.float64)
    w = dt.to_compute(want, dtype).astype(np.float64)
    return int(np.count_nonzero(np.abs(g - w) > tol * np.maximum(np.abs(w), 4.0 * p) + 1e-30))


def _engine_view(backend, coll, inplace, rank, root, inp, view, bc):
    """Where an engine whose API differs from nccl-tests' leaves this rank's result (our
    schedules leave it where nccl-tests does, on whichever engine they run)."""
    if backend.ours:
        return view
    if backend.name == "mpi" and inplace and coll == "reduce_scatter":
        return inp[:bc]  # MPI's in-place reduce-scatter leaves it in block 0
    if coll == "broadcast" and not inplace and rank == root:
        return inp  # MPI and gloo broadcast in place: the root sends from its input
    return view


def combine(backend, t: float, average: int) -> float:
    """The time nccl-tests reports for all ranks (`-a`): 0 rank 0's, 1 the mean, 2 the
    fastest, 3 the slowest rank's."""
    if average == 3:
        return backend.allreduce_max(t)
    if average == 2:
        return -backend.allreduce_max(-t)
    rank, p = backend.rank, backend.size
    if average == 0:
        return backend.allreduce_max(t if rank == 0 else float("-inf"))
    return sum(backend.allreduce_max(t if rank == q else float("-inf")) for q in range(p)) / p


def register_fixed(sched) -> str:
    """Register one given schedule (an imported MSCCL file) as an algorithm of its collective,
    so that every engine runs it by name; returns the name."""
    from ..algorithms import REGISTRY, algorithm
    from ..errors import ScheduleError
    name = f"file:{sched.algorithm}"
    if (sched.collective.name, name) in REGISTRY:
        return name
    fixed = sched.materialize()

    def builder(nranks, root=0):
        if (nranks, root) != (fixed.nranks, fixed.root):
            raise ScheduleError(f"{name} is a schedule for {fixed.nranks} ranks, root "
                                f"{fixed.root}; asked for {nranks} ranks, root {root}")
        return fixed
    builder.__doc__ = f"the schedule of {sched.algorithm} (imported)"
    algorithm(sched.collective.name, name)(builder)
    return name


def run_rank(cfg: dict) -> None:
    if cfg.get("schedule_file"):
        from ..schedule import Schedule
        with open(cfg["schedule_file"]) as f:
            register_fixed(Schedule.from_json(f.read()))
    backend = make_backend(cfg["backend"], cfg.get("timeout"), cfg["algorithm"])
    rank, p = backend.rank, backend.size
    coll = get_collective(cfg["collective"])
    dtype = dt.get_dtype(cfg["dtype"])
    op, root = cfg["op"], cfg["root"]
    out = open(cfg["out"], "a") if rank == 0 else None
    try:
        for size in cfg["sizes"]:
            lay = layout(coll, size, dtype, p)
            row = {"size": lay.size, "count": lay.count, "type": dtype.name,
                   "redop": op if coll.reduces else "none", "root": root if coll.rooted else -1,
                   "algorithm": backend.algorithm(coll.name, lay.size, cfg["algorithm"], root),
                   "nranks": p, "backend": cfg["backend"]}
            for half in ("oop", "ip"):
                inplace = half == "ip"
                inp, outb, view = buffers(coll, rank, p, lay.block_count, dtype, op, root,
                                          inplace)
                view = _engine_view(backend, coll.name, inplace, rank, root, inp, view,
                                    lay.block_count)
                run = _prepare(backend, coll, inp, outb, op, dtype, root, cfg, lay.size,
                                   inplace, rank)
                for _ in range(cfg["warmup"]):
                    run()
                backend.barrier()
                agg, blocking = cfg.get("agg_iters", 1), cfg.get("blocking", 0)
                t0 = time.perf_counter()
                for _ in range(cfg["iters"]):
                    for _ in range(agg):
                        run()
                    if blocking >= 3:
                        backend.barrier()
                t = (time.perf_counter() - t0) / max(cfg["iters"] * agg, 1)
                t = combine(backend, t, cfg.get("average", 3))
                wrong = None  # not checked
                if cfg["check"]:
                    inp, outb, view = buffers(coll, rank, p, lay.block_count, dtype, op, root,
                                              inplace, salt=1)
                    view = _engine_view(backend, coll.name, inplace, rank, root, inp,
                                        view, lay.block_count)
                    _prepare(backend, coll, inp, outb, op, dtype, root, cfg, lay.size,
                             inplace, rank)()
                    mine = count_wrong(coll, view, rank, p, lay.block_count, dtype, op, root,
                                       salt=1)
                    wrong = int(backend.allreduce_max(float(mine)))
                algbw, busbw = lay.busbw(t)
                key = "" if half == "oop" else "ip_"
                row.update({f"{key}time_us": t * 1e6, f"{key}algbw": algbw,
                            f"{key}busbw": busbw, f"{key}wrong": wrong})
            if out is not None:
                out.write(json.dumps(row) + "\n")
                out.flush()
    finally:
        if out is not None:
            out.close()
        backend.close()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        cfg = json.load(f)
    try:
        run_rank(cfg)
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
