"""One rank of the transport correctness suite (no pytest tests here; test_transports.py runs it).

    torchrun --nproc-per-node 4 tests/test_transports_worker.py torch [kill 2 2.0]
    mpiexec -n 4 python3 tests/test_transports_worker.py mpi [kill 2 2.0]

Every registered algorithm of every collective, on the whole world and on a sub-group of
P-1 ranks (whose transport cuts messages into 24-byte slices, so slicing is exercised, and
for torch posts each step with batch_isend_irecv, NCCL's code path), over every dtype (ops
rotating) and every op (float32): each rank compares its output with the reference executor's
bit for bit and with `check_outputs`. Prints one
`SUITE rank R: N cases, M failures` line; exits 1 on a failure. With `kill RANK TIMEOUT` after
it: then RANK leaves silently, the others run all-reduces and print how they failed
(`FAILED rank R after S s: ...`). `backend` mode: torch.distributed on backend "gpucomm".
`comm torch|mpi` mode: the Communicator of `gpucomm.runtime.init(transport=...)`.
"""
import math
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import make_inputs  # noqa: E402

from gpucomm import dtypes as dt  # noqa: E402
from gpucomm.algorithms import algorithms, build  # noqa: E402
from gpucomm.collectives import check_outputs, get_collective  # noqa: E402
from gpucomm.errors import ScheduleError, TransportError  # noqa: E402
from gpucomm.execute import execute  # noqa: E402


def say(text: str) -> None:
    """One line in one write: ranks share the launcher's stdout, and print() writes the text
    and its newline separately, so lines of two ranks could run together."""
    os.write(1, (text + "\n").encode())


def world(engine: str, timeout: float):
    """(transports for the whole world and for ranks 0..P-2, or None where not a member)."""
    if engine == "torch":
        import datetime
        import torch.distributed as dist
        from gpucomm.runtime.torch_transport import TorchTransport
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
        p = dist.get_world_size()
        sub = dist.new_group(list(range(p - 1))) if p > 2 else None
        whole = TorchTransport(timeout=timeout)
        member = sub is not None and dist.get_rank() < p - 1
        part = TorchTransport(sub, timeout=timeout, slice_bytes=24, batched=True) \
            if member else None
        return whole, part
    from mpi4py import MPI
    from gpucomm.runtime.mpi_transport import MPITransport
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    whole = MPITransport(comm, timeout=timeout)
    sub = comm.Split(0 if comm.rank < p - 1 else MPI.UNDEFINED, comm.rank) if p > 2 else None
    part = MPITransport(sub, timeout=timeout, slice_bytes=24) \
        if sub not in (None, MPI.COMM_NULL) else None
    return whole, part


def cases(engine: str = "mpi"):
    """(collective, algorithm, dtype, op, block_count) for the suite (the torch engine: the
    dtypes torch reduces; it refuses uint32/uint64 in one line)."""
    names = list(dt.DTYPES)
    if engine == "torch":
        from gpucomm.runtime.torch_transport import _NAMES
        names = [d for d in names if d in _NAMES]
    for i, a in enumerate(algorithms()):
        coll = get_collective(a.collective)
        if not coll.reduces:  # data movement: one type per element size
            for j, d in enumerate(("int8", "bfloat16", "float32", "float64")):
                yield a.collective, a.name, d, "sum", (0, 1, 13, 40)[j % 4]
            continue
        for j, d in enumerate(names):
            ops = [o for o in dt.REDUCE_OPS if o != "avg" or dt.get_dtype(d).is_float]
            yield a.collective, a.name, d, ops[(i + j) % len(ops)], (1, 13, 40, 0)[j % 4]
        for op in dt.REDUCE_OPS:
            yield a.collective, a.name, "float32", op, 29


