"""Measuring this host for bench's predictor (`plancost`): `gpucomm bench --calibrate`, or a
quick run the first time a prediction needs one.

With P processes working at once, for P = 1 .. cores (a rate measured on one idle core
overstates what each of P busy ranks gets), it times per process:
- copies (`np.copyto`), reductions (`np.add(a, b, out=c)`) and the runtime's streaming copy
  of buffers far larger than the last-level cache, and copies and reductions of smaller ones:
  a curve over the bytes a process touches (in L2, spilling from it, in the last-level cache),
  each timing TIMED_BYTES of back-to-back ops;
- with two processes: reading each other by cross-memory attach (`cma_curve`), and copying
  out of shared memory what the other has just written (`shared_curve`, a staged exchange);
- the latency of one runtime call (an 8-byte broadcast between 2 ranks) and the small-message
  path's (`ll_latency_s`, `ll_Bps`).

It saves them in ~/.cache/gpucomm/host.yaml (`plancost.host_path`), with the load average and
usable cores it was taken with.
"""
from __future__ import annotations

import os
import time

import yaml

from ..runtime.options import current
from .plancost import FORMAT, host_path


def cache_bytes() -> int:
    """Size of the last-level cache (0 if the system does not say)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = 0
    try:
        for idx in os.listdir(base):
            try:
                with open(os.path.join(base, idx, "size")) as f:
                    text = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            num = text[:-1] if text[-1:] in "KMG" else text
            if num.isdigit():
                best = max(best, int(num) * mult)
    except OSError:
        pass
    return best


def cma_allowed() -> bool:
    """Whether the runtime's ranks (sibling processes) may read each other's memory, so large
    chunks go by cross-memory attach (Yama ptrace_scope 0, or no Yama). Whether the options
    let them is `RuntimeOptions.cma`, applied where the plan is compiled (`plan_call`)."""
    if not hasattr(os, "sched_getaffinity"):
        return False
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return f.read().strip() == "0"
    except OSError:
        return True


TIMED_BYTES = 16 << 20  # a timing repeats an op until it has moved this much (one op of
# 256 KiB takes 5 us, too short to time alone: copies in cache read 10 GB/s timed singly and
# 45 GB/s timed 64 at a time)


# buffer sizes the calibration times copies and reductions of, below the memory-sized one:
# a process's three buffers in L2, spilling from it, in the last-level cache, beyond it
CURVE = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
QUICK_CURVE = (256 << 10, 4 << 20)


def _rates_worker(_, nbytes, repeats, barrier, queue):
    import numpy as np

    from ..runtime import memcopy
    stream_copy = memcopy.copier(current())
    n = nbytes // 4
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    c[:] = 0
    ca, aa = c.__array_interface__["data"][0], a.__array_interface__["data"][0]
    times = max(1, TIMED_BYTES // nbytes)
    best = [float("inf")] * 3
    for _ in range(repeats):
        for k, work in enumerate((lambda: np.copyto(c, a), lambda: np.add(a, b, out=c),
                                  lambda: stream_copy(ca, aa, nbytes))):
            barrier.wait()  # everyone works at once: the memory system is shared
            t0 = time.perf_counter()
            for _ in range(times):
                work()
            best[k] = min(best[k], (time.perf_counter() - t0) / times)
    queue.put(tuple(nbytes / t for t in best))


def _together(nprocs: int, target, args) -> list:
    """Run `target(k, *args, barrier, results)` in `nprocs` forked processes at once; what
    each put in `results` (the processes joined, or killed if they hang)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(nprocs), ctx.Queue()
    procs = [ctx.Process(target=target, args=(k, *args, barrier, results))
             for k in range(nprocs)]
    for p in procs:
        p.start()
    try:
        return [results.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def measure_rates(nprocs: int, nbytes: int, repeats: int = 5) -> tuple[float, float, float]:
    """(copy, reduce, streaming copy) bytes/s per process while `nprocs` processes work at
    once; the slowest process's best repeat (a collective waits for its slowest rank). The
    streaming copy is the runtime's `memcopy.copy` (a plain copy where it is not built)."""
    got = _together(nprocs, _rates_worker, (nbytes, repeats))
    return tuple(min(g[k] for g in got) for k in range(3))


# transfer sizes the calibration times cross-memory attach at (a process's buffers: twice)
CMA_CURVE = (256 << 10, 1 << 20, 4 << 20, 16 << 20)
QUICK_CMA_CURVE = (1 << 20, 16 << 20)


def _cma_worker(k, nbytes, repeats, queues, barrier, results):
    import numpy as np

    from ..runtime import cma
    src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    queues[1 - k].put((os.getpid(), src.ctypes.data))
    pid, addr = queues[k].get(timeout=60)
    times, best = max(1, TIMED_BYTES // nbytes), float("inf")
    for _ in range(repeats):
        barrier.wait()  # both read each other at once, as an all-to-all does
        t0 = time.perf_counter()
        for _ in range(times):
            cma.read(pid, addr, dst.ctypes.data, nbytes)
        best = min(best, (time.perf_counter() - t0) / times)
        barrier.wait()  # the peer's buffer stays until both are done
    results.put(nbytes / best)
    barrier.wait()


def measure_cma(nbytes: int, repeats: int = 5) -> float:
    """Bytes/s one process reads from another by cross-memory attach while that one reads
    it back (the slower of the two, best repeat)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    return min(_together(2, _cma_worker, (nbytes, repeats, (ctx.Queue(), ctx.Queue()))))


# sizes the calibration times reading what a peer has just written to shared memory at (a
# staged chunk: the lines come from the peer core's cache, not this one's)
SHARED_CURVE = (64 << 10, 256 << 10, 1 << 20, 4 << 20)
QUICK_SHARED_CURVE = (64 << 10, 1 << 20)


def _shared_worker(k, nbytes, repeats, region, barrier, results):
    import numpy as np
    shared = np.frombuffer(region, np.uint8)
    mine, theirs = shared[k * nbytes:(k + 1) * nbytes], shared[(1 - k) * nbytes:(2 - k) * nbytes]
    src, dst = np.full(nbytes, k + 1, np.uint8), np.zeros(nbytes, np.uint8)
    best = float("inf")
    for _ in range(repeats):
        np.copyto(mine, src)
        barrier.wait()  # both wrote: each now copies out what the other wrote
        t0 = time.perf_counter()
        np.copyto(dst, theirs)
        best = min(best, time.perf_counter() - t0)
        barrier.wait()
    results.put(nbytes / best)


def measure_shared(nbytes: int, repeats: int = 30) -> float:
    """Bytes/s a process copies out of shared memory that another process has just written
    (each does so from the other at once, as a staged exchange does; the slower, best
    repeat)."""
    import mmap
    region = mmap.mmap(-1, 2 * nbytes)
    try:
        return min(_together(2, _shared_worker, (nbytes, repeats, region)))
    finally:
        region.close()


def measure_latency(iters: int = 2000) -> float:
    """Seconds of one runtime call: an 8-byte 1-op broadcast between 2 shm ranks."""
    from . import run_bench
    rows = run_bench("shm", 2, "broadcast", [8], algorithm="ring", iters=iters,
                     warmup=max(10, iters // 10), check=0)
    return min(rows[0]["time_us"], rows[0]["ip_time_us"]) * 1e-6


def measure_ll(iters: int = 2000) -> tuple[float, float] | None:
    """(seconds of an 8-byte all-reduce on the small-message path between 2 shm ranks,
    bytes per second it moves beyond that, from a 4 KiB one, or the path's largest where
    `ll_max_bytes` is below: a tuned host's), or None without the path."""
    from ..runtime.shm_ll import LLRunner
    from . import run_bench
    top = min(4096, current().ll_max_bytes)
    if LLRunner is None or top < 64:
        return None
    rows = run_bench("shm", 2, "all_reduce", [8, top], iters=iters,
                     warmup=max(10, iters // 10), check=0)
    t8, t_top = rows[0]["time_us"] * 1e-6, rows[1]["time_us"] * 1e-6
    return t8, (top - 8) / max(t_top - t8, 1e-9)


def calibrate(path=None, quick: bool = False) -> tuple[str, dict]:
    """Measure this host and save it. `quick`: fewer repeats and iterations (about a second),
    what a first prediction uses when nothing is saved yet."""
    cores = os.cpu_count() or 1
    # what else ran: a calibration taken under load costs every op too dearly (load_warning)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    load = round(os.getloadavg()[0], 2)
    llc = cache_bytes()
    repeats = 3 if quick else 7
    big = 32 << 20 if quick else 64 << 20
    rates = {}
    for p in range(1, cores + 1):
        copy, red, stream = measure_rates(p, big, repeats)
        curve = [[3 * nb, *measure_rates(p, nb, repeats)[:2]]
                 for nb in (QUICK_CURVE if quick else CURVE)] + [[3 * big, copy, red]]
        rates[p] = {"copy_Bps": copy, "reduce_Bps": red,
                    "copy_cache_Bps": max(c for _, c, _ in curve),
                    "reduce_cache_Bps": max(r for _, _, r in curve), "stream_Bps": stream,
                    "curve": curve}
    lat = measure_latency(200 if quick else 2000)
    ll = measure_ll(200 if quick else 2000)
    cma_ok = cma_allowed()
    cma_curve = [[2 * nb, measure_cma(nb, repeats)]
                 for nb in (QUICK_CMA_CURVE if quick else CMA_CURVE)] if cma_ok else None
    shared_curve = [[4 * nb, measure_shared(nb, 10 if quick else 30)]
                    for nb in (QUICK_SHARED_CURVE if quick else SHARED_CURVE)]
    host = {"format": FORMAT, "cma": cma_ok,
            "bandwidth_Bps": rates[cores]["copy_Bps"], "latency_s": float(lat),
            "cores": cores, "cache_bytes": llc, "rates": rates,
            **({"cma_curve": cma_curve} if cma_curve else {}), "shared_curve": shared_curve,
            **({"ll_latency_s": ll[0], "ll_Bps": ll[1]} if ll else {}),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_1min": load, "usable_cores": usable,
            "method": (f"{'quick' if quick else 'full'}: P = 1..{cores} processes at once, "
                       f"np.copyto, np.add(out=) and the streaming copy of {big >> 20} MiB "
                       f"buffers (memory), the first two also of smaller ones (curve: "
                       f"bytes of a process's three buffers, copy and reduce bytes/s), each "
                       f"timing {TIMED_BYTES >> 20} MiB of ops, best of {repeats}, slowest "
                       f"process; cma_curve: 2 processes reading each other by cross-memory "
                       f"attach (bytes of a process's two buffers, bytes/s); shared_curve: "
                       f"2 processes copying out of shared memory what the other just wrote "
                       f"(bytes of a process's four buffers, bytes/s); latency: 8-byte 1-op "
                       f"broadcast between 2 shm ranks")}
    path = path or host_path()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(host, f, sort_keys=False)
    return path, host


__all__ = ["calibrate", "cma_allowed", "measure_cma", "measure_rates", "measure_shared"]
