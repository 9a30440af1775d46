"""`gpucomm algo list | show | run | verify | export | import`: the algorithms, their schedules,
their proofs, and MSCCL algorithm files out and in (`show`/`run` also take FILE.xml)."""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from ..algorithms import algorithms, build, get_algorithm
from ..collectives import get_collective, layout
from ..dtypes import format_size
from ..inputs import read_text
from ..errors import ConfigError, ScheduleError
from ..limits import (MAX_EXECUTE_BYTES, MAX_SCHEDULE_RANKS, MAX_VERIFY_RANKS, check_host_memory,
                      check_ranks)
from ..verify import prove_builder, verify
from ..outputs import write_text
from ._nccltests import retire
from .common import (add_format, int_arg, name_arg, param_pairs, positive_int, print_json,
                     size_arg)
from .topo import add_topology_args, topology_from_args


def register(sub) -> None:
    p = sub.add_parser("algo", help="list, show and verify collective algorithms")
    asub = p.add_subparsers(dest="algo_command", metavar="ACTION", required=True)

    lp = asub.add_parser("list", help="the algorithms per collective")
    add_format(lp)
    lp.set_defaults(func=cmd_list)

    sp = asub.add_parser("show", help="print a schedule, one step a line")
    sp.add_argument("algorithm")
    sp.add_argument("collective")
    sp.add_argument("--ranks", type=int_arg, default=4)
    sp.add_argument("--root", type=int_arg, default=0)
    sp.add_argument("--size", type=size_arg, default=1 << 20,
                    help="buffer size S in bytes as nccl-tests counts it (default 1M)")
    sp.add_argument("--dtype", "--datatype", "-d", dest="datatype", default="float32")
    sp.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a builder parameter, e.g. --param channels=2 or --param group_size=4")
    retire(sp, "-n", "-p")
    add_format(sp)
    sp.set_defaults(func=cmd_show)

    rp = asub.add_parser("run", help="execute a schedule in-process on random data, check it")
    rp.add_argument("algorithm")
    rp.add_argument("collective")
    rp.add_argument("--ranks", type=int_arg, default=4)
    rp.add_argument("--root", type=int_arg, default=0)
    rp.add_argument("--size", type=size_arg, default=1 << 20, help="nccl-tests size S in bytes")
    rp.add_argument("--dtype", "--datatype", "-d", dest="datatype", default="float32")
    rp.add_argument("--op", "-o", default="sum")
    rp.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    retire(rp, "-n", "-p")
    rp.add_argument("--seed", type=int_arg, default=0)
    add_format(rp)
    rp.set_defaults(func=cmd_run)

    ep = asub.add_parser("export", help="write a schedule as an MSCCL algorithm file (XML)",
                         description="A registered schedule, or (with --system/--topology) "
                         "what `gpucomm sim` times for --size on that cluster: ALGORITHM may "
                         "then be auto or an NCCL name; the protocol, channels and ring orders "
                         "are the timed run's.")
    ep.add_argument("algorithm")
    ep.add_argument("collective")
    ep.add_argument("--size", type=size_arg, default=None,
                    help="with --system/--topology: the size whose prediction is exported "
                         "(default 64M)")
    ep.add_argument("--ranks", type=positive_int, default=4)
    ep.add_argument("--root", type=int, default=0)
    ep.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    ep.add_argument("--format", choices=("msccl-xml",), default="msccl-xml")
    ep.add_argument("--protocol", choices=("ll", "ll128", "simple"), default=None,
                    help="default: simple; with --system, the timed run's")
    ep.add_argument("--min-bytes", type=size_arg, default=0, help="size range it is for")
    ep.add_argument("--max-bytes", type=size_arg, default=None)
    ep.add_argument("--out-of-place", action="store_true",
                    help="copy the input into the output first and never write the input, so "
                    "MSCCL uses the file for out-of-place calls too (default: in-place only)")
    ep.add_argument("--output", type=name_arg, metavar="FILE.xml",
                    help="default: standard output")
    add_topology_args(ep)
    retire(ep, "-n", "-p", "-o")
    ep.set_defaults(func=cmd_export)

    ip = asub.add_parser("import", help="read an MSCCL algorithm file: verify, simulate, run")
    ip.add_argument("file", metavar="FILE.xml")
    ip.add_argument("--system", "-s", type=name_arg, default="dgx-h100",
                    help="preset to simulate it on")
    ip.add_argument("--nodes", type=positive_int, default=None,
                    help="nodes (default: enough for the file's ranks)")
    ip.add_argument("--size", type=size_arg, default=None, help="nccl-tests size S to "
                    "simulate (default: 64M, or the nearest size of the file's minBytes.."
                    "maxBytes)")
    ip.add_argument("--output", type=name_arg, metavar="FILE.json",
                    help="save the gpucomm schedule")
    retire(ip, "-N", "-o")
    add_format(ip)
    ip.set_defaults(func=cmd_import)

    vp = asub.add_parser("verify", help="prove algorithms correct for many rank counts")
    vp.add_argument("algorithm", nargs="?", help="one algorithm (with --collective)")
    vp.add_argument("--collective")
    retire(vp, "-c")
    vp.add_argument("--all", action="store_true", help="every registered algorithm")
    vp.add_argument("--max-ranks", type=positive_int, default=17,
                    help=f"prove 1..N ranks (at most {MAX_VERIFY_RANKS})")
    add_format(vp)
    vp.set_defaults(func=cmd_verify)