def run_case(tr, coll, name, dtype, op, bc, seed, as_torch):
    p, me = tr.nranks, tr.rank
    try:
        sched = build(coll, name, p, root=seed % p)
    except ScheduleError:
        return None  # this algorithm does not serve p ranks
    ins = make_inputs(sched.collective, p, bc, dtype, op, sched.root, seed=seed)
    want = execute(sched, ins, op, dtype)
    rout = sched.collective.outputs(me, p, sched.root)
    d = dt.get_dtype(dtype)
    out = None if rout is None else np.full(rout[1] * bc, 7, dtype=d.storage)
    inp = ins[me]
    if as_torch:
        from gpucomm.runtime.torch_transport import to_numpy, to_torch
        tin = None if inp is None else to_torch(inp, d, "cpu")
        tout = None if out is None else to_torch(out, d, "cpu")
        tr.execute(sched, tin, tout, op, dtype)
        out = None if tout is None else to_numpy(tout, d)
    else:
        tr.execute(sched, inp, out, op, dtype)
    what = f"{name} {coll} P={p} {dtype} {op} bc={bc}: "
    if want[me] is not None and not np.array_equal(out.view(np.uint8), want[me].view(np.uint8)):
        raise AssertionError(what + f"rank {me} differs from the reference executor")
    outs = list(want)
    outs[me] = out
    check_outputs(sched.collective, outs, ins, op, dtype, sched.root, what=what)
    return True


def suite(whole, part, engine: str) -> int:
    me = whole.rank
    ran = failed = 0
    for k, (coll, name, dtype, op, bc) in enumerate(cases(engine)):
        for tr in (whole, part):
            if tr is None or (tr is part and k % 2):  # the sub-group takes every other case
                continue
            try:
                ok = run_case(tr, coll, name, dtype, op, bc, seed=k, as_torch=engine == "torch"
                              and k % 2 == 0)
                ran += ok is not None
            except Exception as e:  # report every failing case, keep going
                failed += 1
                say(f"FAIL rank {me}: {coll} {name} {dtype} {op} bc={bc} P={tr.nranks}: "
                    f"{type(e).__name__}: {e}")
                if isinstance(e, TransportError):
                    traceback.print_exc()
                    break
    say(f"SUITE rank {me}: {ran} cases, {failed} failures")
    return 1 if failed else 0


def kill(whole, victim: int, timeout: float) -> None:
    """`victim` leaves; the others run all-reduces until they fail. One-shot: every rank
    talks to the victim directly, so every survivor must name it."""
    me, p = whole.rank, whole.nranks
    sched = build("all_reduce", "one_shot", p)
    x = np.ones(1 << 16, np.float32)
    whole.execute(sched, x, x.copy())  # everyone is up and connected
    whole.barrier()
    if me == victim:
        os._exit(0)  # leave silently: no error, no goodbye (exit 0 so launchers don't interfere)
    t0 = time.monotonic()
    try:
        for _ in range(1000):
            whole.execute(sched, x, x.copy(), timeout=timeout)
        say(f"NOFAIL rank {me}")
    except TransportError as e:
        say(f"FAILED rank {me} after {time.monotonic() - t0:.2f} s: {type(e).__name__}: {e}")
    sys.stdout.flush()
    os._exit(0)  # skip engine teardown, which could wait on the dead peer


