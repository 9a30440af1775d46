"""`gpucomm sim`: predicted nccl-tests tables for a collective on a modelled cluster.

    gpucomm sim all_reduce_perf --system dgx-h100 --nodes 2 -b 8 -e 1G -f 4
    gpucomm sim --compare all_reduce_perf.log          # the log's own machine
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..collectives import get_collective
from ..dtypes import PREMULSUM, REDUCE_OPS, check_op, get_dtype
from ..bench.table import NCCL_TYPE
from ..errors import ConfigError
from ..report.data import beside_second_job
from ..outputs import write_text
from .topo import add_topology_args, topology_from_args
from ._nccltests import add_nccl_tests_args, nccl_tests_sizes, resolve, retire
from .common import (PLOT_SUFFIXES, add_format, add_select, html_arg, nccl_version_arg,
                     output_file, param_pairs, positive_int, print_json, seeds_arg, sweep_sizes)
from .progress import Progress

# the nccl-tests flags a prediction depends on (the others are accepted with a note)
SIM_EFFECTIVE = ("nthreads", "ngpus", "minbytes", "maxbytes", "stepbytes", "stepfactor", "op",
                 "datatype", "root", "cudagraph", "output_file")
HEADER = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "algorithm",
          "protocol")


def register(sub) -> None:
    p = sub.add_parser("sim", help="simulate a collective sweep on a modelled cluster",
                       description="Predict nccl-tests' table on a modelled cluster. An "
                       "nccl-tests command line pasted after `gpucomm sim` means what it "
                       "means to nccl-tests, e.g. `gpucomm sim all_reduce_perf -b 8 -e 1G "
                       "-f 2 -g 8`; the ranks are the cluster's GPUs (--system, --nodes).")
    add_nccl_tests_args(p, defaults={"minbytes": 8, "maxbytes": 1 << 30, "ngpus": None,
                                     "cudagraph": None, "datatype": "float32"},
                        effective=SIM_EFFECTIVE, where="a prediction")
    p.add_argument("--collective", default=None, help="the collective, when no TEST is given "
                   "(default all_reduce)")
    add_topology_args(p, nccl_tests=True)
    p.add_argument("--algorithm", default="auto")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a builder parameter of --algorithm, e.g. --param group_size=2 (as in "
                   "`gpucomm algo show`); hierarchical defaults to the topology's GPUs per node")
    p.add_argument("--protocol", default="auto", choices=("auto", "ll", "ll128", "simple"))
    add_select(p)
    p.add_argument("--sim-model", dest="model", default="analytic", choices=("analytic", "flow"),
                   help="the simulator: analytic (alpha-beta) or flow (link sharing)")
    retire(p, "--model")
    p.add_argument("--nccl-version", metavar="X.Y", default=None, type=nccl_version_arg,
                   help="model this NCCL release's tuning constants and algorithms "
                        "(e.g. 2.18; default: the newest)")
    p.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                   help="collectives replayed from CUDA graphs, as -G N > 0 (no host "
                        "launch cost; with --compare: the log's 'graph:')")
    p.add_argument("--compare", metavar="LOGFILE",
                   help="an nccl-tests log to predict row by row (its collective and machine "
                   "as `gpucomm doctor` reads them; flags given override, with a warning)")
    p.add_argument("--seeds", type=seeds_arg, metavar="N",
                   help="predict with fabric seeds 0..N-1 (ECMP hash, random placement, failed "
                   "cables) and print the median seed's row with the busbw spread")
    p.add_argument("--other-job", type=positive_int, default=None, metavar="NODES",
                   help="a second job on NODES more nodes of the fabric, placed by --placement "
                   "on the nodes the job leaves, running the same collective at the same "
                   "moment on groups shaped like the job (NODES // --nodes of them); the "
                   "job's time is raised by what sharing the cables costs it: a schedule's "
                   "two jobs timed as one run, NCCL's tree and nvls_tree at the job's slowest "
                   "tree edge under both jobs' connections (needs a fabric model)")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--trace", metavar="FILE.json", help="Chrome-trace JSON of the largest size")
    p.add_argument("--html", type=html_arg, metavar="FILE.html",
                   help="a self-contained HTML report: curves, "
                   "topology, link utilisation and timeline of the largest size")
    add_format(p)
    p.set_defaults(func=cmd_sim)


def cmd_sim(args) -> int:
    resolve(args, "gpucomm sim")
    _nccl_tests_meaning(args)
    _check_outputs(args)
    if args.other_job and (args.seeds or args.compare):
        raise ConfigError("--other-job does not combine with --seeds or --compare")
    if args.compare:
        return _compare(args, topology_from_args(args) if args.topology else None)
    from ..simulate.versions import parse_version
    args.nccl_version = parse_version(args.nccl_version, strict=True)
    t0, c0 = time.perf_counter(), time.process_time()
    job: list[int] = []
    second: list[list[int]] = []
    if args.other_job:
        topo, job, second = second_job_cluster(args)
    else:
        topo = topology_from_args(args)
    _check_threads(args, topo)
    t1, c1 = time.perf_counter(), time.process_time()
    coll = get_collective(args.collective or "all_reduce")
    if coll.reduces:
        check_op(_op(args), get_dtype(args.datatype))  # as bench and algo: no avg on integers
    nranks = len(job) or topo.nranks
    sizes = nccl_tests_sizes(coll.name, sweep_sizes(args.minbytes, args.maxbytes,
                             args.stepfactor, args.stepbytes), args.datatype, nranks)
    params = _builder_params(args, coll)
    if args.seeds:
        return _seeded(args, coll, params, sizes)
    from ..simulate.sweep import predict_sizes
    with Progress(len(sizes), "sizes") as bar:
        results = predict_sizes(coll, sizes, topo, **_options(args, coll, params),
                                ranks=job or None, on_size=lambda size: bar.advance(f"{size} B"))
    alone = [r.time_s for r in results]
    if second:
        from ..simulate.concurrent import with_second_job
        results = [with_second_job(r, topo, job, second, model=args.model) for r in results]
    if os.environ.get("GPUCOMM_SIM_TIMING"):  # benchmarks/sim_speed.py: where the time went
        print(f"gpucomm sim timing: topology {t1 - t0:.3f} s ({c1 - c0:.3f} CPU), prediction "
              f"{time.perf_counter() - t1:.3f} s ({time.process_time() - c1:.3f} CPU)",
              file=sys.stderr)
    rows: list[dict[str, Any]] = [dict(r.to_row()) for r in results]
    for row, t in zip(rows, alone):
        row["redop"] = args.op if coll.reduces else "none"
        if second:
            row["time_alone_us"] = round(t * 1e6, 3)  # as to_row rounds time_us
    doc = {"collective": coll.name, "topology": topo.name, "nranks": nranks,
           "model": args.model, "rows": rows}
    if second:
        doc["other_job"] = {"nodes": args.other_job, "groups": len(second)}
    if args.output_file:
        write_text(args.output_file, _json_text(doc))
    if args.format == "json":
        print_json(doc)
    else:
        print(f"# gpucomm sim: {coll.name} on {topo}{beside_second_job(doc)} ({args.model} model)")
        print(_table(rows))
        _print_second_job(args.other_job, len(second), nranks, rows)
    if args.plot:
        from ..report.plot import plot_sweep
        plot_sweep(rows, args.plot, title=f"{coll.name} on {topo.name}{beside_second_job(doc)}")
    if args.trace or args.html:
        _write_views(args, doc, topo, results)
    return 0


def _print_second_job(nodes: int | None, groups: int, nranks: int, rows) -> None:
    """--other-job's lines under the table: each size alone and with the second job."""
    if not groups:
        return
    print(f"# a second job on {nodes} nodes ({groups} group(s) shaped like the job's {nranks} "
          "ranks) runs the same collective at the same moment:")
    for r in rows:
        print(f"# {r['size']:>13} B: job alone on this cluster {r['time_alone_us']:.2f} us, "
              f"with the second job {r['time_us']:.2f} us "
              f"({r['time_us'] / r['time_alone_us'] - 1:+.1%})")


