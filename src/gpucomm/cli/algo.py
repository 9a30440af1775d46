"""`gpucomm algo list | show | verify`: the algorithms, their schedules, their proofs."""
from __future__ import annotations

import time

from ..algorithms import algorithms, build, get_algorithm
from ..collectives import get_collective, layout
from ..dtypes import format_size
from ..errors import ConfigError, ScheduleError
from ..verify import verify
from .common import add_format, param_pairs, positive_int, print_json, size_arg


def register(sub) -> None:
    p = sub.add_parser("algo", help="list, show and verify collective algorithms")
    asub = p.add_subparsers(dest="algo_command", metavar="ACTION", required=True)

    lp = asub.add_parser("list", help="the algorithms per collective")
    add_format(lp)
    lp.set_defaults(func=cmd_list)

    sp = asub.add_parser("show", help="print a schedule, one step a line")
    sp.add_argument("algorithm")
    sp.add_argument("collective")
    sp.add_argument("--ranks", "-n", type=int, default=4)
    sp.add_argument("--root", type=int, default=0)
    sp.add_argument("--size", type=size_arg, default=1 << 20,
                    help="buffer size S in bytes as nccl-tests counts it (default 1M)")
    sp.add_argument("--dtype", "-d", default="float32")
    sp.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                    help="a builder parameter, e.g. -p channels=2 or -p group_size=4")
    add_format(sp)
    sp.set_defaults(func=cmd_show)

    rp = asub.add_parser("run", help="execute a schedule in-process on random data, check it")
    rp.add_argument("algorithm")
    rp.add_argument("collective")
    rp.add_argument("--ranks", "-n", type=int, default=4)
    rp.add_argument("--root", type=int, default=0)
    rp.add_argument("--size", type=size_arg, default=1 << 20, help="nccl-tests size S in bytes")
    rp.add_argument("--dtype", "-d", default="float32")
    rp.add_argument("--op", "-o", default="sum")
    rp.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    rp.add_argument("--seed", type=int, default=0)
    add_format(rp)
    rp.set_defaults(func=cmd_run)

    vp = asub.add_parser("verify", help="prove algorithms correct for many rank counts")
    vp.add_argument("algorithm", nargs="?", help="one algorithm (with --collective)")
    vp.add_argument("--collective", "-c")
    vp.add_argument("--all", action="store_true", help="every registered algorithm")
    vp.add_argument("--max-ranks", type=positive_int, default=17)
    add_format(vp)
    vp.set_defaults(func=cmd_verify)


def cmd_list(args) -> int:
    rows = [{"collective": a.collective, "algorithm": a.name,
             "params": {k: v for k, v in a.params}, "doc": a.doc} for a in algorithms()]
    if args.format == "json":
        print_json(rows)
        return 0
    from rich.console import Console
    from rich.table import Table
    table = Table("collective", "algorithm", "parameters", "what it does")
    for r in rows:
        table.add_row(r["collective"], r["algorithm"],
                      ", ".join(f"{k}={v}" for k, v in r["params"].items()), r["doc"])
    Console().print(table)
    return 0


SHOW_MAX_OPS = 1_000_000  # a schedule `algo show` prints (one step a line)


def cmd_show(args) -> int:
    if args.ranks < 1:
        raise ConfigError(f"--ranks must be >= 1, got {args.ranks}")
    sched = build(args.collective, args.algorithm, args.ranks, root=args.root,
                  **param_pairs(args.param))
    if not sched.ops_at_most(SHOW_MAX_OPS):
        raise ConfigError(f"{args.algorithm} {sched.collective.name} on {args.ranks} ranks has "
                          f"more than {SHOW_MAX_OPS:,} ops, too many to print: use fewer "
                          f"--ranks, or time it with `gpucomm sim`")
    lay = layout(sched.collective, args.size, args.dtype, args.ranks)
    sent = sched.bytes_sent(lay)
    if args.format == "json":
        d = sched.to_dict()
        d.update(size=lay.size, bytes_sent=sent.tolist())
        print_json(d)
        return 0
    print(sched)
    print(f"bytes sent per rank for S = {format_size(lay.size)} ({lay.size} B, {lay.dtype.name}):")
    for r, b in enumerate(sent):
        print(f"  rank {r}: {int(b)} B ({b / lay.size if lay.size else 0:.4f} × S)")
    return 0


