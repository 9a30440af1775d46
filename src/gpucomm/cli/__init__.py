"""`gpucomm` command line: one module per command group, each with `register(subparsers)`.

Modules in this package are discovered, so a new command is a new file. Every command turns a
GpucommError into a one-line message on stderr and exit status 2 — never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys

from .. import __version__
from ..errors import ConfigError, GpucommError

# Optional dependencies, checked before a command starts its work: (option, value that needs it
# or None for any, module, pyproject extra). `--backend gloo`/`torch` and `mpi` are bench's.
EXTRAS = (("plot", None, "matplotlib", "plot"),
          ("html", None, "plotly", "html"),
          ("backend", "gloo", "torch", "torch"),
          ("backend", "torch", "torch", "torch"),
          ("backend", "mpi", "mpi4py", "mpi"),
          ("cluster", None, "distributed", "cluster"))


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
    parser.add_argument("--version", action="version", version=f"gpucomm {__version__}")
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


def check_extras(args) -> None:
    """ConfigError naming the extra to install when an option given needs a module that is
    not installed: found before any simulation or rank starts, not after."""
    needs = [(f"--{opt}" + (f" {value}" if value else ""), module, extra)
             for opt, value, module, extra in EXTRAS
             if getattr(args, opt, None) and value in (None, getattr(args, opt))]
    if args.command == "report":  # its output is always the HTML report
        needs.append(("gpucomm report", "plotly", "html"))
    for what, module, extra in needs:
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"{what} needs {module}, which is not installed: "
                              f"pip install 'gpucomm[{extra}]'")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line, for reports
    try:
        check_extras(args)
        if args.command in ("bench", "launch"):  # ranks write to the terminal themselves
            return int(args.func(args) or 0)
        from .progress import Activity
        at = argv.index(args.command) if args.command in argv else 0
        words = [a for a in argv[at:at + 2] if not a.startswith("-")]
        with Activity("gpucomm " + " ".join(words)):
            return int(args.func(args) or 0)
    except GpucommError as e:
        print(f"gpucomm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"gpucomm {args.command}: error: out of memory (see docs/limits.md)",
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

