"""`gpucomm` command line: one module per command group, each with `register(subparsers)`.

Modules in this package are discovered, so a new command is a new file. Every command turns a
GpucommError into a one-line message on stderr and exit status 2 — never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from ..errors import GpucommError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpucomm", description="Collective communication on GPU clusters: schedules, "
        "simulation, real runs and benchmarks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if mod.startswith("_") or mod == "common":
            continue
        module = importlib.import_module(f"{__name__}.{mod}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GpucommError as e:
        print(f"gpucomm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM/SIGHUP where a command maps them
        return getattr(e, "status", 130)
    except BrokenPipeError:
        return 0