def second_job_cluster(args):
    """--other-job NODES: (the cluster of --nodes + NODES nodes, the job's ranks on its first
    --nodes nodes, the second job's groups shaped like the job on the rest); sim and tune."""
    job_nodes = args.nodes or 1
    if job_nodes < 2 or args.other_job < job_nodes:
        raise ConfigError(f"--other-job {args.other_job}: the second job runs the job's "
                          f"collective on groups of the job's {job_nodes} node(s), so it needs "
                          f"--nodes >= 2 and at least {job_nodes} nodes")
    args.nodes = job_nodes + args.other_job
    try:
        topo = topology_from_args(args)
    finally:
        args.nodes = job_nodes
    from ..simulate.concurrent import check_other_job, other_job_groups
    check_other_job(args.other_job, topo.network is not None, True)
    gpn = topo.gpus_per_node
    job = list(range(job_nodes * gpn))
    second = [list(g) for g in other_job_groups(tuple(job), job_nodes, args.other_job, gpn)]
    return topo, job, second


def _write_views(args, doc, topo, results) -> None:
    """--trace and --html of the largest size's run, as it was timed (simulate.timed)."""
    from ..simulate.timed import traced
    run = traced(results[-1])
    if args.trace:
        from ..report.trace import write_trace
        write_trace(run, args.trace, topo)
    if args.html:
        from ..report.html import write_html
        path = write_html(args.html, doc, args=args, topology=topo, sims=results, traced=run)
        print(f"wrote {path}", file=sys.stderr)