def cmd_list(args) -> int:
    rows: list[dict[str, Any]] = [{"collective": a.collective, "algorithm": a.name,
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
    check_ranks(args.ranks, MAX_SCHEDULE_RANKS, "--ranks")
    sched = _schedule_of(args)
    if not sched.ops_at_most(SHOW_MAX_OPS):
        raise ConfigError(f"{args.algorithm} {sched.collective.name} on {args.ranks} ranks has "
                          f"more than {SHOW_MAX_OPS:,} ops, too many to print: use fewer "
                          f"--ranks, or time it with `gpucomm sim`")
    lay = layout(sched.collective, args.size, args.datatype, sched.nranks)
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
    check_ranks(args.ranks, MAX_SCHEDULE_RANKS, "--ranks")
    sched = _schedule_of(args)
    args.ranks, args.root = sched.nranks, sched.root
    if args.algorithm.lower().endswith(".xml"):   # as algo import: prove it, then run it
        check_ranks(sched.nranks, MAX_SCHEDULE_RANKS, f"{args.algorithm}: ngpus")
        try:
            verify(sched)
        except ScheduleError as e:
            raise ScheduleError(f"{args.algorithm} is not a correct {sched.collective.name} "
                                f"(not run; `gpucomm algo verify` shows the proof): {e}") from None
    lay = layout(sched.collective, args.size, args.datatype, args.ranks)
    op = dt.check_op(args.op, lay.dtype) if sched.collective.reduces else args.op
    total = args.ranks * lay.size
    if total > MAX_EXECUTE_BYTES:
        raise ConfigError(f"algo run on {args.ranks} ranks of {lay.size} B is {total} B of "
                          f"buffers, more than the in-process checker's limit of "
                          f"{MAX_EXECUTE_BYTES >> 20} MiB (gpucomm bench runs large sizes)")
    # inputs, outputs, the reference and the executor's copies: about 6 buffers of S per rank
    check_host_memory(6 * total, f"algo run on {args.ranks} ranks of {lay.size} B")
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
    if args.algorithm and args.algorithm.lower().endswith(".xml"):
        return _verify_file(args)
    check_ranks(args.max_ranks, MAX_VERIFY_RANKS, "--max-ranks")
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
    results = [dataclasses.asdict(prove_builder(alg, args.max_ranks)) for alg in todo]
    failed = sum(r["error"] is not None for r in results)
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


def _verify_file(args) -> int:
    """`algo verify FILE.xml`: prove an MSCCL file (one rank count: the file's)."""
    sched = _read_xml(args.algorithm)
    t0 = time.perf_counter()
    try:
        verify(sched)
        err = None
    except ScheduleError as e:
        err = str(e)
    r = {"file": args.algorithm, "collective": sched.collective.name, "nranks": sched.nranks,
         "verified": err is None, "error": err, "seconds": round(time.perf_counter() - t0, 3)}
    if args.format == "json":
        print_json(r)
    else:
        print(f"{args.algorithm}: {sched.collective.name} on {sched.nranks} ranks "
              + ("verified" if err is None else f"FAIL {err}"))
    return 0 if err is None else 1


def _schedule_of(args):
    """The schedule `show`/`run` name: a registered ALGORITHM COLLECTIVE, or an MSCCL FILE.xml
    (then COLLECTIVE must be the file's)."""
    if not args.algorithm.lower().endswith(".xml"):
        return build(args.collective, args.algorithm, args.ranks, root=args.root,
                     **param_pairs(args.param))
    sched = _read_xml(args.algorithm)
    if get_collective(args.collective) != sched.collective:
        raise ConfigError(f"{args.algorithm} is a {sched.collective.name} algorithm, not "
                          f"{get_collective(args.collective).name}")
    return sched


def _read_xml(path):
    from pathlib import Path

    from ..interop.msccl import from_msccl_xml
    text = read_text(path, "MSCCL algorithm file")
    pair = _send_recv_pair(path, text)
    try:
        if pair:
            from ..interop.msccl_p2p import from_msccl_send_recv
            return from_msccl_send_recv(*pair, name=Path(path).stem.rsplit(".", 1)[0])
        return from_msccl_xml(text, name=Path(path).stem)
    except ScheduleError as e:
        raise ScheduleError(f"{path}: {e}") from None


def _send_recv_pair(path, text):
    """(send text, recv text) when `path` is one of the two files of a sendrecv, else None."""
    import re
    m = re.search(r'\bcoll="(send|recv)"', text[:2000])
    if not m:
        return None
    other = "recv" if m.group(1) == "send" else "send"
    partner = re.sub(rf"\.{m.group(1)}\.xml$", f".{other}.xml", str(path))
    if partner == str(path):
        raise ConfigError(f"{path} is the {m.group(1)} half of a sendrecv: name the pair "
                          "NAME.send.xml and NAME.recv.xml, as `gpucomm algo export` does")
    texts = {m.group(1): text, other: read_text(partner, "MSCCL algorithm file")}
    return texts["send"], texts["recv"]


def cmd_export(args) -> int:
    from ..interop.msccl import executor_problems, to_msccl_xml
    if args.max_bytes is not None and args.max_bytes < args.min_bytes:
        raise ConfigError(f"--min-bytes {args.min_bytes} .. --max-bytes {args.max_bytes} is an "
                          "empty byte range: give --max-bytes >= --min-bytes")
    protocol = args.protocol or "simple"
    if args.system or args.topology:  # what sim timed on that cluster, as it was timed
        from ..interop.msccl import timed_schedule
        from ..simulate import predict
        res = predict(args.collective, args.size or (64 << 20), topology_from_args(args),
                      algorithm=args.algorithm, protocol=args.protocol or "auto",
                      root=args.root, **param_pairs(args.param))
        sched, protocol = timed_schedule(res), res.protocol
        print(f"gpucomm algo export: {res.reason} at {res.size} B, {res.time_us:.2f} us "
              "predicted", file=sys.stderr)
    elif args.size is not None:
        raise ConfigError("--size picks a prediction to export: give --system or --topology")
    else:
        sched = build(args.collective, args.algorithm, args.ranks, root=args.root,
                      **param_pairs(args.param))
    verify(sched)  # only proven schedules leave gpucomm
    if sched.collective.name == "sendrecv":
        return _export_send_recv(args, sched, protocol)
    xml = to_msccl_xml(sched, protocol=protocol, min_bytes=args.min_bytes,
                       max_bytes=args.max_bytes, outofplace=args.out_of_place)
    problems = executor_problems(xml)  # left after spreading over channels: say so
    for line in problems[:5]:
        print(f"gpucomm algo export: warning: MSCCL's executor would refuse this file: {line}",
              file=sys.stderr)
    if len(problems) > 5:
        print(f"gpucomm algo export: warning: ... and {len(problems) - 5} more", file=sys.stderr)
    if args.output:
        write_text(args.output, xml)
        print(f"wrote {args.output}: {sched.algorithm} {sched.collective.name} on "
              f"{sched.nranks} ranks, {sched.nops} ops, verified")
    else:
        print(xml, end="")
    return 0


def _export_send_recv(args, sched, protocol) -> int:
    """MSCCL's executor knows a sendrecv as a `send` and a `recv` file: NAME.send.xml and
    NAME.recv.xml for --output NAME.xml."""
    from ..interop.msccl_p2p import PARTS, to_msccl_send_recv
    if not args.output:
        raise ConfigError("a sendrecv is two MSCCL files (send and recv): give --output "
                          "NAME.xml to write NAME.send.xml and NAME.recv.xml")
    files = to_msccl_send_recv(sched, protocol=protocol, min_bytes=args.min_bytes,
                               max_bytes=args.max_bytes)
    stem = args.output[:-4] if args.output.endswith(".xml") else args.output
    for part in PARTS:
        write_text(f"{stem}.{part}.xml", files[part])
    print(f"wrote {stem}.send.xml and {stem}.recv.xml: {sched.algorithm} sendrecv on "
          f"{sched.nranks} ranks, {sched.nops} ops, verified")
    return 0


def _import_size(args, sched) -> int:
    """The size to simulate a file at: --size (a note when the file's minBytes..maxBytes,
    where NCCL would use it, leaves it out), else 64M brought into that range."""
    params = dict(sched.params)
    lo, hi = params.get("min_bytes", 0), params.get("max_bytes", 0) or None
    span = f"{format_size(lo)}..{format_size(hi) if hi else 'any'}"
    if args.size is not None:
        if args.size < lo or (hi is not None and args.size > hi):
            print(f"gpucomm algo import: note: --size {format_size(args.size)} is outside the "
                  f"file's range {span} (minBytes..maxBytes): MSCCL would not use it there",
                  file=sys.stderr)
        return args.size
    size = max(1 << 26, lo)
    return min(size, hi) if hi is not None else size


def _run_small(sched) -> str | None:
    """Run the schedule in-process at a few elements per chunk and check it against numpy:
    the proof of what it computes needs no more, so memory follows the schedule, not --size.
    None if it matches, else what differs."""
    import numpy as np

    from .. import dtypes as dt
    from ..collectives import check_outputs
    from ..execute import execute
    p, coll = sched.nranks, sched.collective
    lay = layout(coll, 4 * 4 * sched.chunks_per_block * coll.size_blocks(p), "float32", p)
    rng = np.random.default_rng(0)
    ins = []
    for r in range(p):
        blocks = coll.inputs(r, p, sched.root)
        ins.append(None if blocks is None else
                   dt.random_array(rng, blocks[1] * lay.block_count, lay.dtype, "sum"))
    outs = execute(sched, ins, "sum", lay.dtype)
    try:
        check_outputs(coll, outs, ins, "sum", lay.dtype, sched.root)
        return None
    except AssertionError as e:
        return str(e)


def cmd_import(args) -> int:
    from ..simulate import simulate
    from ..topology import build_topology
    sched = _read_xml(args.file)
    p = sched.nranks
    try:
        verify(sched)
        proof = None
    except ScheduleError as e:
        proof = str(e)
    result = {"file": args.file, "collective": sched.collective.name, "nranks": p,
              "chunks_per_block": sched.chunks_per_block, "steps": sched.nsteps,
              "ops": sched.nops, "verified": proof is None, "error": proof}
    if proof is None:
        from ..topology.build import preset_node
        per = sum(1 for d in preset_node(args.system).devices if d.kind == "gpu")
        nodes = args.nodes or -(-p // per)
        topo = build_topology(args.system, nodes=nodes, gpus_per_node=min(per, -(-p // nodes)))
        if topo.nranks < p:
            raise ConfigError(f"{args.system} × {nodes} node(s) has {topo.nranks} GPUs; the "
                              f"file needs {p}: give --nodes")
        size, proto = _import_size(args, sched), dict(sched.params)["protocol"].lower()
        res = simulate(sched, topo, size, ranks=list(range(p)), protocol=proto)
        ran = _run_small(sched)
        result.update(system=topo.name, nodes=nodes, size=size, protocol=proto,
                      time_us=round(res.time_us, 3), busbw=round(res.busbw_GBps, 3),
                      matches_reference=ran is None, run_error=ran)
    if args.output:
        write_text(args.output, sched.to_json())
    if args.format == "json":
        print_json(result)
    else:
        print(f"{args.file}: {sched.collective.name} on {p} ranks, {sched.nsteps} steps, "
              f"{sched.nops} ops: " + ("verified" if proof is None else f"WRONG: {proof}"))
        if proof is None:
            print(f"  simulated on {result['system']} × {result['nodes']}: {result['time_us']:.2f}"
                  f" us for S = {format_size(result['size'])} with the file's protocol "
                  f"{dict(sched.params)['protocol']} (busbw {result['busbw']:.2f} GB/s)")
            print("  ran in-process: " + ("matches the numpy reference" if ran is None
                                          else f"WRONG: {ran}"))
    return 0 if proof is None and result.get("matches_reference") else 1
