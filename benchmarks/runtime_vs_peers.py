"""gpucomm's shm runtime against MPICH (mpi4py) and gloo (torch.distributed), in one run.

    PYTHONPATH=src python3 benchmarks/runtime_vs_peers.py [--rounds 5] [--quick] [--old-src DIR]
                                                          [--only all_to_all,...] [--nranks N]

Every engine runs the same nccl-tests sweep (`gpucomm bench --backend ...`, out-of-place
columns — in-place for broadcast, which MPI and gloo only do in place — float32 sum, 2 ranks
or `--nranks`, bound to cores for every engine where there are as many cores). The machine is
shared (2 cores, other jobs), so:
- rounds are interleaved: each round runs every collective on every engine back to back, the
  engine order rotating from round to round, so a burst of load hits all engines alike;
- every engine is scored the same way: its best round (the least disturbed run), with the
  median shown next to it, and the spread of the per-round ratios (engines measured seconds
  apart in the same round) printed as min / median / max.
Prints the ratios and whether each bar is met (on the best-of ratio):
- all-reduce >= 1 MiB: shm busbw >= 1.5x MPICH's and >= 3x gloo's (64 and 256 KiB are
  printed beside them, without a bar: where the direct threshold decides)
- all-gather, reduce-scatter, broadcast, all-to-all at 16 MiB: >= 1.0x MPICH's
- all-to-all at 1, 4 and 64 MiB too (the direct plan run in C): >= 1.0x MPICH's
- 8-byte all-reduce: <= 2x MPICH's time (the small-message path; <= 30 us without MPI)
- 4 ranks (more than the cores here) complete every collective; their busbw is reported
`--old-src DIR` (another checkout's `src`, e.g. before a refactoring) adds its shm runtime as
one more engine, `shm-old`, interleaved in the same rounds: each table shows its times next to
this tree's, and a last section prints old time / new time per row (1.0 = unchanged).
The runtime runs with this host's tuned options where `gpucomm bench --tune` saved them (the
first lines say which); `--tune` runs that tuning first, as a user would.
`--only` runs the named collectives' rows and bars alone (all_reduce, all_to_all, ...; no
4-rank section): more rounds of one comparison in the same time. `--nranks N` runs every row
on N ranks instead of 2 (the bars then hold at N ranks; ranks beyond the cores share them).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, SRC)

from gpucomm.bench import run_bench  # noqa: E402
from gpucomm.collectives import get_collective, layout  # noqa: E402
from gpucomm.runtime.options import current, tuned_file  # noqa: E402

MiB = 1 << 20
AR_SIZES = [8, 64 << 10, 256 << 10, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
A2A_SIZES = [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
OTHERS = ["all_gather", "reduce_scatter", "broadcast", "all_to_all"]


def available() -> list[str]:
    have = ["shm"]
    if importlib.util.find_spec("mpi4py"):
        have.append("mpi")
    if importlib.util.find_spec("torch"):
        have.append("gloo")
    return have


_OLD_SRC = None  # --old-src: the `src` directory the shm-old engine runs from
_OLD_CODE = ("import json, sys\nfrom gpucomm.bench import run_bench\na = json.loads(sys.argv[1])\n"
             "print(json.dumps(run_bench(*a['args'], **a['kw'])))")


def bench(backend, nranks, coll, sizes, **kw):
    """`run_bench` of this tree, or, for shm-old, of the --old-src tree in a subprocess."""
    if backend != "shm-old":
        return run_bench(backend, nranks, coll, sizes, **kw)
    env = dict(os.environ, PYTHONPATH=_OLD_SRC)
    arg = json.dumps({"args": ["shm", nranks, coll, sizes], "kw": kw})
    done = subprocess.run([sys.executable, "-c", _OLD_CODE, arg], env=env, text=True,
                          capture_output=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"shm-old ({_OLD_SRC}) failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(backends, plan, rounds, nranks=2):
    """{(collective, size): {backend: [time in us per round]}}, rounds interleaved.

    Out-of-place times, except for broadcast: MPI_Bcast and torch's broadcast work in place
    (the root sends from its one buffer), so only the in-place column compares like with like
    (the out-of-place one makes our root copy its input to its output first, as NCCL does)."""
    times = {}
    for rnd in range(rounds):
        order = backends[rnd % len(backends):] + backends[:rnd % len(backends)]
        for coll, sizes in plan:
            key = "ip_time_us" if coll == "broadcast" else "time_us"
            for b in order:
                for group in ([s for s in sizes if s <= 4096], [s for s in sizes if s > 4096]):
                    if not group:  # small messages: many iterations, or timer and skew dominate
                        continue
                    n = 1000 if group[0] <= 4096 else 20
                    rows = bench(b, nranks, coll, group, iters=n, warmup=max(3, n // 10),
                                 check=0)
                    # keyed by the size asked for: a row's own is rounded to whole elements
                    # per rank (3 ranks: 16 MiB runs as 16777200 B)
                    for s, r in zip(group, rows, strict=True):
                        times.setdefault((coll, s), {}).setdefault(b, []).append(r[key])
        print(f"  round {rnd + 1}/{rounds} done (load average {_load()})", file=sys.stderr,
              flush=True)
    return times


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _handoff_worker(name, n, iters, side, out):
    import numpy as np
    from multiprocessing import shared_memory
    cores = sorted(os.sched_getaffinity(0))  # the ranks' cores, as the launcher binds them
    os.sched_setaffinity(0, {cores[side % len(cores)]})
    shm = shared_memory.SharedMemory(name=name)
    flag = np.ndarray(2, np.int64, shm.buf[:16])
    data = np.ndarray(n, np.uint8, shm.buf[64:64 + n])
    mine = np.ones(n, np.uint8) if side == 0 else np.zeros(n, np.uint8)
    best = float("inf")
    for it in range(1, iters + 1):
        if side == 0:  # write what the other core has just read, then hand it over
            t = time.perf_counter()
            np.copyto(data, mine)
            best = min(best, time.perf_counter() - t)
            flag[0] = it
            while flag[1] < it:
                pass
        else:
            while flag[0] < it:
                pass
            np.copyto(mine, data)
            flag[1] = it
    out.put(best)
    del flag, data
    shm.close()


def cross_core_handoff(n=512 << 10, iters=200) -> tuple[float, float]:
    """(us to overwrite n bytes the other core has just read, us for a private copy): how
    dear it is right now to move cache lines between the two ranks' cores. On these shared
    VMs it swings about 4x from one quarter of an hour to the next (the host moves the
    vCPUs), and staged transfers below the cross-memory threshold swing with it."""
    import multiprocessing as mp
    from multiprocessing import shared_memory

    import numpy as np
    shm = shared_memory.SharedMemory(create=True, size=64 + n)
    np.ndarray(2, np.int64, shm.buf[:16])[:] = 0
    ctx, q = mp.get_context("fork"), None
    try:
        q = ctx.Queue()
        procs = [ctx.Process(target=_handoff_worker, args=(shm.name, n, iters, k, q))
                 for k in (0, 1)]
        for pr in procs:
            pr.start()
        shared = min(q.get(timeout=60) for _ in procs)
        for pr in procs:
            pr.join(timeout=10)
    finally:
        shm.close()
        shm.unlink()
    a, b = np.ones(n, np.uint8), np.zeros(n, np.uint8)
    private = min(_timed(lambda: np.copyto(b, a)) for _ in range(50))
    return shared * 1e6, private * 1e6


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def busbw(coll, size, t_us, nranks=2):
    return layout(get_collective(coll), size, "float32", nranks).busbw(t_us * 1e-6)[1]  # GB/s


def ratio_text(peer_ts, shm_ts):
    """best-of ratio and the spread of the per-round ratios."""
    best = min(peer_ts) / min(shm_ts)
    per = sorted(p / s for p, s in zip(peer_ts, shm_ts))
    return best, f"x{best:.2f} (rounds {per[0]:.2f}/{statistics.median(per):.2f}/{per[-1]:.2f})"


def print_old_vs_new(times) -> None:
    print(f"\n== shm-old ({_OLD_SRC}) time / this tree's time, same rounds (1.0: unchanged; "
          f"> 1: this tree is faster)")
    for key in sorted(times):
        ts = times[key]
        print(f"{key[0]:>15} {key[1]:>10} B: {ratio_text(ts['shm-old'], ts['shm'])[1]}")


def sweep_sizes(quick: bool) -> tuple[list[int], list[int]]:
    """(all-reduce sizes, all-to-all sizes): fewer with --quick."""
    if quick:
        return [8, MiB, 16 * MiB], [MiB, 16 * MiB]
    return AR_SIZES, A2A_SIZES


def print_a2a(times, sizes, backends, verdicts, nranks=2) -> None:
    """All-to-all over the sizes against MPICH (the 16 MiB bar is with the other
    collectives)."""
    if "mpi" not in backends:
        return
    print(f"\n== all_to_all, {nranks} ranks: best (median) us; ratio = MPICH time / shm time, "
          f"best-of (per-round min/median/max)")
    for s in sizes:
        ts = times[("all_to_all", s)]
        ratio, text = ratio_text(ts["mpi"], ts["shm"])
        print(f"{s >> 20:>6} MiB: " + ", ".join(
            f"{b} {min(ts[b]):9.1f} ({statistics.median(ts[b]):9.1f})" for b in backends)
            + f"   {text}"
            + (f", shm-old {ratio_text(ts['mpi'], ts['shm-old'])[1]}" if "shm-old" in ts else ""))
        if s != 16 * MiB:
            verdicts.append((f"all_to_all {s >> 20} MiB time <= mpi's", ratio >= 1.0, text))


def small_verdict(t8, backends):
    """The 8-byte all-reduce's bar: <= 2x MPICH's time, or <= 30 us where MPI is absent."""
    if "mpi" not in backends:
        return ("all_reduce 8 B <= 30 us", min(t8["shm"]) <= 30,
                f"{min(t8['shm']):.1f} us (median {statistics.median(t8['shm']):.1f})")
    x8 = min(t8["shm"]) / min(t8["mpi"])
    per = sorted(s / m for s, m in zip(t8["shm"], t8["mpi"]))
    return ("all_reduce 8 B time <= 2x mpi", x8 <= 2.0,
            f"{min(t8['shm']):.2f} us vs MPICH {min(t8['mpi']):.2f} us: x{x8:.2f} "
            f"(rounds {per[0]:.2f}/{statistics.median(per):.2f}/{per[-1]:.2f})")


def parse_args():
    global _OLD_SRC
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 rounds, fewer sizes")
    ap.add_argument("--old-src", metavar="DIR",
                    help="another checkout's src: its shm runtime runs interleaved as shm-old")
    ap.add_argument("--only", metavar="COLL[,COLL]",
                    help="only these collectives' rows and bars (of: all_reduce, "
                         + ", ".join(OTHERS) + ")")
    ap.add_argument("--nranks", type=int, default=2,
                    help="ranks of every row (default 2; the 4-rank section runs with 2 only)")
    ap.add_argument("--tune", action="store_true",
                    help="run `gpucomm bench --tune` first (this host's runtime options, saved "
                         "for every later run here), as a user would")
    ap.add_argument("--no-peers", action="store_true",
                    help="gpucomm's runtime only (with --old-src: old against new, more rounds "
                         "in the same time)")
    args = ap.parse_args()
    args.only = args.only.split(",") if args.only else ["all_reduce", *OTHERS]
    bad = set(args.only) - {"all_reduce", *OTHERS}
    if bad:
        ap.error(f"--only {','.join(sorted(bad))}: allowed are all_reduce, {', '.join(OTHERS)}")
    _OLD_SRC = os.path.abspath(args.old_src) if args.old_src else None
    if not 2 <= args.nranks <= 64:
        ap.error(f"--nranks {args.nranks}: allowed are 2..64")
    if _OLD_SRC and not os.path.isdir(os.path.join(_OLD_SRC, "gpucomm")):
        ap.error(f"--old-src {args.old_src}: no gpucomm package there")
    return args


def main() -> int:
    args = parse_args()
    rounds = 2 if args.quick else args.rounds
    backends = (["shm"] if args.no_peers else available()) + (["shm-old"] if _OLD_SRC else [])
    missing = {"mpi", "gloo"} - set(backends)
    if missing:
        print(f"note: {', '.join(sorted(missing))} not run (not installed, or --no-peers); "
              f"their bars are skipped")
    verdicts = []
    if args.tune:
        done = subprocess.run([sys.executable, "-m", "gpucomm", "bench", "--tune"], text=True,
                              capture_output=True, env=dict(os.environ, PYTHONPATH=SRC))
        if done.returncode:
            sys.exit(f"gpucomm bench --tune failed: {done.stderr.strip()[-500:]}")
        print("== gpucomm bench --tune\n" + done.stdout.rstrip())
    found = tuned_file()
    print(f"== gpucomm runtime options: {current().describe()}"
          + (f"\n   ({found.note})" if found else "\n   (the defaults: no `gpucomm bench --tune` "
             "file for this host; --tune makes one first)"))
    sizes, a2a_sizes = sweep_sizes(args.quick)
    before = cross_core_handoff()
    plan = [("all_reduce", sizes)] + [(c, a2a_sizes if c == "all_to_all" else [16 * MiB])
                                      for c in OTHERS]
    times = measure(backends, [(c, s) for c, s in plan if c in args.only], rounds, args.nranks)
    after = cross_core_handoff()
    print(f"== this machine now: overwriting 512 KiB the other core has just read takes "
          f"{before[0]:.0f} us before the rounds, {after[0]:.0f} us after, "
          f"x{max(before[0], after[0]) / before[1]:.1f} a private copy ({before[1]:.0f} us); "
          f"gpucomm's staged sizes (chunks under {current().direct_min_bytes >> 10} KiB) slow "
          f"down with that ratio\n")

    if "all_reduce" in args.only:
        print_all_reduce(times, sizes, backends, rounds, verdicts, args.nranks)
    others = [c for c in OTHERS if c in args.only]
    if others:
        print_16mib(times, others, backends, rounds, verdicts, args.nranks)
    if "all_to_all" in args.only:
        print_a2a(times, a2a_sizes, backends, verdicts, args.nranks)
    if "shm-old" in backends:
        print_old_vs_new(times)
    if args.only == ["all_reduce", *OTHERS] and args.nranks == 2:
        four_ranks(verdicts)

    print(f"\n== bars (load average now {_load()}; 2 cores shared with other jobs)")
    for what, ok, detail in verdicts:
        print(f"  [{'PASS' if ok else 'FAIL'}] {what}" + (f"  ({detail})" if detail else ""))
    met = sum(ok for _, ok, _ in verdicts)
    print(f"{met}/{len(verdicts)} bars met")
    return 0 if met == len(verdicts) else 1


def print_all_reduce(times, sizes, backends, rounds, verdicts, nranks=2) -> None:
    print(f"== all_reduce, {nranks} ranks, float32 sum, {rounds} interleaved rounds; time in us "
          f"(best / median), busbw of the best in GB/s; ratio = peer time / shm time, best-of "
          f"(per-round min/median/max)")
    print(f"{'size':>10} " + " ".join(f"{b + ' us':>17} {b + ' busbw':>10}" for b in backends)
          + "   ratios")
    for s in sizes:
        ts = times[("all_reduce", s)]
        cols, ratios = [], []
        for b in backends:
            cols.append(f"{min(ts[b]):8.1f}/{statistics.median(ts[b]):8.1f} "
                        f"{busbw('all_reduce', s, min(ts[b]), nranks):10.2f}")
        for peer, bar in (("mpi", 1.5), ("gloo", 3.0)):
            if peer in backends:
                ratio, text = ratio_text(ts[peer], ts["shm"])
                ratios.append(f"{text} vs {peer}")
                if "shm-old" in backends:
                    ratios.append(f"shm-old {ratio_text(ts[peer], ts['shm-old'])[1]} vs {peer}")
                if s >= MiB:
                    verdicts.append((f"all_reduce {s >> 20} MiB busbw >= {bar}x {peer}",
                                     ratio >= bar, text))
        print(f"{s:>10} " + " ".join(cols) + "   " + ", ".join(ratios))
    if 8 in sizes:
        verdicts.append(small_verdict(times[("all_reduce", 8)], backends))


def print_16mib(times, colls, backends, rounds, verdicts, nranks=2) -> None:
    print(f"\n== 16 MiB, {nranks} ranks, {rounds} interleaved rounds: best (median) us, busbw "
          f"of the best")
    for coll in colls:
        s = 16 * MiB
        ts = times[(coll, s)]
        line = f"{coll + (' (in place)' if coll == 'broadcast' else ''):>26}: " + ", ".join(
            f"{b} {min(ts[b]):8.1f} ({statistics.median(ts[b]):8.1f}) us "
            f"{busbw(coll, s, min(ts[b]), nranks):5.2f} GB/s" for b in backends)
        if "mpi" in backends:
            ratio, text = ratio_text(ts["mpi"], ts["shm"])
            line += f"   {text} vs mpi"
            if "shm-old" in backends:
                line += f", shm-old {ratio_text(ts['mpi'], ts['shm-old'])[1]} vs mpi"
            verdicts.append((f"{coll} 16 MiB time <= mpi's", ratio >= 1.0, text))
        print(line)


def four_ranks(verdicts) -> None:
    print("\n== 4 ranks on this machine's cores: every collective, 1 MiB, shm")
    for coll in ["all_reduce", *OTHERS, "reduce", "gather", "scatter"]:
        try:
            rows = run_bench("shm", 4, coll, [MiB], iters=5, warmup=2, check=1)
            r = rows[0]
            ok = r["wrong"] == 0
            print(f"{coll:>15}: {r['time_us']:9.1f} us  busbw {r['busbw']:.2f} GB/s  "
                  f"algorithm {r['algorithm']}  #wrong {r['wrong']}")
        except Exception as e:  # report and count as a failed bar
            ok = False
            print(f"{coll:>15}: FAILED {e}")
        verdicts.append((f"4 ranks {coll} completes correctly", ok, ""))


if __name__ == "__main__":
    sys.exit(main())