def backend() -> int:
    """torch.distributed's API on backend "gpucomm": every call DDP and FSDP make."""
    import torch
    import torch.distributed as dist

    import gpucomm.errors
    import gpucomm.torch
    dist.init_process_group("gpucomm")
    me, p = dist.get_rank(), dist.get_world_size()
    failures = []

    def check(name, got, want):
        if not torch.equal(got, want):
            failures.append(f"{name}: got {got.tolist()[:6]}, want {want.tolist()[:6]}")

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        x = torch.arange(6, dtype=dtype) + me
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        check(f"all_reduce {dtype}", x, sum(torch.arange(6, dtype=dtype) + r for r in range(p)))
        check(f"all_reduce future {dtype}", w.get_future().wait()[0], x)
    # one tensor numpy views (the backend's unstaged path): 2-D, float64 product, and a
    # small async call queued behind a large one, their futures asked for after both calls
    m = torch.full((3, 5), float(me + 1), dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.PRODUCT)
    check("all_reduce 2-D product", m, torch.full((3, 5), float(math.factorial(p)),
                                                   dtype=torch.float64))
    big, small = torch.full((300_000,), float(me)), torch.arange(5, dtype=torch.int32) * me
    works = [dist.all_reduce(big, async_op=True), dist.all_reduce(small, async_op=True)]
    futs = torch.futures.collect_all([w.get_future() for w in works]).wait()
    check("all_reduce queued large", futs[0].value()[0], torch.full((300_000,),
                                                                    float(sum(range(p)))))
    check("all_reduce queued small", futs[1].value()[0],
          torch.arange(5, dtype=torch.int32) * sum(range(p)))
    x = torch.full((4,), float(me + 1))
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    check("all_reduce max", x, torch.full((4,), float(p)))
    # DDP's comm hook on its own: buckets averaged in place, a small one (done at once), a
    # large one (finished on the worker: its future completes later), bfloat16; a gloo
    # group is refused by name
    class Bucket:  # what the hook uses of DDP's GradBucket
        def __init__(self, t):
            self.t = t

        def buffer(self):
            return self.t
    for n, dtype in ((7, torch.float32), (300_000, torch.float32), (9, torch.bfloat16)):
        b = torch.arange(n, dtype=dtype) * (me + 1)
        got = gpucomm.torch.allreduce_hook(None, Bucket(b)).wait()
        want = torch.arange(n, dtype=dtype) * sum(range(1, p + 1)) / p
        check(f"allreduce_hook {n} x {dtype}", got, want.to(dtype))
        check(f"allreduce_hook {n} x {dtype} in place", b, want.to(dtype))
    try:
        gpucomm.torch.allreduce_hook(dist.new_group(backend="gloo"), Bucket(torch.ones(2)))
        failures.append("allreduce_hook on a gloo group: no error")
    except gpucomm.errors.ConfigError as e:
        if "gpucomm" not in str(e) or "ProcessGroup" not in str(e):
            failures.append(f"allreduce_hook on a gloo group: {e}")
    x = torch.full((4,), float(me + 1))
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    check("all_reduce avg", x, torch.full((4,), (p + 1) / 2))
    out = torch.empty(3 * p)
    dist.all_gather_into_tensor(out, torch.full((3,), float(me)))
    check("all_gather_into_tensor", out, torch.arange(p).float().repeat_interleave(3))
    outs = [torch.empty(2) for _ in range(p)]
    dist.all_gather(outs, torch.full((2,), float(me)))
    check("all_gather", torch.stack(outs), torch.arange(p).float()[:, None].expand(p, 2))
    rs = torch.empty(2)
    dist.reduce_scatter_tensor(rs, torch.arange(2 * p).float())
    check("reduce_scatter_tensor", rs, torch.arange(2 * p).float()[2 * me:2 * me + 2] * p)
    rs = torch.empty(2)
    dist.reduce_scatter(rs, [torch.full((2,), float(q)) for q in range(p)])
    check("reduce_scatter", rs, torch.full((2,), float(me * p)))
    b = torch.full((5,), float(me))
    dist.broadcast(b, src=p - 1)
    check("broadcast", b, torch.full((5,), float(p - 1)))
    a2a = torch.empty(p)
    dist.all_to_all_single(a2a, torch.arange(p).float() + 10 * me)
    check("all_to_all_single", a2a, torch.arange(p).float() * 10 + me)
    outs = [torch.empty(1) for _ in range(p)]
    dist.all_to_all(outs, [torch.tensor([float(10 * me + q)]) for q in range(p)])
    check("all_to_all", torch.cat(outs), torch.arange(p).float() * 10 + me)
    r = torch.full((2,), float(me + 1))
    dist.reduce(r, dst=0)
    if me == 0:
        check("reduce", r, torch.full((2,), float(p * (p + 1) / 2)))
    g = [torch.empty(2) for _ in range(p)] if me == 0 else None
    dist.gather(torch.full((2,), float(me)), g, dst=0)
    if me == 0:
        check("gather", torch.stack(g), torch.arange(p).float()[:, None].expand(p, 2))
    sc = torch.empty(2)
    dist.scatter(sc, [torch.full((2,), float(q)) for q in range(p)] if me == 0 else None, src=0)
    check("scatter", sc, torch.full((2,), float(me)))
    dist.barrier()
    if p > 1:
        t = torch.full((3,), float(me))
        if me == 0:
            dist.send(torch.tensor([7.0, 8.0, 9.0]), 1)
        elif me == 1:
            dist.recv(t, 0)
            check("send/recv", t, torch.tensor([7.0, 8.0, 9.0]))
    dist.barrier()
    for f in failures:
        say(f"FAIL rank {me}: {f}")
    say(f"BACKEND rank {me}: {len(failures)} failures")
    # then DDP, 50 steps, against gloo (examples/ddp_gpucomm.py), in the same processes
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "examples"))
    import ddp_gpucomm
    ok = ddp_gpucomm.compare(50)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures or not ok else 0


