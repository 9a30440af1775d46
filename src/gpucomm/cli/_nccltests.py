"""nccl-tests' command line, as `gpucomm sim` and `gpucomm bench` accept it.

An nccl-tests command line pasted after `gpucomm sim` or `gpucomm bench` means what it means to
nccl-tests: the binary's name is the collective, and every flag of nccl-tests' `src/common.cu`
(its `longopts` table and `getopt_long` string, nccl-tests 2.19) is accepted with its short and
long spelling and its meaning. Flags that change nothing in a prediction, or on CPU ranks, are
accepted and named in one note. gpucomm's own options have long names only, and the short
options other commands used to have (`-c`, `-o`, `-n`, `-N`, `-p`) give a one-line hint.
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

from ..errors import ConfigError
from .common import (agg_iters_arg, graph_arg, iters_arg, nonnegative_int, positive_int,
                     size_arg, timeout_arg, warmup_arg)

# nccl-tests binaries -> gpucomm collective (alltoallv_perf has no gpucomm counterpart)
PERF_TESTS = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
              "reduce_scatter_perf": "reduce_scatter", "broadcast_perf": "broadcast",
              "reduce_perf": "reduce", "alltoall_perf": "all_to_all",
              "sendrecv_perf": "sendrecv", "gather_perf": "gather", "scatter_perf": "scatter",
              "hypercube_perf": "all_gather"}
# hypercube_perf is an all-gather by the hypercube exchange: gpucomm's recursive doubling
TEST_ALGORITHM = {"hypercube_perf": "recursive_doubling"}

HINTS = {
    "-c": "`-c` now means --check, as in nccl-tests; use --collective (or the test's name, "
          "e.g. all_reduce_perf)",
    "-o": "`-o` now means --op, as in nccl-tests; use --output",
    "-n": "`-n` now means --iters, as in nccl-tests; use --ranks",
    "-N": "`-N` now means --run_cycles, as in nccl-tests; use --nodes",
    "-p": "`-p` now means --parallel_init, as in nccl-tests; use --param NAME=VALUE",
    "--model": "`--model` is the LLM of `gpucomm plan`; the simulator's model is --sim-model "
               "analytic|flow",
}


def _flag_int(hint: str | None = None, lo: int | None = None):
    """argparse type for an nccl-tests integer flag; `hint` when the text is not a number."""
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer" + (f": {hint}" if hint else "")) from None
        if lo is not None and value < lo:
            raise argparse.ArgumentTypeError(f"{text} must be >= {lo}")
        return value
    return parse


@dataclass(frozen=True)
class Flag:
    short: str
    long: tuple  # nccl-tests' long name first, then gpucomm's older spellings
    dest: str
    type: object
    help: str
    default: object = None  # nccl-tests' value when the flag is not given


# nccl-tests' flags (src/common.cu longopts), in its order
FLAGS = (
    Flag("-t", ("--nthreads",), "nthreads", positive_int, "threads per process", 1),
    Flag("-g", ("--ngpus", "--gpus-per-thread"), "ngpus", positive_int, "GPUs per thread", 1),
    Flag("-b", ("--minbytes",), "minbytes", size_arg, "smallest size"),
    Flag("-e", ("--maxbytes",), "maxbytes", size_arg, "largest size"),
    Flag("-i", ("--stepbytes",), "stepbytes", size_arg, "size increment (when -f is 1)", 0),
    Flag("-f", ("--stepfactor",), "stepfactor", float, "size multiplication factor"),
    Flag("-n", ("--iters",), "iters", iters_arg, "timed iterations", 20),
    Flag("-m", ("--agg_iters",), "agg_iters", agg_iters_arg, "collectives per iteration", 1),
    Flag("-w", ("--warmup_iters", "--warmup"), "warmup", warmup_arg, "warm-up iterations"),
    Flag("-N", ("--run_cycles",), "run_cycles", nonnegative_int, "run and print the sweep N "
         "times (0: until interrupted)", 1),
    Flag("-p", ("--parallel_init",), "parallel_init", _flag_int(HINTS["-p"]),
         "threads initialise NCCL concurrently (0/1)", 0),
    Flag("-c", ("--check",), "check", _flag_int(HINTS["-c"]), "check results (iterations)", 1),
    Flag("-o", ("--op",), "op", str, "sum, prod, min, max, avg or all", "sum"),
    Flag("-d", ("--datatype",), "datatype", str, "an nccl-tests type (float, half, bfloat16, "
         "f8e4m3, f8e5m2, int32, ...) or all", "float32"),
    Flag("-r", ("--root",), "root", str, "root rank, or all", "0"),
    Flag("-z", ("--blocking",), "blocking", _flag_int(lo=0), "0-3: wait/barrier after each "
         "(inner/outer) iteration", 0),
    Flag("-y", ("--stream_null",), "stream_null", _flag_int(), "use the default CUDA stream", 0),
    Flag("-T", ("--timeout",), "timeout", timeout_arg, "timeout of each collective, s"),
    Flag("-G", ("--cudagraph",), "cudagraph", graph_arg, "CUDA graph launches (0: none)", 0),
    Flag("-C", ("--report_cputime",), "report_cputime", _flag_int(), "report CPU time", 0),
    Flag("-S", ("--report_timestamps",), "report_timestamps", _flag_int(),
         "a timestamp per row", 0),
    Flag("-J", ("--output_file",), "output_file", str, "write the results to FILE.json"),
    Flag("-a", ("--average",), "average", _flag_int(), "time over ranks: 0 rank 0, 1 mean, "
         "2 min, 3 max", 1),
    Flag("-R", ("--local_register",), "local_register", _flag_int(), "buffer registration "
         "(0/1/2)", 0),
    Flag("-x", ("--cta_policy",), "cta_policy", _flag_int(lo=-1), "NCCL CTA policy", -1),
    Flag("-D", ("--device_implementation",), "device_implementation", _flag_int(),
         "device-API implementation", 0),
    Flag("-V", ("--device_cta_count",), "device_cta_count", _flag_int(), "CTAs of the device "
         "implementation", 16),
    Flag("-M", ("--memory",), "memory", _flag_int(), "GPU memory usage report", 0),
    Flag("-u", ("--unalign",), "unalign", _flag_int(), "misalign buffers by N elements", 0),
    Flag("-I", ("--per_iter_timing",), "per_iter_timing", _flag_int(), "per-iteration timing", 0),
    Flag("-K", ("--per_iter_skip",), "per_iter_skip", _flag_int(), "samples -I skips", 0),
)
BY_DEST = {f.dest: f for f in FLAGS}


def add_nccl_tests_args(p, *, defaults: dict, effective: tuple, where: str) -> None:
    """The nccl-tests test name (optional positional) and every nccl-tests flag on `p`.

    `defaults`: gpucomm's default where it differs from nccl-tests' (sizes, warm-up);
    `effective`: the dests that change the result of this command; the others are accepted
    and named in one note by `resolve` (`where`: "a prediction", "CPU ranks")."""
    p.add_argument("test", nargs="?", metavar="TEST", help="an nccl-tests binary "
                   f"({', '.join(PERF_TESTS)}) or a collective; default all_reduce")
    g = p.add_argument_group("nccl-tests flags (same letters and meanings as nccl-tests; "
                             f"those with no effect on {where} are accepted with a note)")
    for f in FLAGS:
        default = defaults.get(f.dest, f.default)
        note = "" if f.dest in effective else f" (no effect on {where})"
        hyphened = [x.replace("_", "-") for x in f.long if "_" in x]  # for sweep grids
        g.add_argument(f.short, *f.long, *hyphened, dest=f.dest, type=f.type, default=None,
                       help=f"{f.help} (default {default}){note}")
    p.set_defaults(_nccl_defaults=dict(defaults), _nccl_effective=tuple(effective),
                   _nccl_where=where)


def resolve(args, prog: str) -> None:
    """Fill the defaults, set `args.collective` from the test name, print the one note."""
    given = [f for f in FLAGS if getattr(args, f.dest) is not None]
    args.nccl_given = frozenset(f.dest for f in given)
    idle = [f for f in given if f.dest not in args._nccl_effective]
    for f in FLAGS:
        if getattr(args, f.dest) is None:
            setattr(args, f.dest, args._nccl_defaults.get(f.dest, f.default))
    args.collective_given = getattr(args, "collective", None) is not None
    args.collective = collective_of(args.test, getattr(args, "collective", None))
    args.test_algorithm = TEST_ALGORITHM.get(_test_name(args.test or ""))
    if args.stepfactor is None:  # nccl-tests: -i alone steps by bytes (its factor is 1)
        args.stepfactor = 1.0 if args.stepbytes else 2.0
    if args.stepfactor > 1:
        args.stepbytes = 0  # nccl-tests: a factor > 1 wins over -i
    if idle:
        shown = " ".join(f"{f.short} {getattr(args, f.dest)}" for f in idle)
        extra = ("; nodes are --nodes" if any(f.short == "-N" for f in idle)
                 and args._nccl_where == "a prediction" else "")
        print(f"{prog}: note: {shown} accepted as in nccl-tests, no effect on "
              f"{args._nccl_where}{extra}", file=_stderr())


def _stderr():
    import sys
    return sys.stderr


def _test_name(text: str) -> str:
    return re.sub(r"_mpi$", "", os.path.basename(text))


def collective_of(test: str | None, collective: str | None) -> str:
    """The collective a test name (all_reduce_perf, ./build/alltoall_perf_mpi, or a collective
    name) and --collective give; ConfigError when they disagree or the name is unknown."""
    if test is None:
        return collective or "all_reduce"
    from ..collectives import get_collective
    name = _test_name(test)
    if name.endswith("_perf"):
        if name not in PERF_TESTS:
            raise ConfigError(f"unknown nccl-tests binary {test!r}: allowed are "
                              f"{', '.join(PERF_TESTS)}")
        coll = PERF_TESTS[name]
    else:
        coll = get_collective(name).name
    if collective and get_collective(collective).name != coll:
        raise ConfigError(f"{test} tests {coll} but --collective is {collective}: give one")
    return coll


class _Retired(argparse.Action):
    """An old short option: a one-line error saying what it means now and what to use."""

    def __init__(self, option_strings, dest, hint="", **kw):
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?", help=argparse.SUPPRESS)
        self.hint = hint

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(self.hint)


def retire(p, *options: str, use: str | None = None) -> None:
    """Register old spellings on `p` that now only print their hint (`use`: the long option
    to name instead of the usual one, e.g. --nproc for `launch -n`)."""
    for opt in options:
        hint = HINTS[opt]
        if use:
            hint = hint.rsplit("use ", 1)[0] + f"use {use}"
        p.add_argument(opt, action=_Retired, hint=hint)


def nccl_tests_sizes(collective: str, sizes: list[int], datatype: str, nranks: int) -> list[int]:
    """The sizes nccl-tests prints for the sizes of its sweep (src/common.cu setupArgs):
    count = size / element size, and the collectives whose size covers one block per rank
    (all_gather, reduce_scatter, alltoall, gather, scatter; src/<test>.cu GetCollByteCount)
    give each rank (count / nranks) & ~(16 / element size - 1) elements, a multiple of 16
    bytes, so a size under 16 B a rank prints as 0 (a row nccl-tests still prints). The row's
    size is the larger buffer, max(send, receive) bytes.

        >>> nccl_tests_sizes("all_gather", [32, 256, 300], "float32", 8)
        [0, 256, 256]
        >>> nccl_tests_sizes("all_reduce", [6, 8], "float32", 8)
        [4, 8]
    """
    from ..collectives import get_collective
    from ..dtypes import get_dtype
    coll, size = get_collective(collective), get_dtype(datatype).itemsize
    if coll.name == "barrier":
        return list(sizes)
    out = []
    for s in sizes:
        count = s // size
        if coll.size_blocks(2) == 2:  # one block per rank (any rank count, 1 too)
            count = ((count // nranks) & ~(16 // size - 1)) * nranks
        out.append(count * size)
    return out
