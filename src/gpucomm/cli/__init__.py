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


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, like every other error of the command line."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def command_names() -> list[str]:
    """The command modules of this package (a module `x.py` is the command `gpucomm x`)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_") and m.name not in ("common", "progress"))


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The parser of every command; given `argv` naming a command, only that command's
    module is imported (start-up of one command does not pay for the others' imports)."""
    parser = _Parser(
        prog="gpucomm", description="Collective communication on GPU clusters: schedules, "
        "simulation, real runs and benchmarks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    names = command_names()
    first = next((a for a in argv or () if not a.startswith("-")), None)
    if first in names and not any(a in ("-h", "--help") for a in argv[:argv.index(first)]):
        names = [first]
    for mod in names:
        module = importlib.import_module(f"{__name__}.{mod}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line, for reports
    try:
        return int(args.func(args) or 0)
    except GpucommError as e:
        print(f"gpucomm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"gpucomm {args.command}: error: out of memory (see the limits in the README)",
              file=sys.stderr)
        return 2
    except OSError as e:
        if isinstance(e, BrokenPipeError):
            return 0
        # a file that went away or filled up after the command checked it
        where = f" {e.filename!r}" if e.filename else ""
        print(f"gpucomm {args.command}: error:{where} {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM/SIGHUP where a command maps them
        return getattr(e, "status", 130)