def comm(engine: str) -> int:
    """gpucomm.runtime.init(transport=engine): the Communicator API over torch / MPI."""
    from gpucomm.runtime import init
    c = init(timeout=20.0, transport=engine)
    me, p = c.rank, c.world_size
    failures = []

    def check(name, got, want):
        if not np.array_equal(np.asarray(got), np.asarray(want)):
            failures.append(f"{name}: got {np.asarray(got).tolist()[:6]}, want "
                            f"{np.asarray(want).tolist()[:6]}")

    for algorithm in ("auto", "ring"):
        x = np.arange(1000, dtype=np.float32) + me
        c.all_reduce(x, algorithm=algorithm)
        check(f"all_reduce {algorithm}", x, sum(np.arange(1000, dtype=np.float32) + r
                                                for r in range(p)))
    x = np.full(7, me + 1, np.int64)
    c.all_reduce(x, op="max")
    check("all_reduce max", x, np.full(7, p))
    out = np.empty(3 * p, np.float64)
    c.all_gather(out, np.full(3, float(me)))
    check("all_gather", out, np.repeat(np.arange(p, dtype=np.float64), 3))
    rs = np.empty(2, np.float32)
    c.reduce_scatter(rs, np.arange(2 * p, dtype=np.float32))
    check("reduce_scatter", rs, np.arange(2 * p, dtype=np.float32)[2 * me:2 * me + 2] * p)
    b = np.full(5, float(me), np.float32)
    w = c.broadcast(b, root=p - 1, async_op=True)
    w.wait()
    check("broadcast async", b, np.full(5, float(p - 1), np.float32))
    c.barrier()
    if me in (0, 1):
        t = np.zeros(3, np.int32)
        if me == 0:
            c.send(np.array([7, 8, 9], np.int32), 1)
        else:
            c.recv(t, 0)
            check("send/recv", t, [7, 8, 9])
    for f in failures:
        say(f"FAIL rank {me}: {f}")
    say(f"COMM {engine} rank {me} of {p} ({type(c.transport).__name__}, local rank "
        f"{c.local_rank}): {len(failures)} failures")
    c.close()
    return 1 if failures else 0


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "backend":
        sys.exit(backend())
    if mode == "comm":
        sys.exit(comm(sys.argv[2]))
    whole, part = world(mode, 30.0)
    rc = suite(whole, part, mode)
    if len(sys.argv) > 2 and sys.argv[2] == "kill":
        kill(whole, int(sys.argv[3]), float(sys.argv[4]))  # exits
    sys.exit(rc)