def _nccl_tests_meaning(args) -> None:
    """nccl-tests' flags as the prediction reads them: -r a rank, -G N > 0 graphs, the test's
    own algorithm (hypercube_perf)."""
    try:
        args.root = int(args.root, 0)
    except ValueError:
        raise ConfigError(f"-r/--root {args.root!r}: a rank number") from None
    if "cudagraph" in args.nccl_given:
        if args.cuda_graph is not None and args.cuda_graph != (args.cudagraph > 0):
            raise ConfigError(f"-G {args.cudagraph} and --{'' if args.cuda_graph else 'no-'}"
                              "cuda-graph disagree: give one")
        args.cuda_graph = args.cudagraph > 0
    if args.test_algorithm and args.algorithm == "auto":
        args.algorithm = args.test_algorithm


def _check_outputs(args) -> None:
    """The op and every output file, before any work."""
    if args.op not in (*REDUCE_OPS, PREMULSUM):
        raise ConfigError(f"unknown reduction op {args.op!r}: allowed are "
                          f"{', '.join(REDUCE_OPS)}, {PREMULSUM}")
    if args.plot:
        output_file(args.plot, "--plot", PLOT_SUFFIXES)
    if args.trace:
        output_file(args.trace, "--trace", (".json",))
    if args.output_file:
        output_file(args.output_file, "-J/--output_file", (".json",))


def _check_threads(args, topo) -> None:
    """-t × -g GPUs per process, as nccl-tests: the processes (mpirun -np) fill the nodes."""
    per_proc = (args.nthreads or 1) * (args.ngpus or 1)
    per_node = topo.nranks // max(len({topo.node_of(r) for r in range(topo.nranks)}), 1)
    if per_node % per_proc:
        raise ConfigError(f"-t {args.nthreads} x -g {args.ngpus or 1} = {per_proc} GPUs per "
                          f"process does not divide the {per_node} GPUs per node of {topo.name}"
                          ": give --gpus-per-node or other -t/-g")


def _json_text(doc) -> str:
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_json(doc)
    return buf.getvalue()


def _options(args, coll, params) -> dict:
    """predict()'s options, from the flags."""
    return dict(algorithm=args.algorithm, dtype=args.datatype, model=args.model,
                protocol=args.protocol, root=args.root if coll.rooted else 0, redop=_op(args),
                gpus_per_thread=args.ngpus or 1, cuda_graph=bool(args.cuda_graph),
                nccl_version=getattr(args, "nccl_version", None), select=args.select, **params)


def _op(args) -> str:
    """The reduction timed: nccl-tests' mulsum (NCCL's PreMulSum) moves and sums as sum does
    (NCCL scales each input as it loads it)."""
    return "sum" if args.op == PREMULSUM else args.op


def _seeded(args, coll, params, sizes) -> int:
    """--seeds N: one prediction per fabric seed; per size the median seed's row, with the
    busbw median, min and max over the seeds (hash collisions make it a distribution)."""
    from ..simulate.sweep import seeded_rows

    last: list = []

    def seeded(seed):  # one cluster at a time: each is dropped once predicted
        args.seed = seed
        last[:] = [topology_from_args(args)]
        return last[0]
    rows = seeded_rows(coll, sizes, map(seeded, range(args.seeds)), **_options(args, coll, params))
    topo = last[0]
    if args.format == "json":
        print_json({"collective": coll.name, "topology": topo.name, "nranks": topo.nranks,
                    "model": args.model, "seeds": args.seeds, "rows": rows})
        return 0
    print(f"# gpucomm sim: {coll.name} on {topo} ({args.model} model), fabric seeds "
          f"0..{args.seeds - 1}: the median seed's row")
    print(_table(rows))
    for r in rows:
        print(f"# {r['size']:>13} B: busbw over {args.seeds} seeds median "
              f"{r['busbw_median']:.2f}, min {r['busbw_min']:.2f}, max {r['busbw_max']:.2f} GB/s")
    return 0


