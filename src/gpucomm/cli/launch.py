"""`gpucomm launch --nproc N script.py [args]`: N local ranks with torchrun's environment."""
from __future__ import annotations

import argparse
import math
import sys

from ._nccltests import retire
from .common import positive_int


def register(sub) -> None:
    p = sub.add_parser("launch", help="start N local ranks of a script (like torchrun)",
                       description="Start N local ranks with RANK, WORLD_SIZE, LOCAL_RANK, "
                       "MASTER_ADDR and MASTER_PORT set; output lines are prefixed with "
                       "[rank k]; if one rank fails the others are stopped and the exit "
                       "status is the failed rank's.")
    p.add_argument("--nproc", type=positive_int, required=True, help="number of ranks")
    retire(p, "-n", use="--nproc")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output lines")
    p.add_argument("--no-bind", action="store_true",
                   help="do not pin rank k to core k (pinning is on when ranks <= cores)")
    p.add_argument("--timeout", type=_seconds, default=None,
                   help="stop every rank after this many seconds (exit status 124)")
    p.add_argument("script", metavar="PROGRAM",
                   help="a Python script (.py) run with this Python, or a program and its "
                   "arguments as with mpirun (`launch --nproc 2 python3 x.py`)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    p.add_argument("--exec", dest="as_program", action="store_true",
                   help="run PROGRAM as a program even if it ends in .py")
    p.set_defaults(func=cmd_launch)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds > 0")
    return value


def cmd_launch(args) -> int:
    from ..runtime.launch import check_launch, launch, program
    check_launch([sys.executable], args.nproc, args.timeout)  # --nproc and --timeout come first
    cmd = program(args.script, args.args, args.as_program)
    return launch(cmd, args.nproc, prefix=not args.no_prefix, timeout=args.timeout,
                  bind=not args.no_bind)
