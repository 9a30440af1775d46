"""Grids of CLI runs: expand a GRID.yaml into points, run them on processes or a Dask cluster.

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
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..inputs import load_json, load_yaml_file, read_text

COMMANDS = ("sim", "plan", "topo", "algo", "hw", "bench")
# Points in one grid: each is checked by the command's parser up front and is one run; 10,000
# runs of even the fastest command are hours of work, and a million points exhaust memory.
MAX_POINTS = 10_000
# A results file resumed (--output of an earlier run): one JSON line per point, a few KB each.
MAX_RESULTS_BYTES = 1 << 30


@dataclass(frozen=True)
class Point:
    """One run: its options (for the output line and resuming) and the argv that runs it."""
    key: str  # canonical JSON of the options: identifies the point across runs
    options: dict
    argv: tuple


def load_grid(path, check: bool = True) -> tuple[str, list[Point]]:
    """(command, points) of a GRID.yaml, every point's options checked by the command's parser
    (with `check=False` not yet: pass `point_checker(command, path)` to run_grid)."""
    spec = load_yaml_file(path, "grid")
    return expand(spec, source=str(path), check=check)


def expand(spec, source="grid", check: bool = True) -> tuple[str, list[Point]]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{source}: expected a mapping with 'command', 'fixed' and 'grid'")
    unknown = set(spec) - {"command", "fixed", "grid"}
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}: "
                          "allowed are command, fixed, grid")
    command = spec.get("command", "sim")
    words = command.split() if isinstance(command, str) else []
    if not words or words[0] not in COMMANDS:
        raise ConfigError(f"{source}: command {command!r} not allowed: one of "
                          f"{', '.join(COMMANDS)} (with its subcommand, e.g. 'topo show')")
    fixed = spec.get("fixed") or {}
    grid = spec.get("grid") or {}
    for name, value in (("fixed", fixed), ("grid", grid)):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{name}' must be a mapping of option -> value")
    axes = []
    for opt, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{source}: grid option {opt!r} must be a non-empty list")
        axes.append([(opt, v) for v in values])
    count = 1
    for ax in axes:
        count *= len(ax)
    if count > MAX_POINTS:
        raise ConfigError(f"{source}: the grid has {count} points; at most {MAX_POINTS}")
    points = []
    for combo in itertools.product(*axes):
        options = {**fixed, **dict(combo)}
        argv = tuple(words + _argv(options) + ["--format", "json"])
        points.append(Point(json.dumps(options, sort_keys=True, default=str), options, argv))
    if check:
        ok = point_checker(command, source)
        for point in points:
            ok(point)
    return command, points


def point_checker(command: str, source: str = "grid"):
    """A function that raises ConfigError (naming the point and the option) where a point's
    options do not parse as the command's, as `gpucomm COMMAND ...` would refuse them."""
    parser = _parser_for(command.split())

    def check(point: Point) -> None:
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


def done_keys(path) -> set:
    """Keys of the points a results file already holds (a torn last line is ignored)."""
    keys: set = set()
    p = Path(path)
    if not p.exists():
        return keys
    text = read_text(p, "results file (to resume)", limit=MAX_RESULTS_BYTES)
    for line in text.splitlines():
        try:
            keys.add(load_json(line, "results line")["key"])
        except (ConfigError, KeyError, TypeError):
            continue
    return keys


def run_grid(points, out_path, *, workers=None, cluster=None, on_point=None,
             check=None) -> dict:
    """Run the points not yet in `out_path`, appending one JSON line per point as each ends.

    Local processes by default (`workers`, default the CPU count); `cluster`: the address of
    a running Dask scheduler. `check` (point_checker's function), where given, is applied to
    every point before any line is written: local workers start on the points already
    checked while the rest are, and a refused point stops them all with nothing written.
    Returns {"total", "skipped", "ran", "errors"}."""
    done = done_keys(out_path)
    todo = [p for p in points if p.key not in done]
    stats = {"total": len(points), "skipped": len(points) - len(todo), "ran": 0, "errors": 0}
    if check is not None:
        for p in points:
            if p.key in done:
                check(p)
    if not todo:
        return stats
    answers = _execute(todo, workers, cluster, check)
    first = next(answers, None)  # every point checked: only now is the file touched
    _trim_torn_line(out_path)
    with open(out_path, "a") as out:
        for point, answer in itertools.chain([first], answers):
            line = {"key": point.key, "point": point.options, **answer}
            out.write(json.dumps(line, default=str) + "\n")
            out.flush()
            stats["ran"] += 1
            stats["errors"] += "error" in answer
            if on_point is not None:
                on_point(point, answer)
    return stats


def _trim_torn_line(path):
    """An interrupted run may leave half a line: end the file at its last newline."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return
    data = p.read_bytes()
    if not data.endswith(b"\n"):
        p.write_bytes(data[:data.rfind(b"\n") + 1])


def _execute(todo, workers, cluster, check=None):
    import os
    n = min(workers or os.cpu_count() or 1, len(todo))   # an idle worker is only a process
    if cluster or n <= 1 or len(todo) == 1:
        for p in todo if check is not None else ():
            check(p)
        if cluster:
            yield from _on_dask(todo, cluster)
        else:
            for p in todo:
                yield p, run_point(p.argv)
        return
    yield from _on_processes(todo, n, check)


def _tasks(todo, n) -> list:
    """Points in order, in pairs (less IPC) but for the last 4 per worker, one by one (the
    workers end together)."""
    size = max(1, min(2, len(todo) // (16 * n)))
    cut = max(len(todo) - 4 * n, 0)
    return [todo[i:i + size] for i in range(0, cut, size)] + [[p] for p in todo[cut:]]


def _on_processes(todo, n, check):
    """The points on `n` local processes, each task submitted once its points are checked."""
    import concurrent.futures as cf
    import gc
    gc.freeze()  # the workers' collections leave the parent's objects (and pages) alone
    futures: dict = {}
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=_context()) as pool:
        try:
            for chunk in _tasks(todo, n):
                for p in chunk if check is not None else ():
                    check(p)
                futures[pool.submit(run_points, [p.argv for p in chunk])] = chunk
                gc.unfreeze()  # the workers are forked at the first submit
            for fut in cf.as_completed(futures):
                yield from zip(futures[fut], fut.result())
        except BaseException:
            gc.unfreeze()
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_points(argvs) -> list[dict]:
    """run_point for each argv, in order (one task of a worker)."""
    return [run_point(argv) for argv in argvs]


def _context():
    """fork where it is safe (Linux, and this process has no other thread): workers start at
    once with this process's imports and caches (the parser already imported the command), as
    the 1-worker path runs warm in this process; else spawn (macOS's system libraries do not
    survive a fork)."""
    import multiprocessing as mp
    import sys
    import threading
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _on_dask(todo, address):
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--cluster needs Dask's distributed: pip install 'gpucomm[cluster]'") \
            from None
    try:
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError, TypeError) as e:   # unreachable, bad scheme
        raise ConfigError(f"cannot reach the Dask scheduler at {address!r}: {e}") from None
    try:
        futures = client.map(run_point, [p.argv for p in todo], key=[
            f"gpucomm-point-{abs(hash(p.key))}-{i}" for i, p in enumerate(todo)], pure=False)
        by_key = {f.key: p for f, p in zip(futures, todo)}
        for fut in as_completed(futures):
            try:
                answer = fut.result()
            except Exception as e:  # a worker died or raised: that point's error
                answer = {"error": f"{type(e).__name__}: {e}"}
            yield by_key[fut.key], answer
    finally:
        client.close()
