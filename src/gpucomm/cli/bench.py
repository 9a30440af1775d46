"""`gpucomm bench`: nccl-tests on real local processes (shm, MPICH or gloo), beside the
simulator's prediction for this host."""
from __future__ import annotations

import sys

from ..dtypes import DTYPES, PREMULSUM, REDUCE_OPS
from ..errors import ConfigError
from ..bench.table import TIME_STRING_FORMAT
from ..outputs import write_text
from ._nccltests import add_nccl_tests_args, nccl_tests_sizes, resolve
from .common import PLOT_SUFFIXES, add_format, html_arg, output_file, positive_int, print_json, \
    sweep_sizes


# nccl-tests flags that change what CPU ranks do or print (the others: accepted, with a note)
BENCH_EFFECTIVE = ("nthreads", "ngpus", "minbytes", "maxbytes", "stepbytes", "stepfactor",
                   "iters", "agg_iters", "warmup", "run_cycles", "check", "op", "datatype", "root",
                   "blocking", "timeout", "cudagraph", "report_cputime", "report_timestamps",
                   "output_file", "average")


def register(sub) -> None:
    p = sub.add_parser("bench", help="nccl-tests-style sweep on local processes",
                       description="Run a collective over N local ranks for a range of sizes "
                       "and print nccl-tests' table (out-of-place and in-place time, algbw, "
                       "busbw, #wrong) with the simulator's prediction for this host.")
    p.add_argument("--backend", choices=("shm", "mpi", "gloo", "torch"), default="shm",
                   help="gpucomm's shared-memory runtime (default); MPICH via mpi4py; "
                   "torch.distributed (gloo = torch). mpi and torch run the engine's own "
                   "collectives, or with --algorithm gpucomm's schedule over the engine")
    add_nccl_tests_args(p, defaults={"minbytes": 8, "maxbytes": 64 << 20, "warmup": 5,
                                     "nthreads": None, "ngpus": None},
                        effective=BENCH_EFFECTIVE, where="CPU ranks")
    p.add_argument("--nranks", "--ranks", type=positive_int, default=None,
                   help="local ranks (default: -t × -g, or 2 when neither is given)")
    p.add_argument("--collective", default=None, help="the collective, when no TEST is given "
                   "(default all_reduce)")
    p.add_argument("--algorithm", default="auto",
                   help="a registered gpucomm schedule or an MSCCL FILE.xml (shm, torch, mpi); "
                   "auto: shm's choice, or the engine's own collectives for torch and mpi")
    p.add_argument("--plot", metavar="FILE.png", help="busbw against size, to a PNG")
    p.add_argument("--html", type=html_arg, metavar="FILE.html",
                   help="a self-contained HTML report: measured against predicted, per size")
    p.add_argument("--calibrate", action="store_true",
                   help="measure this host's memory bandwidth and latency for the prediction, "
                   "save it, and exit")
    p.add_argument("--tune", nargs="?", const="full", choices=("full", "quick"),
                   help="time the runtime's cache-dependent options (reduction piece, direct "
                   "threshold) on 2 ranks here, save the fastest for every later run on this "
                   "host (~/.cache/gpucomm/runtime.yaml, GPUCOMM_RUNTIME_YAML), and exit; "
                   "full: about 25 s, quick: 4 MiB only")
    add_format(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from ..bench import bench_collective
    resolve(args, "gpucomm bench")
    if args.test_algorithm and args.algorithm == "auto":
        args.algorithm = args.test_algorithm  # hypercube_perf
    from ..bench.table import total_wrong
    from ..bench.hostcal import calibrate
    if args.calibrate:
        path, host = calibrate()
        print(f"saved {path}: copy {host['bandwidth_Bps'] / 1e9:.2f} GB/s per rank with all "
              f"cores busy, latency {host['latency_s'] * 1e6:.2f} us per call")
        return 0
    if args.tune:
        from ..bench import tune_runtime
        print(tune_runtime.report(*tune_runtime.tune(quick=args.tune == "quick",
                                                     log=tune_runtime.progress)))
        return 0
    if args.plot:
        output_file(args.plot, "--plot", PLOT_SUFFIXES)
    nranks = _nranks(args)
    coll = bench_collective(args.collective)
    schedule = _xml_schedule(args, coll, nranks)
    sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    runs = _runs(args, coll, nranks)
    if args.run_cycles == 0:
        raise ConfigError("-N 0 (run until interrupted) is not supported: bench prints its table "
                          "when the sweep ends; give a number of cycles")
    if args.output_file:
        output_file(args.output_file, "-J/--output_file", (".json",))
    progress = _progress(len(sizes) * len(runs) * args.run_cycles, args.format == "table")
    rows, notes = _sweep(args, coll, nranks, sizes, runs, schedule, progress)
    progress.stop()
    algorithm = rows[0]["algorithm"] if rows else "-"
    doc = {"collective": coll.name, "nranks": nranks, "backend": args.backend,
           "algorithm": algorithm, "rows": rows}
    if args.output_file:
        from .sim import _json_text
        write_text(args.output_file, _json_text(doc))
    if args.format == "json":
        print_json(doc)
    else:
        print(_log(args, coll, nranks, rows, algorithm, next((n for n in notes if n), None)))
    if args.plot:
        from ..bench.plot import plot_rows
        plot_rows(rows, args.plot, f"{coll.name} on {nranks} ranks ({args.backend})")
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.html:
        from ..report.html import write_html
        print(f"wrote {write_html(args.html, doc, args=args)}", file=sys.stderr)
    return 1 if total_wrong(rows) else 0


def _sweep(args, coll, nranks, sizes, runs, schedule, progress) -> tuple[list, list]:
    """Rows of every (dtype, op, root) sweep, -N times each, as nccl-tests' loops; the notes
    of the predictions beside them."""
    import time

    from ..bench import run_bench
    from ..bench.plancost import add_predictions

    def on_row(row):
        if args.report_timestamps:
            row["timestamp"] = time.strftime(TIME_STRING_FORMAT)
        progress.advance(row)

    rows, notes = [], []
    for dtype, op, root in runs:  # nccl-tests' -d all / -o all / -r all: one sweep each
        part = []
        for _ in range(args.run_cycles):  # -N: the sweep again, rows printed each time
            part += run_bench(args.backend, nranks, coll.name,
                              nccl_tests_sizes(coll.name, sizes, dtype, nranks), dtype=dtype, op=op,
                              root=root, algorithm=args.algorithm, iters=args.iters,
                              warmup=args.warmup, check=args.check, timeout=args.timeout,
                              on_row=on_row, agg_iters=args.agg_iters, average=args.average,
                              blocking=args.blocking, schedule=schedule)
        if schedule is not None:  # rows name the file's schedule as registered (predictions)
            from ..bench.sweep import register_fixed
            for r in part:
                r["algorithm"] = register_fixed(schedule)
        notes.append(add_predictions(part, coll.name, nranks,
                                     part[0]["algorithm"] if schedule and part else
                                     args.algorithm))
        rows += part
    return rows, notes


def _xml_schedule(args, coll, nranks):
    """--algorithm FILE.xml: the MSCCL file as a proven schedule of this collective and size."""
    if not args.algorithm.lower().endswith(".xml"):
        return None
    from ..verify import verify
    from .algo import _read_xml
    sched = verify(_read_xml(args.algorithm))
    if sched.collective != coll:
        raise ConfigError(f"{args.algorithm} is a {sched.collective.name} algorithm: give "
                          f"--collective {sched.collective.name}")
    if sched.nranks != nranks:
        raise ConfigError(f"{args.algorithm} is for {sched.nranks} ranks: give --nranks "
                          f"{sched.nranks} (or -g {sched.nranks})")
    if args.root not in ("0", str(sched.root)):
        raise ConfigError(f"{args.algorithm} has root {sched.root}; -r must be {sched.root}")
    return sched


def _runs(args, coll, nranks) -> list:
    """(dtype, op, root) of each sweep: nccl-tests' -d all / -o all / -r all loop over them,
    skipping the pairs the dtype cannot reduce with."""
    every = [d for d in DTYPES if getattr(args, "backend", "shm") not in ("torch", "gloo")
             or not (d.startswith(("uint", "f8")) and d != "uint8")]  # torch: no uint32/64, fp8
    runs = [(d, o, r) for d in _all(args.datatype, every) for o in
            (_all(args.op, (*REDUCE_OPS, PREMULSUM)) if coll.reduces else [args.op])
            for r in (range(nranks) if args.root == "all" and coll.rooted else [_root(args)])]
    if coll.reduces and "all" in (args.datatype, args.op):
        runs = [x for x in runs if _supported(x[0], x[1])] or runs  # as -o all skips them
    return runs


def _supported(dtype: str, op: str) -> bool:
    from ..dtypes import check_op, get_dtype
    try:
        check_op("sum" if op == PREMULSUM else op, get_dtype(dtype))
        return True
    except ConfigError:
        return False


def _nranks(args) -> int:
    t, g = args.nthreads, args.ngpus
    if t is None and g is None:
        return args.nranks or 2
    n = (t or 1) * (g or 1)
    if args.nranks is not None and args.nranks != n:
        raise ConfigError(f"--nranks {args.nranks} disagrees with -t {t or 1} × -g {g or 1} = "
                          f"{n}: give one or the other")
    return n


def _all(value: str, every) -> list:
    return list(every) if value == "all" else [value]


def _root(args) -> int:
    try:
        return int(args.root)
    except ValueError:
        raise ConfigError(f"-r/--root {args.root!r}: a rank number or all") from None


def _log(args, coll, nranks, rows, algorithm, note) -> str:
    """The run as nccl-tests prints it, gpucomm's prediction in comment lines after it."""
    import socket

    from ..bench.table import format_log
    host = socket.gethostname().split(".")[0] or "localhost"
    devices = [(r, host, r, "cpu", f"CPU rank ({args.backend})", 0) for r in range(nranks)]
    comments = []
    if any(r.get("predicted_time_us") is not None for r in rows):
        comments.append(f"gpucomm prediction for this host: {note}" if note else
                        "gpucomm prediction for this host")
        comments += [f"  predicted {r['size']:>12} B {r['type']:>9}: "
                     f"{r['predicted_time_us']:10.2f} us" for r in rows
                     if r.get("predicted_time_us") is not None]
    from .. import __version__
    step = f"{args.stepbytes}(bytes)" if args.stepbytes else f"{args.stepfactor:g}(factor)"
    return format_log(rows, test=("alltoall" if coll.name == "all_to_all" else coll.name)
                      + "_perf", devices=devices, nthread=args.nthreads or 1,
                      ngpus=args.ngpus or 1, minbytes=args.minbytes, maxbytes=args.maxbytes,
                      step=step, warmup=args.warmup, iters=args.iters,
                      agg_iters=args.agg_iters, validation=args.check, graph=args.cudagraph,
                      blocking=args.blocking, version=f"gpucomm={__version__} "
                      f"backend={args.backend}", cputime=bool(args.report_cputime),
                      timestamps=bool(args.report_timestamps), comments=tuple(comments),
                      settings=_settings(args),
                      title=f"gpucomm bench --backend {args.backend}: {coll.name}, {nranks} "
                      f"ranks, algorithm {algorithm} (nccl-tests' output format)")


def _settings(args) -> tuple:
    """The runtime options the ranks run with (shm: they read the same environment)."""
    if args.backend != "shm":
        return ()
    from ..runtime.options import current, tuned_file
    found = tuned_file()
    return (f"gpucomm runtime options: {current().describe()}",) + \
        ((f"gpucomm runtime options {found.note}",) if found else ())


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
