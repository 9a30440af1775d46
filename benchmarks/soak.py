"""10,000 back-to-back all-reduces of mixed sizes over the shm runtime, with a steady footprint.

    PYTHONPATH=src python3 benchmarks/soak.py [-n 2] [--calls 10000]

Every rank draws the same sequence of sizes (8 B .. 4 MiB) and algorithms from one seed,
runs them back to back, checks every 500th result against the closed form, and prints its RSS
at the start (after the first call), after 1,000 calls (every size x algorithm seen, its plan
cached), at the middle and at the end, split into private memory (heap) and mapped shared
memory, with the number of cached plans.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))


def rss_mib(kind: str = "VmRSS") -> float:
    """Resident MiB: VmRSS (all), RssAnon (private heap), RssShmem (mapped shared memory)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(kind + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rank_main(calls: int) -> int:
    import numpy as np
    import gpucomm.runtime as rt
    comm = rt.init(timeout=120)
    p, r = comm.world_size, comm.rank
    rng = np.random.default_rng(7)
    sizes = (2 ** rng.integers(1, 21, calls)).astype(int)  # 2 .. 1M float32 = 8 B .. 4 MiB
    algos = rng.choice(["auto", "ring", "one_shot", "two_shot", "recursive_doubling"], calls)
    bufs = {}
    t0 = time.perf_counter()
    marks, parts = {}, {}
    nbytes = 0
    for i in range(calls):
        n = int(sizes[i])
        x = bufs.get(n)
        if x is None:
            x = bufs[n] = np.empty(n, np.float32)
        x.fill(r + 1)
        comm.all_reduce(x, algorithm=str(algos[i]))
        nbytes += 4 * n
        # check without a temporary array: a 1 MiB boolean every 500 calls is what used to
        # grow the heap here (glibc keeps the fragmented high-water mark), not the runtime
        if i % 500 == 0 and not x.min() == x.max() == p * (p + 1) / 2:
            print(f"rank {r}: call {i} gave {x[:4]}, want {p * (p + 1) / 2}", flush=True)
            return 1
        if i in (0, 999, calls // 2):
            marks[i + 1] = rss_mib()
            parts[i + 1] = (rss_mib("RssAnon"), rss_mib("RssShmem"), len(comm.transport._plans))
    marks[calls] = rss_mib()
    parts[calls] = (rss_mib("RssAnon"), rss_mib("RssShmem"), len(comm.transport._plans))
    dt = time.perf_counter() - t0
    if r == 0:
        print(f"{calls} all-reduces on {p} ranks in {dt:.1f} s ({dt / calls * 1e6:.0f} us "
              f"each, {nbytes / dt / 1e9:.2f} GB/s of buffers)")
    steady = marks.get(1000, marks[calls])
    print(f"rank {r}: RSS " + ", ".join(f"after {k} calls {v:.1f} MiB" for k, v in
                                         sorted(marks.items()))
          + f" (from 1000 to {calls}: {marks[calls] - steady:+.1f} MiB); private/shared MiB, "
          f"plans cached: " + ", ".join(f"{a:.1f}/{b:.1f} {c}" for _, (a, b, c) in
                                        sorted(parts.items())), flush=True)
    comm.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_main:
        return rank_main(args.calls)
    from gpucomm.runtime.launch import launch
    from gpucomm.runtime.segment import leftovers
    before = set(leftovers())
    code = launch([sys.executable, os.path.abspath(__file__), "--rank-main", "--calls",
                   str(args.calls)], args.n, timeout=1800)
    left = set(leftovers()) - before
    print(f"exit status {code}; shared-memory segments left behind: {len(left)}")
    return code or (1 if left else 0)


if __name__ == "__main__":
    sys.exit(main())
