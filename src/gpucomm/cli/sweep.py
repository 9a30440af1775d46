"""`gpucomm sweep`: run a grid of CLI runs (the cartesian product of options), one JSON line each.

    gpucomm sweep grid.yaml --output results.jsonl                 # local processes
    gpucomm sweep grid.yaml --output results.jsonl --cluster tcp://sched:8786   # a Dask cluster

Lines are appended as points finish; running the same command again skips the points the
file already holds, so an interrupted sweep resumes where it stopped. Dask's `distributed`
is the engine for clusters: it is pure Python, takes plain functions (a point is one), starts
a local cluster in a line for tests, and runs on HPC schedulers (dask-jobqueue) and
Kubernetes; Ray would do too, but is a heavier dependency for tasks this simple.
"""
from __future__ import annotations

import argparse
import sys

from .progress import Progress
from ._nccltests import retire
from .common import workers_arg


GRID_HELP = """Run the cartesian product of a command's options, one JSON line per point.

GRID.yaml has three keys:
  command: a gpucomm command (sim, plan, tune, doctor, ...)
  fixed:   options every point gets, e.g. {collective: all_reduce, minbytes: 1G}
  grid:    a list of values per option; the points are every combination,
           e.g. {nodes: [2, 4], nic: [ib-ndr, roce-400g]}
Options are the command's long names without the dashes (gpus_per_node or gpus-per-node),
or nccl-tests' one-letter flags (f: 4 is -f 4); true/false give a switch or its --no- form.
A grid holds at most 10,000 points. Running the same command again skips the points the
output file already holds."""


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a grid of sim/plan/... runs, one JSON line each",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=GRID_HELP)
    p.add_argument("grid", metavar="GRID.yaml")
    p.add_argument("--output", required=True, metavar="RESULTS.jsonl",
                   help="JSON lines, appended; points already there are skipped (resume)")
    p.add_argument("-j", "--workers", type=workers_arg,
                   help="local worker processes (default: the CPU count)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="a running Dask scheduler, e.g. tcp://10.0.0.1:8786")
    retire(p, "-o")
    p.set_defaults(func=cmd_sweep)


# Dask's address schemes (distributed.comm registry); a bare host:port is tcp.
CLUSTER_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def _check_cluster(address: str | None) -> None:
    """Refuse a --cluster address no Dask client could dial, before any point is checked."""
    if address is None:
        return
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in CLUSTER_SCHEMES or not rest:
        from ..errors import ConfigError
        raise ConfigError(f"--cluster {address!r}: not a Dask scheduler address; give "
                          f"SCHEME://HOST:PORT with SCHEME one of {', '.join(CLUSTER_SCHEMES)} "
                          "(e.g. tcp://10.0.0.1:8786)")


def cmd_sweep(args) -> int:
    from ..grid import done_keys, run_grid
    from ._grid import load_grid, point_checker, run_point
    _check_cluster(args.cluster)
    # the points' options are checked as they are handed to the workers (run_grid)
    command, points = load_grid(args.grid, check=False)
    left = len(points) - len(done_keys(args.output) & {p.key for p in points})
    with Progress(left, "points") as bar:
        stats = run_grid(points, args.output, run_point, workers=args.workers,
                         cluster=args.cluster,
                         on_point=lambda point, answer: bar.advance(),
                         check=point_checker(command, args.grid))
    print(f"# gpucomm sweep: {stats['ran']} point(s) run, {stats['skipped']} already in "
          f"{args.output}, {stats['errors']} with errors ({command}, {stats['total']} in the "
          "grid)", file=sys.stderr)
    return 1 if stats["errors"] else 0
