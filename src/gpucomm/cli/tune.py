"""`gpucomm tune`: NCCL's example tuner-plugin file from gpucomm's model of a cluster.

    gpucomm tune --system dgx-h100 --nodes 2 --output nccl_tuner.conf
    NCCL_TUNER_PLUGIN=libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=nccl_tuner.conf ...
"""
from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..outputs import write_text
from ._nccltests import retire
from .common import (add_format, name_arg, output_file, positive_int, print_json, size_arg)
from .topo import add_topology_args, topology_from_args


def register(sub) -> None:
    p = sub.add_parser("tune", help="write NCCL's example tuner CSV from gpucomm's auto choice")
    add_topology_args(p)
    p.add_argument("--collective", action="append", metavar="NAME",
                   help="only these collectives (repeatable; default: NCCL's five)")
    p.add_argument("-b", "--minbytes", type=size_arg, default=1)
    p.add_argument("-e", "--maxbytes", type=size_arg, default=16 << 30)
    p.add_argument("-d", "--datatype", default="float32")
    p.add_argument("--sim-model", dest="model", default="analytic", choices=("analytic", "flow"),
                   help="the simulator: analytic (default) or flow")
    p.add_argument("--channels", action="store_true",
                   help="(always on: every rule holds the channels the timed run used)")
    p.add_argument("--sub-communicators", action=argparse.BooleanOptionalAction, default=True,
                   help="also rules for 1, 2, 4, ... nodes x 1, 2, 4, ... GPUs per node (the "
                        "plugin matches node and rank counts exactly; default: on)")
    p.add_argument("--other-job", type=positive_int, default=None, metavar="NODES",
                   help="a second job on NODES more nodes of the fabric, as `gpucomm sim "
                   "--other-job`: placed by --placement on the nodes the job leaves, running "
                   "each communicator's collective at the same moment on groups of its shape; "
                   "each rule holds the pair fastest with it (needs a fabric model)")
    p.add_argument("--output", type=name_arg, metavar="FILE", help="default: standard output")
    retire(p, "-c", "-o", "--model")
    add_format(p)
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    from ..interop.tuner import NCCL_COLLECTIVES, TuneRequest, to_csv, tune
    dup = sorted({c for c in args.collective or () if args.collective.count(c) > 1})
    if dup:
        raise ConfigError(f"--collective {dup[0]} is given more than once: name each "
                          "collective once")
    if args.output:  # before the minutes a large cluster's rules take, not after
        if args.format == "json":
            raise ConfigError("--output writes the tuner's CSV file; --format json prints to "
                              "standard output: give one of them")
        output_file(args.output, "--output", ("",))
    if args.other_job:
        from .sim import second_job_cluster
        topo, job, _ = second_job_cluster(args)
    else:
        topo = topology_from_args(args)
        job = list(range(topo.nranks))
    nodes = len({topo.node_of(r) for r in job})
    req = TuneRequest(topology=topo, collectives=tuple(args.collective or NCCL_COLLECTIVES),
                      min_bytes=args.minbytes, max_bytes=args.maxbytes, dtype=args.datatype,
                      model=args.model, sub_communicators=args.sub_communicators,
                      other_job=args.other_job or 0)
    rules = tune(req)
    second = f"\na second job on {args.other_job} more nodes of the fabric (--other-job) runs " \
        "beside each communicator: each rule is the pair fastest with it" if args.other_job else ""
    if args.format == "json":
        doc = {"topology": topo.name, "nodes": nodes, "nranks": len(job), "rules": rules}
        if args.other_job:
            doc["other_job"] = {"nodes": args.other_job}
        print_json(doc)
        return 0
    text = to_csv(rules, f"NCCL example tuner rules by gpucomm tune for {topo.name}: "
                         f"{len(job)} ranks on {nodes} node(s)\n"
                         f"gpucomm {args.model} model; channels as timed; -1 = any{second}")
    if args.output:
        write_text(args.output, text)
        print(f"wrote {args.output}: {len(rules)} rules for {len(job)} ranks on {nodes} "
              "node(s)")
    else:
        print(text, end="")
    return 0