def cmd_run(args) -> int:
    import numpy as np

    from .. import dtypes as dt
    from ..collectives import check_outputs
    from ..execute import execute
    if args.ranks < 1:
        raise ConfigError(f"--ranks must be >= 1, got {args.ranks}")
    sched = build(args.collective, args.algorithm, args.ranks, root=args.root,
                  **param_pairs(args.param))
    lay = layout(sched.collective, args.size, args.dtype, args.ranks)
    op = dt.check_op(args.op, lay.dtype) if sched.collective.reduces else args.op
    rng = np.random.default_rng(args.seed)
    ins = []
    for r in range(args.ranks):
        blocks = sched.collective.inputs(r, args.ranks, args.root)
        ins.append(None if blocks is None else
                   dt.random_array(rng, blocks[1] * lay.block_count, lay.dtype, op))
    t0 = time.perf_counter()
    outs = execute(sched, ins, op, lay.dtype)
    seconds = time.perf_counter() - t0
    try:
        check_outputs(sched.collective, outs, ins, op, lay.dtype, args.root)
        error = None
    except AssertionError as e:
        error = str(e)
    result = {"collective": sched.collective.name, "algorithm": sched.algorithm,
              "ranks": args.ranks, "size": lay.size, "count": lay.count, "type": lay.dtype.name,
              "redop": op, "steps": sched.nsteps, "ops": sched.nops, "seconds": seconds,
              "matches_reference": error is None, "error": error}
    if args.format == "json":
        print_json(result)
    else:
        print(f"{sched.algorithm} {sched.collective.name} on {args.ranks} ranks, "
              f"{lay.size} B {lay.dtype.name} {op}: {result['steps']} steps, {result['ops']} ops, "
              f"{seconds * 1e3:.1f} ms in-process; "
              + ("matches the numpy reference" if error is None else f"WRONG: {error}"))
    return 0 if error is None else 1


def cmd_verify(args) -> int:
    if args.algorithm:
        if not args.collective:
            raise ConfigError("give the collective with --collective when naming an algorithm")
        todo = [get_algorithm(args.collective, args.algorithm)]
    elif args.collective:
        todo = algorithms(get_collective(args.collective))
    elif args.all:
        todo = algorithms()
    else:
        raise ConfigError("say what to verify: an ALGORITHM with --collective, a --collective, "
                          "or --all")
    results, failed = [], 0
    for alg in todo:
        t0, ok, skipped, err = time.perf_counter(), 0, 0, None
        coll = get_collective(alg.collective)
        for p in range(1, args.max_ranks + 1):
            for root in _roots(coll, p):
                try:
                    sched = alg.build(p, root=root)
                except ScheduleError:
                    skipped += 1  # the builder says it cannot serve this rank count
                    continue
                try:
                    verify(sched)
                    ok += 1
                except ScheduleError as e:
                    err = f"{p} ranks, root {root}: {e}"
                    break
            if err:
                break
        failed += err is not None
        results.append({"collective": alg.collective, "algorithm": alg.name, "verified": ok,
                        "not_supported": skipped, "error": err,
                        "seconds": round(time.perf_counter() - t0, 3)})
    if args.format == "json":
        print_json({"max_ranks": args.max_ranks, "failed": failed, "results": results})
    else:
        for r in results:
            status = "FAIL " + r["error"] if r["error"] else "ok"
            extra = f", {r['not_supported']} unsupported" if r["not_supported"] else ""
            print(f"{r['collective']:>15} {r['algorithm']:<26} {r['verified']:>4} schedules "
                  f"verified{extra} ({r['seconds']:.2f} s)  {status}")
        print(f"{len(results) - failed}/{len(results)} algorithms verified for 1..{args.max_ranks}"
              f" ranks" + (f"; {failed} FAILED" if failed else ""))
    return 1 if failed else 0


def _roots(coll, p: int):
    """Roots worth proving: all of them for small P, a spread for larger P."""
    if not coll.rooted:
        return [0]
    return range(p) if p <= 8 else sorted({0, 1, p // 2, p - 1})
