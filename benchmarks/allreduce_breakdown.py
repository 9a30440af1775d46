"""Where the time of a small all-reduce goes on gpucomm's shm runtime, 2 ranks, against MPICH.

    PYTHONPATH=src python3 benchmarks/allreduce_breakdown.py [--size 8] [--rounds 3] [--iters 5000]

Every total is timed as nccl-tests times it: a barrier, then a loop of back-to-back calls,
divided by the count. MPICH (mpi4py's Allreduce, `gpucomm bench --backend mpi`) runs in the
same rounds, interleaved with ours; each figure is the best of the rounds, with the load
average beside it (the machine is shared). The parts are measured on their own, in the rank
processes, on the very objects a call uses:
- Python dispatch: `comm.all_reduce(x)` minus `transport.execute(...)` with the same schedule;
- argument checks: the communicator's (`arrays.as_flat`, root, op) and the transport's (block count,
  aliasing) checks, each called alone;
- plan lookup: `comm.schedule(...)` and the transport's compiled-plan cache (`transport.plan`);
- synchronisation: an empty call (`transport.barrier()`: enter, publish, check every peer),
  less its own argument checks, plan lookup and two waits (counted in their rows);
- copy and reduce: the plan's copies and numpy reductions, on arrays of the call's size;
- wake-up and poll: half the round trip of one flag between the two rank processes, polled
  from Python (what a dependency wait costs when the peer is already there), times the
  waits a call makes;
and the remainder (interpreter bookkeeping: counters, descriptors, the call record) is what
the total leaves. With the small-message path (`RuntimeOptions.ll_max_bytes`) the same
columns are printed for the call through it, and its C hot loop timed alone.

    PYTHONPATH=src python3 benchmarks/allreduce_breakdown.py --phases [--iters 200]

times the mid sizes instead (all-reduce and all-to-all, 1 and 4 MiB, 2 ranks): per call, the
communicator's dispatch and the transport's `execute`; where calls take the general path,
also entering the call (`ShmTransport._enter`), running the plan (in C where `runtime.cplan`
takes it, else interpreted) and the end-of-call checks (a repeated call whose plan runs in C
runs whole in C, `runtime.shm_fast`: no Python phases to split); each the mean and median
over the calls, measured inside the rank processes.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))

from gpucomm.bench import run_bench  # noqa: E402


def _loop(fn, n: int, before=None) -> float:
    """Seconds per call of `fn`, best of 3 loops of n (each after `before()`, if given)."""
    best = float("inf")
    for _ in range(3):
        if before is not None:
            before()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def _synced(comm, fn, n: int) -> float:
    """nccl-tests' timing: barrier, n back-to-back calls, divided by n (best of 3)."""
    return _loop(fn, n, before=comm.barrier)


def _median_call(comm, fn, n: int) -> float:
    """The median of n individually timed calls: what an undisturbed call costs on a machine
    where other jobs take the cores now and then (a mean carries every preemption)."""
    ts = []
    comm.barrier()
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def _pingpong(tr, n: int) -> float:
    """Half a round trip of one flag between rank 0 and 1, polled from Python: rank 0 writes
    k into its word, rank 1 waits for it and answers in its own. Uses a spare control word."""
    from gpucomm.runtime.shm_control import P2P_ACK
    word = P2P_ACK + 63  # unused unless a job has 64 ranks
    me, peer = tr._progs[tr.rank], tr._progs[1 - tr.rank]
    me[word] = 0
    tr.barrier()
    t = time.perf_counter()
    for k in range(1, n + 1):
        if tr.rank == 0:
            me[word] = k
            while peer[word] < k:
                pass
        else:
            while peer[word] < k:
                pass
            me[word] = k
    dt = (time.perf_counter() - t) / n / 2
    tr.barrier()
    me[word] = 0
    return dt


