"""`gpucomm bench`: nccl-tests on real local processes (shm, MPICH or gloo), beside the
simulator's prediction for this host."""
from __future__ import annotations

import sys

from .common import (PLOT_SUFFIXES, add_format, output_file, positive_int, print_json,
                     size_arg, sweep_sizes)


def register(sub) -> None:
    p = sub.add_parser("bench", help="nccl-tests-style sweep on local processes",
                       description="Run a collective over N local ranks for a range of sizes "
                       "and print nccl-tests' table (out-of-place and in-place time, algbw, "
                       "busbw, #wrong) with the simulator's prediction for this host.")
    p.add_argument("--backend", choices=("shm", "mpi", "gloo", "torch"), default="shm",
                   help="gpucomm's shared-memory runtime (default); MPICH via mpi4py; "
                   "torch.distributed (gloo = torch). mpi and torch run the engine's own "
                   "collectives, or with --algorithm gpucomm's schedule over the engine")
    p.add_argument("-n", "--nranks", type=positive_int, default=2, help="ranks (default 2)")
    p.add_argument("-c", "--collective", default="all_reduce")
    p.add_argument("-b", "--minbytes", type=size_arg, default=size_arg("8"))
    p.add_argument("-e", "--maxbytes", type=size_arg, default=size_arg("64M"))
    p.add_argument("-f", "--stepfactor", type=float, default=2.0)
    p.add_argument("-i", "--stepbytes", type=size_arg, default=0)
    p.add_argument("-d", "--datatype", default="float32")
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("--algorithm", default="auto",
                   help="a registered gpucomm schedule (shm, torch, mpi); auto: shm's choice, "
                   "or the engine's own collectives for torch and mpi")
    p.add_argument("--iters", type=positive_int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--check", type=int, default=1, help="check results (1) or not (0)")
    p.add_argument("--timeout", type=float, default=None, help="per-collective timeout, s")
    p.add_argument("--plot", metavar="FILE.png", help="busbw against size, to a PNG")
    p.add_argument("--calibrate", action="store_true",
                   help="measure this host's memory bandwidth and latency for the prediction, "
                   "save it, and exit")
    add_format(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from ..bench import format_table, run_bench
    from ..bench.table import total_wrong
    from ..bench.predict import add_predictions, calibrate
    if args.calibrate:
        path, host = calibrate()
        print(f"saved {path}: copy {host['bandwidth_Bps'] / 1e9:.2f} GB/s per rank with all "
              f"cores busy, latency {host['latency_s'] * 1e6:.2f} us per call")
        return 0
    if args.plot:
        output_file(args.plot, "--plot", PLOT_SUFFIXES)
    sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    progress = _progress(len(sizes), args.format == "table")
    rows = run_bench(args.backend, args.nranks, args.collective, sizes, dtype=args.datatype,
                     op=args.op, root=args.root, algorithm=args.algorithm, iters=args.iters,
                     warmup=args.warmup, check=args.check, timeout=args.timeout,
                     on_row=progress.advance)
    progress.stop()
    note = add_predictions(rows, args.collective, args.nranks, args.algorithm)
    if args.format == "json":
        print_json(rows)
    else:
        print(format_table(rows, f"gpucomm bench --backend {args.backend}: {args.collective}, "
                                 f"{args.nranks} ranks, algorithm {rows[0]['algorithm'] if rows else '-'}"))
        if note:
            print(f"# predicted: {note}")
    if args.plot:
        from ..bench.plot import plot_rows
        plot_rows(rows, args.plot, f"{args.collective} on {args.nranks} ranks ({args.backend})")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 1 if total_wrong(rows) else 0


class _progress:
    """A rich progress bar on stderr for sweeps (only when stderr is a terminal)."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled and total > 1 and sys.stderr.isatty():
            from rich.progress import Progress
            self.bar = Progress(transient=True)
            self.bar.start()
            self.task = self.bar.add_task("sizes", total=total)

    def advance(self, row) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"{row['size']} B")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