def _builder_params(args, coll) -> dict:
    """--param NAME=VALUE pairs, checked against --algorithm's builder parameters."""
    params = param_pairs(getattr(args, "param", None) or [])
    if not params:
        return {}
    from ..simulate.nccl import CLOSED_FORMS
    if args.algorithm == "auto" or args.algorithm in CLOSED_FORMS:
        raise ConfigError(f"--param sets parameters of one algorithm: pass --algorithm NAME "
                          f"(not {args.algorithm})")
    from ..algorithms import get_algorithm
    accepted = [k for k, _ in get_algorithm(coll, args.algorithm).params]
    for k in params:
        if k not in accepted:
            raise ConfigError(f"{coll.name} {args.algorithm} has no parameter {k!r}: allowed "
                              f"are {', '.join(accepted) or 'none'}")
    return params


def _table(rows) -> str:
    lines = ["#" + "".join(f"{h:>13}" for h in HEADER[:5]) + f"{'time':>11}{'algbw':>9}"
             f"{'busbw':>9}  algorithm/protocol channels (runner-up)",
             "#" + "".join(f"{h:>13}" for h in ("(B)", "(elements)", "", "", "")) +
             f"{'(us)':>11}{'(GB/s)':>9}{'(GB/s)':>9}"]
    for r in rows:
        typ = NCCL_TYPE.get(r["type"], r["type"])  # as nccl-tests names it (-d float)
        lines.append(" " + f"{r['size']:>13}{r['count']:>13}{typ:>13}{r['redop']:>13}"
                     f"{r['root']:>13}{r['time_us']:>11.2f}{r['algbw']:>9.2f}{r['busbw']:>9.2f}"
                     f"  {r.get('reason') or r['algorithm'] + '/' + r['protocol']}")
    return "\n".join(lines)


# ---- --compare: nccl-tests logs, read and predicted by `gpucomm doctor`'s code ----------------
def parse_log(text: str) -> dict:
    """nccl-tests output -> {"collective", "nranks", "rows", "launch"} (interop.nccltests)."""
    from ..interop.nccltests import parse_log as parse
    log = parse(text)
    return {"collective": log.collective, "nranks": log.nranks, "rows": log.rows,
            "launch": log.launch}


def _compare(args, topo) -> int:
    """Predict a log row by row on the cluster the flags give (the log's own machine where
    they give none), warning where the flags contradict the log."""
    from ..interop.compare import compared
    from ..interop.doctor import diagnose
    from .doctor import request_of
    given = args.system or args.topology or args.nodes or args.nic or args.gpus_per_node
    req = request_of(_DoctorArgs(args), args.compare, topology=topo,
                     gpus_per_thread=args.ngpus, cuda_graph=args.cuda_graph)
    d = diagnose(req)
    for w in d.warnings:
        print(f"gpucomm sim: warning: {w}", file=sys.stderr)
    if not given:
        print(f"gpucomm sim: note: no --system given; using the log's machine ({d.label})",
              file=sys.stderr)
    doc = compared(d)
    out = doc["rows"]
    if args.html:
        from ..report.html import write_html
        from ..topology import build_topology
        drawn = topo if topo is not None else build_topology(**d.system)
        print(f"wrote {write_html(args.html, doc, args=args, topology=drawn)}", file=sys.stderr)
    if args.format == "json":
        print_json(doc)
        return 0
    print(f"# {d.collective}: measured ({Path(args.compare).name}) vs predicted on {d.label}")
    print(f"#{'size':>12} {'meas us':>10} {'pred us':>10} {'meas busbw':>11} {'pred busbw':>11}"
          f" {'error':>8}  choice")
    for r in out:
        e = "-" if r["busbw_error"] is None else f"{100 * r['busbw_error']:+.1f}%"
        print(f" {r['size']:>12} {r['measured_time_us']:>10.2f} {r['predicted_time_us']:>10.2f} "
              f"{r['measured_busbw']:>11.2f} {r['predicted_busbw']:>11.2f} {e:>8}  "
              f"{r['algorithm']}/{r['protocol']}")
    return 0


class _DoctorArgs:
    """sim's flags seen as doctor's: only what the user typed overrides the log."""

    def __init__(self, a):
        self.collective = a.collective if a.test or a.collective_given else None
        self.system, self.nodes, self.gpus_per_node = a.system, a.nodes, a.gpus_per_node
        self.nic, self.nics_per_node, self.model = a.nic, a.nics_per_node, a.model
        self.algorithm = None if a.algorithm == "auto" else a.algorithm
        self.protocol = a.protocol
        self.select = a.select