def worker(size: int, iters: int) -> None:
    import numpy as np

    import gpucomm.runtime as rt
    from gpucomm import dtypes as dt
    from gpucomm.runtime.arrays import as_flat
    from gpucomm.runtime.shm_control import block_count, unalias

    comm = rt.init()
    tr, d = comm.transport, dt.get_dtype("float32")
    x = np.ones(size // 4, np.float32)
    sched = comm.schedule("all_reduce", x.nbytes)
    ll = getattr(tr, "_ll", None)
    res: dict = {"algorithm": sched.algorithm,
                 "ll_max_bytes": tr.options.ll_max_bytes if ll is not None else 0}

    # the general path: the schedule through the interpreter (the small-message path off)
    tr._ll, comm._ll = None, None
    res["api"] = _synced(comm, lambda: comm.all_reduce(x), iters)
    res["execute"] = _synced(comm, lambda: tr.execute(sched, x, x, "sum", d, comm.timeout),
                             iters)
    res["barrier"] = _synced(comm, tr.barrier, iters)
    # the same three, median of single calls (the breakdown's figures)
    res["api_med"] = _median_call(comm, lambda: comm.all_reduce(x), iters)
    res["execute_med"] = _median_call(
        comm, lambda: tr.execute(sched, x, x, "sum", d, comm.timeout), iters)
    res["barrier_med"] = _median_call(comm, tr.barrier, iters)
    tr._ll, comm._ll = ll, tr.ll_all_reduce if ll is not None else None
    if ll is not None and x.nbytes <= res["ll_max_bytes"]:
        res["ll_api"] = _synced(comm, lambda: comm.all_reduce(x), iters)
        res["ll_execute"] = _synced(comm, lambda: tr.execute(sched, x, x, "sum", d,
                                                             comm.timeout), iters)
        res["ll_transport"] = _synced(comm, lambda: tr.ll_all_reduce(x, x, "sum"), iters)

        def c_call():
            tr.seq += 1
            ll.run(x, x, tr.seq, "sum", 1e9, False)
        res["ll_c"] = _synced(comm, c_call, iters)
        res["ll_api_med"] = _median_call(comm, lambda: comm.all_reduce(x), iters)
        res["ll_c_med"] = _median_call(comm, c_call, iters)
    res["pingpong"] = _pingpong(tr, iters)

    # parts, alone (no peer involved)
    res["check_comm"] = _loop(lambda: (as_flat(x, "buf", None), comm._check_root(0),
                                       dt.check_op("sum", d)), iters)
    res["check_tr"] = _loop(lambda: unalias(sched, tr.rank, block_count(sched, tr.rank, x, x),
                                            x, x, tr._input_copy), iters)
    res["plan_comm"] = _loop(lambda: comm.schedule("all_reduce", x.nbytes), iters)
    res["plan_tr"] = _loop(lambda: tr.plan(sched, x.size, 4), iters)
    plan = tr.plan(sched, x.size, 4)[0]
    acts = plan.actions[tr.rank]
    a, b, c = (np.ones(x.size, np.float32) for _ in range(3))
    copies = sum(1 for act in acts if act.n and not act.reduce)
    reduces = sum(1 for act in acts if act.reduce)
    res["copy"] = _loop(lambda: a.__setitem__(slice(0, x.size), b[0:x.size]), iters) * copies
    res["reduce"] = _loop(lambda: np.add(a[0:x.size], b[0:x.size], out=c[0:x.size]),
                          iters) * reduces
    # dependency waits: one per peer entered + the actions' deps + the end-of-call check
    res["waits"] = 1 + sum(len(act.deps) for act in acts)
    res["actions"] = len(acts)
    if comm.rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    comm.close()


def crossover_worker(iters: int) -> None:
    """Per size, comm.all_reduce with the small-message path and without (interleaved)."""
    import numpy as np

    import gpucomm.runtime as rt
    comm = rt.init()
    tr = comm.transport
    ll = tr._ll
    res = {}
    for size in CROSSOVER_SIZES:
        x = np.ones(size // 4, np.float32)
        n = max(200, iters * 64 // max(size, 64))
        on, off = [], []
        for _ in range(3):
            tr._ll, comm._ll = ll, tr.ll_all_reduce
            on.append(_synced(comm, lambda x=x: comm.all_reduce(x), n))
            tr._ll, comm._ll = None, None
            off.append(_synced(comm, lambda x=x: comm.all_reduce(x), n))
        res[size] = (min(on), min(off))
    tr._ll, comm._ll = ll, tr.ll_all_reduce
    if comm.rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    comm.close()


CROSSOVER_SIZES = [8, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768]
PHASE_CASES = [("all_reduce", 1 << 20), ("all_reduce", 4 << 20), ("all_to_all", 1 << 20),
               ("all_to_all", 4 << 20)]


def phases_worker(iters: int) -> None:
    """Per case, each call's phases: timers around the transport's entry, plan run and
    execute (the rest of execute is the end-of-call checks)."""
    import numpy as np

    import gpucomm.runtime as rt
    from gpucomm.runtime import interpret, shm
    comm = rt.init()
    spent: dict = {}

    def timed(cls, name, key):
        real = getattr(cls, name)

        def run(*a, **kw):
            t = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                spent.setdefault(key, []).append(time.perf_counter() - t)
        setattr(cls, name, run)
    for cls, name in ((shm.ShmTransport, "_enter"), (interpret.Interpreter, "run"),
                      (shm.ShmTransport, "execute")):
        timed(cls, name, name.strip("_"))
    res = {}
    for coll, size in PHASE_CASES:
        x = np.zeros(size // 4, np.float32)
        y = np.empty_like(x)
        call = (lambda x=x: comm.all_reduce(x)) if coll == "all_reduce" else \
            (lambda x=x, y=y: comm.all_to_all(y, x))
        for _ in range(5):
            call()
        comm.barrier()
        spent.clear()
        total = []
        for _ in range(iters):
            t = time.perf_counter()
            call()
            total.append(time.perf_counter() - t)
        ex = spent["execute"][-iters:]
        parts = {"dispatch": [a - b for a, b in zip(total, ex)], "execute": ex}
        if len(spent.get("enter", ())) >= iters:  # the general path, not a whole call in C
            en, rn = spent["enter"][-iters:], spent["run"][-iters:]
            parts.update({"enter": en, "plan": rn,
                          "end checks": [a - b - c for a, b, c in zip(ex, en, rn)]})
        res[f"{coll} {size >> 20} MiB"] = {**parts, "total": total}
    print(f"RESULT{comm.rank} " + json.dumps(res), flush=True)
    comm.close()


def run_phases(iters: int) -> int:
    import statistics

    from gpucomm.runtime.launch import launch
    out = io.StringIO()
    print(f"load before: {load()}")
    status = launch([sys.executable, os.path.abspath(__file__), "--worker", "--phases",
                     "--iters", str(iters)], 2, out=out, timeout=600)
    found = [ln.split("RESULT", 1)[1] for ln in out.getvalue().splitlines() if "RESULT" in ln]
    got = {text[0]: json.loads(text.split(" ", 1)[1]) for text in found}
    if status or len(got) != 2:
        raise RuntimeError(f"phase ranks failed (exit {status}):\n{out.getvalue()[-2000:]}")
    for case in got["0"]:
        print(f"\n== {case}, 2 ranks, {iters} calls: mean / median us per call")
        for part in got["0"][case]:
            cols = [f"rank {r}: {statistics.mean(got[r][case][part]) * 1e6:8.1f} / "
                    f"{statistics.median(got[r][case][part]) * 1e6:8.1f}" for r in "01"]
            print(f"  {part:<11} " + "   ".join(cols))
    print(f"\nload after: {load()}  (2 cores; other jobs share them)")
    return 0


def run_ours(size: int, iters: int, crossover: bool = False) -> dict:
    from gpucomm.runtime.launch import launch
    out = io.StringIO()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--size", str(size),
           "--iters", str(iters)] + (["--crossover"] if crossover else [])
    status = launch(cmd, 2, out=out, timeout=300)
    lines = [ln.split("RESULT ", 1)[1] for ln in out.getvalue().splitlines() if "RESULT " in ln]
    if status or not lines:
        raise RuntimeError(f"breakdown ranks failed (exit {status}):\n{out.getvalue()[-2000:]}")
    return json.loads(lines[-1])


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def us(s: float) -> str:
    return f"{s * 1e6:7.2f} us"


def report(best: dict, mpi_us: float) -> None:
    r = best
    print(f"\n== {r['algorithm']} all-reduce, 2 ranks, general path (the plan interpreted in "
          f"Python): {r['api'] * 1e6:.1f} us per call timed as nccl-tests, "
          f"{r['api_med'] * 1e6:.1f} us for the median single call; the parts, from the "
          f"median call (a mean carries every preemption by other jobs):")
    dispatch = r["api_med"] - r["execute_med"]
    wake = r["pingpong"] * r["waits"]
    # an empty call's own checks, plan lookup and its two waits (entry, end) are counted in
    # their rows: what is left of it is the entering, publishing and checking of peers
    sync = max(r["barrier_med"] - r["check_tr"] - r["plan_tr"] - 2 * r["pingpong"], 0.0)
    parts = [("Python dispatch (Communicator)", dispatch),
             ("  of which argument checks (communicator)", r["check_comm"]),
             ("  of which plan lookup (communicator)", r["plan_comm"]),
             ("argument checks (transport)", r["check_tr"]),
             ("plan lookup (transport)", r["plan_tr"]),
             ("synchronisation (enter, publish, check peers' descriptors)", sync),
             (f"copy and reduce ({r['actions']} actions)", r["copy"] + r["reduce"]),
             (f"wake-up and poll ({r['waits']} waits x {r['pingpong'] * 1e6:.2f} us one-way)",
              wake)]
    accounted = dispatch + r["check_tr"] + r["plan_tr"] + sync + r["copy"] + r["reduce"] + wake
    parts.append(("remainder: interpreter bookkeeping (actions, counters)",
                  r["api_med"] - accounted))
    for name, t in parts:
        print(f"  {name:<62} {us(t)}")
    print(f"  {'total, median single call':<62} {us(r['api_med'])}")
    print(f"  {'total, nccl-tests timing':<62} {us(r['api'])}   MPICH {mpi_us:.2f} us: "
          f"x{r['api'] * 1e6 / mpi_us:.1f}")
    if r.get("ll_api"):
        print(f"\n== small-message path (one cache line per 56 B with its sequence number, "
              f"C poll and reduce; up to {r['ll_max_bytes']} B): nccl-tests timing "
              f"(median single call)")
        for name, t, med in [
                ("comm.all_reduce", r["ll_api"], r["ll_api_med"]),
                ("transport.execute", r["ll_execute"], None),
                ("transport.ll_all_reduce", r["ll_transport"], None),
                ("the C call alone (post, poll, reduce; includes the wait)", r["ll_c"],
                 r["ll_c_med"]),
                ("Python dispatch (comm.all_reduce - C call)", r["ll_api"] - r["ll_c"],
                 r["ll_api_med"] - r["ll_c_med"])]:
            print(f"  {name:<62} {us(t)}" + (f"  ({us(med).strip()})" if med else ""))
        print(f"  comm.all_reduce / MPICH, both timed as nccl-tests: "
              f"x{r['ll_api'] * 1e6 / mpi_us:.2f} (bar: <= 2)   "
              f"[{'PASS' if r['ll_api'] * 1e6 <= 2 * mpi_us else 'FAIL'}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=8, help="bytes (float32 elements x 4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--crossover", action="store_true",
                    help="time sizes 8 B - 32 KiB with the small-message path and without "
                         "(run with GPUCOMM_LL_MAX_BYTES=32768)")
    ap.add_argument("--phases", action="store_true",
                    help="where the time of 1 and 4 MiB all-reduces and all-to-alls goes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.size < 4 or args.size % 4:
        ap.error(f"--size {args.size}: a positive multiple of 4 (float32) is needed")
    if args.worker:
        if args.phases:
            phases_worker(args.iters)
        else:
            (crossover_worker(args.iters) if args.crossover else worker(args.size, args.iters))
        return 0
    if args.phases:
        return run_phases(min(args.iters, 1000))
    if args.crossover:
        print(f"load before: {load()}")
        res = run_ours(8, args.iters, crossover=True)
        print(f"{'size':>8} {'path us':>9} {'general us':>11}  general/path")
        for size, (on, off) in res.items():
            print(f"{size:>8} {on * 1e6:9.2f} {off * 1e6:11.2f}  x{off / on:.2f}")
        print(f"load after: {load()}")
        return 0
    ours, mpi = [], []
    for rnd in range(args.rounds):
        order = ["shm", "mpi"] if rnd % 2 == 0 else ["mpi", "shm"]
        for b in order:
            before = load()
            if b == "shm":
                ours.append(run_ours(args.size, args.iters))
                t = ours[-1]["api"] * 1e6
            else:
                try:
                    rows = run_bench("mpi", 2, "all_reduce", [args.size], iters=args.iters,
                                     warmup=args.iters // 10, check=0)
                except Exception as e:  # MPICH missing: report ours alone
                    print(f"  mpi not run: {e}")
                    mpi.append(float("nan"))
                    continue
                mpi.append(rows[0]["time_us"])
                t = mpi[-1]
            print(f"  round {rnd + 1} {b:>4}: {t:8.2f} us   (load before: {before})",
                  flush=True)
    best = {k: (min(r[k] for r in ours) if isinstance(ours[0][k], float) else ours[0][k])
            for k in ours[0]}  # each figure: its least disturbed round
    mpi_us = min(m for m in mpi) if mpi else float("nan")
    report(best, mpi_us)
    print(f"\nload average now: {load()}  (2 cores; other jobs share them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
