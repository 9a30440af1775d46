"""`gpucomm sim`: predicted nccl-tests tables for a collective on a modelled cluster.

    gpucomm sim -c all_reduce --system dgx-h100 --nodes 2 -b 8 -e 1G -f 4
    gpucomm sim --compare all_reduce_perf.log --system dgx-h100 --nodes 2
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..collectives import get_collective
from ..dtypes import REDUCE_OPS
from ..errors import ConfigError
from .topo import add_topology_args, topology_from_args
from .progress import Progress
from .common import add_format, param_pairs, positive_int, print_json, size_arg, sweep_sizes

HEADER = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "algorithm",
          "protocol")


def register(sub) -> None:
    p = sub.add_parser("sim", help="simulate a collective sweep on a modelled cluster")
    p.add_argument("-c", "--collective", default="all_reduce")
    add_topology_args(p)
    p.add_argument("--algorithm", default="auto")
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                   help="a builder parameter of --algorithm, e.g. -p group_size=2 (as in "
                   "`gpucomm algo show`); hierarchical defaults to the topology's GPUs per node")
    p.add_argument("--protocol", default="auto", choices=("auto", "ll", "ll128", "simple"))
    p.add_argument("--model", default="analytic", choices=("analytic", "flow"))
    p.add_argument("-b", "--minbytes", type=size_arg, default=8)
    p.add_argument("-e", "--maxbytes", type=size_arg, default=1 << 30)
    p.add_argument("-f", "--stepfactor", type=float, default=2.0)
    p.add_argument("-d", "--datatype", default="float32")
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("--gpus-per-thread", type=positive_int, metavar="G",
                   help="GPUs one host thread drives, as nccl-tests -g (default 1; with "
                        "--compare: the log's nGpus); the host launches on each in turn")
    p.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                   help="collectives replayed from CUDA graphs, as nccl-tests -G (no host "
                        "launch cost; with --compare: the log's 'graph:')")
    p.add_argument("--compare", metavar="LOGFILE", help="an nccl-tests log to predict row by row")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--trace", metavar="FILE.json", help="Chrome-trace JSON of the largest size")
    add_format(p)
    p.set_defaults(func=cmd_sim)


def cmd_sim(args) -> int:
    from ..simulate import predict
    from ..simulate.core import size_sweep
    if args.op not in REDUCE_OPS:
        raise ConfigError(f"unknown reduction op {args.op!r}: allowed are {', '.join(REDUCE_OPS)}")
    topo = topology_from_args(args)
    if args.compare:
        return _compare(args, topo)
    coll = get_collective(args.collective)
    params = _builder_params(args, coll)
    sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor)
    results = []
    with size_sweep(sizes), Progress(len(sizes), "sizes") as bar:
        for size in sizes:
            results.append(predict(coll, size, topo, algorithm=args.algorithm,
                                   dtype=args.datatype, model=args.model,
                                   protocol=args.protocol, root=args.root if coll.rooted else 0,
                                   redop=args.op, gpus_per_thread=args.gpus_per_thread or 1,
                                   cuda_graph=bool(args.cuda_graph), **params))
            bar.advance(f"{size} B")
    rows = [r.to_row() for r in results]
    if not coll.reduces:
        for row in rows:
            row["redop"] = "none"
    if args.format == "json":
        print_json({"collective": coll.name, "topology": topo.name, "nranks": topo.nranks,
                    "model": args.model, "rows": rows})
    else:
        print(f"# gpucomm sim: {coll.name} on {topo} ({args.model} model)")
        print(_table(rows))
    if args.plot:
        from ..report.plot import plot_sweep
        plot_sweep(rows, args.plot, title=f"{coll.name} on {topo.name}")
    if args.trace:
        from ..report.trace import write_trace
        write_trace(_traced(coll, sizes[-1], topo, args, results[-1]), args.trace, topo)
    return 0


def _builder_params(args, coll) -> dict:
    """-p NAME=VALUE pairs, checked against --algorithm's builder parameters."""
    params = param_pairs(getattr(args, "param", None) or [])
    if not params:
        return {}
    if args.algorithm in ("auto", "nvls"):
        raise ConfigError(f"-p/--param sets parameters of one algorithm: pass --algorithm NAME "
                          f"(not {args.algorithm})")
    from ..algorithms import get_algorithm
    accepted = [k for k, _ in get_algorithm(coll, args.algorithm).params]
    for k in params:
        if k not in accepted:
            raise ConfigError(f"{coll.name} {args.algorithm} has no parameter {k!r}: allowed "
                              f"are {', '.join(accepted) or 'none'}")
    return params


def _traced(coll, size, topo, args, res):
    from ..algorithms import build
    from ..simulate import simulate
    if res.algorithm == "nvls":
        return res
    from ..algorithms import get_algorithm
    kw = _builder_params(args, coll) if res.algorithm == args.algorithm else {}
    accepted = [k for k, _ in get_algorithm(coll, res.algorithm).params]
    if "channels" in accepted and "channels" not in kw:
        kw["channels"] = max(res.channels, 1)
    g = topo.gpus_per_node
    if "group_size" in accepted and "group_size" not in kw and 1 <= g < topo.nranks \
            and topo.nranks % g == 0:
        kw["group_size"] = g  # as predict() builds it
    sched = build(coll, res.algorithm, topo.nranks, root=args.root if coll.rooted else 0, **kw)
    return simulate(sched, topo, size, dtype=args.datatype, model=args.model,
                    protocol=res.protocol, trace=True)


