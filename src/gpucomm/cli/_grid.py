"""`gpucomm sweep`'s points: a GRID.yaml's options as gpucomm command lines, checked by the
command's own parser and run in the worker's process (the engine is gpucomm.grid).

A point is one `gpucomm COMMAND --option value ... --format json` run, done in-process by a
worker (the command's own parser and function, so every CLI option works and every check
applies); its result is the command's JSON output, or its one-line error.

    command: sim                 # the gpucomm command of every point
    fixed: {collective: all_reduce, minbytes: 1G, maxbytes: 1G}
    grid:                        # the cartesian product of these lists
      system: [dgx-h100, dgx-a100]
      nodes: [2, 4, 8]

Options are the command's long names, `_` or `-` alike, or nccl-tests' one-letter flags
(`f: 4` is `-f 4`); `true`/`false` give `--flag` / `--no-flag`; a list under `fixed` repeats
the option (`param: [a=1, b=2]`).
"""
from __future__ import annotations

import contextlib
import io
import json

from .. import grid
from ..errors import ConfigError
from ..inputs import load_yaml_file

COMMANDS = ("sim", "plan", "topo", "algo", "hw", "bench")


def load_grid(path, check: bool = True) -> tuple[str, list[grid.Point]]:
    """(command, points) of a GRID.yaml, every point's options checked by the command's parser
    (with `check=False` not yet: pass `point_checker(command, path)` to run_grid)."""
    spec = load_yaml_file(path, "grid")
    return expand(spec, source=str(path), check=check)


def expand(spec, source="grid", check: bool = True) -> tuple[str, list[grid.Point]]:
    command, points = grid.expand(spec, source, commands=COMMANDS, argv=_command_line)
    if check:
        ok = point_checker(command, source)
        for point in points:
            ok(point)
    return command, points


def _command_line(words: list[str], options: dict) -> tuple:
    return tuple(words + _argv(options) + ["--format", "json"])


def point_checker(command: str, source: str = "grid"):
    """A function that raises ConfigError (naming the point and the option) where a point's
    options do not parse as the command's, as `gpucomm COMMAND ...` would refuse them."""
    parser = _parser_for(command.split())

    def check(point: grid.Point) -> None:
        _check(parser, point.argv, point.options, source)
    return check


def _argv(options: dict) -> list[str]:
    out = []
    for opt, value in options.items():
        # one letter: the short option (`f: 4` is nccl-tests' -f 4, not a prefix of --format)
        flag = f"-{opt}" if len(str(opt)) == 1 else "--" + str(opt).replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            for v in value:
                out += [flag, str(v)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def _parser_for(words):
    from . import build_parser
    return build_parser(list(words))


def _check(parser, argv, options, source):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(list(argv))
    except SystemExit:
        last = err.getvalue().strip().splitlines()[-1:] or ["invalid options"]
        raise ConfigError(f"{source}: point {json.dumps(options, default=str)}: "
                          f"{last[0].split('error: ')[-1]}") from None


def run_point(argv) -> dict:
    """Run one point in this process: {"result": the command's JSON} or {"error": "..."}."""
    from . import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    except SystemExit as e:  # argparse, after the up-front check: should not happen
        code = e.code if isinstance(e.code, int) else 2
    except Exception as e:  # a bug in a command: keep the sweep going, say which point
        return {"error": f"{type(e).__name__}: {e}"}
    if code != 0:
        msg = err.getvalue().strip().splitlines()
        return {"error": msg[-1] if msg else f"exit status {code}"}
    text = out.getvalue()
    try:
        return {"result": json.loads(text)}
    except ValueError:
        return {"result": text}
