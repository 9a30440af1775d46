"""How fast the simulator is, on a 1 GiB ring all-reduce.

    PYTHONPATH=src python3 benchmarks/sim_speed.py [--quick]

Prints: the flow model on 128 x dgx-h100 (1024 GPUs, bar <= 2 s), the analytic model on
1024 x dgx-h100 (8192 GPUs, bar <= 0.5 s), each with ops and events simulated and per second,
and how the flow model's cost grows with the number of transfers (ranks 128..1024), as a
log-log slope (1.0 = linear). Bars are checked on this process's CPU time, best of
`--repeat` runs (wall-clock is printed too: on a shared machine it includes other jobs).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucomm.algorithms import build  # noqa: E402
from gpucomm.simulate import simulate  # noqa: E402
from gpucomm.topology import build_topology  # noqa: E402

GIB = 1 << 30


def timed(fn, repeat):
    """(best wall seconds, best CPU seconds of this process, result) over `repeat` runs."""
    best, cpu, out = math.inf, math.inf, None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return best, cpu, out


def run(nodes, model, repeat):
    topo = build_topology("dgx-h100", nodes=nodes)
    sched = build("all_reduce", "ring", topo.nranks)
    simulate(sched, topo, GIB, model=model, protocol="simple")  # routes, caches (one-off)
    return timed(lambda: simulate(sched, topo, GIB, model=model, protocol="simple"), repeat)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="skip the 1024-GPU flow run")
    args = ap.parse_args(argv)
    ok = True
    print("flow model, ring all-reduce 1 GiB, scaling with the number of transfers:")
    points = []
    for nodes in (16, 32, 64) + (() if args.quick else (128,)):
        secs, cpu, r = run(nodes, "flow", args.repeat)
        points.append((r.ops, cpu))
        print(f"  {nodes * 8:5d} GPUs: {r.ops:9d} transfers, {r.events:6d} events, "
              f"{secs:7.3f} s wall, {cpu:7.3f} s CPU, {r.ops / cpu:9.0f} transfers/s, "
              f"{r.events / cpu:7.0f} events/s, busbw {r.busbw_GBps:6.1f} GB/s")
        if nodes == 128:
            ok &= cpu <= 2.0
            print(f"  -> 1024 GPUs flow: {secs:.3f} s wall, {cpu:.3f} s CPU (bar 2 s) "
                  f"{'PASS' if cpu <= 2 else 'FAIL'}")
    if len(points) >= 2:
        (n0, t0), (n1, t1) = points[0], points[-1]
        slope = math.log(t1 / t0) / math.log(n1 / n0)
        print(f"  CPU time grows as transfers^{slope:.2f} from {n0} to {n1} transfers "
              f"(1.00 = linear)")
    secs, cpu, r = run(1024, "analytic", args.repeat)
    ok &= cpu <= 0.5
    print(f"analytic model, 8192 GPUs: {r.ops} ops in {secs:.3f} s wall, {cpu:.3f} s CPU "
          f"({r.ops / max(cpu, 1e-9):.3g} ops/s), busbw {r.busbw_GBps:.1f} GB/s (bar 0.5 s) "
          f"{'PASS' if cpu <= 0.5 else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