def _table(rows) -> str:
    lines = ["#" + "".join(f"{h:>13}" for h in HEADER[:5]) + f"{'time':>11}{'algbw':>9}"
             f"{'busbw':>9}  {'algorithm':<28}{'protocol'}",
             "#" + "".join(f"{h:>13}" for h in ("(B)", "(elements)", "", "", "")) +
             f"{'(us)':>11}{'(GB/s)':>9}{'(GB/s)':>9}"]
    for r in rows:
        lines.append(" " + f"{r['size']:>13}{r['count']:>13}{r['type']:>13}{r['redop']:>13}"
                     f"{r['root']:>13}{r['time_us']:>11.2f}{r['algbw']:>9.2f}{r['busbw']:>9.2f}"
                     f"  {r['algorithm']:<28}{r['protocol']}")
    return "\n".join(lines)


# ---- --compare: nccl-tests logs -----------------------------------------------------------
_RANKS = re.compile(r"#\s+Rank\s+\d+\s+Group")


def parse_log(text: str) -> dict:
    """nccl-tests output -> {"collective", "nranks", "rows": [{size, count, type, redop, root,
    time_us, algbw, busbw}], "launch": {gpus_per_thread, cuda_graph} as the header gives them},
    from the out-of-place columns. Raises ConfigError if no rows."""
    rows, coll, nranks, launch = [], None, 0, {}
    for line in text.splitlines():
        if _RANKS.search(line):
            nranks += 1
        g = re.search(r"nGpus\s+(\d+)", line)
        if g and "gpus_per_thread" not in launch:
            launch["gpus_per_thread"] = int(g.group(1))
        g = re.search(r"\bgraph:\s*(\d+)", line)
        if g and "cuda_graph" not in launch:
            launch["cuda_graph"] = int(g.group(1)) > 0
        m = re.search(r"(\w+?)_perf", line) or re.search(r"concluded:\s*(\w+)", line)
        if m and coll is None:
            coll = m.group(1)
        if line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 8 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        try:
            size, count = int(parts[0]), int(parts[1])
            typ, redop = parts[2], parts[3]
            rest = parts[4:]
            root = -1
            if len(rest) >= 4 and re.fullmatch(r"-?\d+", rest[0]):
                root, rest = int(rest[0]), rest[1:]
            time_us, algbw, busbw = float(rest[0]), float(rest[1]), float(rest[2])
        except (ValueError, IndexError):
            continue
        rows.append({"size": size, "count": count, "type": typ, "redop": redop, "root": root,
                     "time_us": time_us, "algbw": algbw, "busbw": busbw})
    if not rows:
        raise ConfigError("no nccl-tests result rows found in the log (expected lines like "
                          "'  1048576  262144  float  sum  -1  12.3  85.2  149.1  0 ...')")
    return {"collective": coll, "nranks": nranks, "rows": rows, "launch": launch}


def _compare(args, topo) -> int:
    from ..simulate import predict
    path = Path(args.compare)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read log {str(path)!r}: {e.strerror}") from None
    log = parse_log(text)
    coll = get_collective(log["collective"] or args.collective)
    params = _builder_params(args, coll)
    if log["nranks"] and log["nranks"] != topo.nranks:
        print(f"# note: the log has {log['nranks']} ranks, the topology {topo.nranks}",
              file=sys.stderr)
    launch = {"gpus_per_thread": args.gpus_per_thread or log["launch"].get("gpus_per_thread", 1),
              "cuda_graph": args.cuda_graph if args.cuda_graph is not None
              else log["launch"].get("cuda_graph", False)}
    out = []
    for row in log["rows"]:
        res = predict(coll, row["size"], topo, algorithm=args.algorithm,
                      dtype=_dtype(row["type"]), model=args.model, protocol=args.protocol,
                      **launch, **params)
        err = (res.busbw_GBps - row["busbw"]) / row["busbw"] if row["busbw"] > 0 else None
        out.append({"size": row["size"], "measured_time_us": row["time_us"],
                    "predicted_time_us": round(res.time_us, 3), "measured_busbw": row["busbw"],
                    "predicted_busbw": round(res.busbw_GBps, 3),
                    "busbw_error": None if err is None else round(err, 4),
                    "time_ratio": round(res.time_us / row["time_us"], 4) if row["time_us"] else None,
                    "algorithm": res.algorithm, "protocol": res.protocol})
    if args.format == "json":
        print_json({"collective": coll.name, "topology": topo.name, "rows": out})
        return 0
    print(f"# {coll.name}: measured ({path.name}) vs predicted on {topo}")
    print(f"#{'size':>12} {'meas us':>10} {'pred us':>10} {'meas busbw':>11} {'pred busbw':>11}"
          f" {'error':>8}  choice")
    for r in out:
        e = "-" if r["busbw_error"] is None else f"{100 * r['busbw_error']:+.1f}%"
        print(f" {r['size']:>12} {r['measured_time_us']:>10.2f} {r['predicted_time_us']:>10.2f} "
              f"{r['measured_busbw']:>11.2f} {r['predicted_busbw']:>11.2f} {e:>8}  "
              f"{r['algorithm']}/{r['protocol']}")
    return 0


def _dtype(name: str) -> str:
    return {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
            "int": "int32", "int8": "int8", "uint8": "uint8", "int32": "int32",
            "int64": "int64"}.get(name, name)
