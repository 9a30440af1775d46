"""Grids of runs: the cartesian product of options, each point run once by a function, on
local processes or a Dask cluster, its answer appended to a JSON-lines file as it ends
(so an interrupted grid resumes where it stopped).

A point is a value the runner takes (`argv`: for `gpucomm sweep`, a command line run in the
worker's process) and the options it came from (`key`: their canonical JSON, which names
the point across runs). `expand` makes the points of a spec; `run_grid` runs them.

    >>> command, points = expand({"command": "sim", "grid": {"nodes": [1, 2]}},
    ...                          commands=("sim",), argv=lambda words, opts: tuple(opts.items()))
    >>> command, [p.argv for p in points]
    ('sim', [(('nodes', 1),), (('nodes', 2),)])
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .inputs import load_json, read_text

# Points in one grid: each is checked up front and is one run; 10,000 runs of even the
# fastest command are hours of work, and a million points exhaust memory.
MAX_POINTS = 10_000
# A results file resumed (an earlier run's output): one JSON line per point, a few KB each.
MAX_RESULTS_BYTES = 1 << 30

Runner = Callable[[Any], dict]  # a point's argv -> {"result": ...} or {"error": "..."}


@dataclass(frozen=True)
class Point:
    """One run: its options (for the output line and resuming) and the argv that runs it."""
    key: str  # canonical JSON of the options: identifies the point across runs
    options: dict
    argv: tuple


def expand(spec: Any, source: str = "grid", *, commands: Iterable[str],
           argv: Callable[[list[str], dict], tuple]) -> tuple[str, list[Point]]:
    """(command, points) of a spec {"command", "fixed", "grid"}: every combination of the
    grid's values, with `fixed`; `argv(command words, options)` is what runs a point."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{source}: expected a mapping with 'command', 'fixed' and 'grid'")
    unknown = set(spec) - {"command", "fixed", "grid"}
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}: "
                          "allowed are command, fixed, grid")
    commands = tuple(commands)
    command = spec.get("command", "sim")
    words = command.split() if isinstance(command, str) else []
    if not words or words[0] not in commands:
        raise ConfigError(f"{source}: command {command!r} not allowed: one of "
                          f"{', '.join(commands)} (with its subcommand, e.g. 'topo show')")
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
        points.append(Point(json.dumps(options, sort_keys=True, default=str), options,
                            argv(words, options)))
    return command, points


def done_keys(path: str | Path) -> set:
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


def run_grid(points: list[Point], out_path: str | Path, run: Runner, *,
             workers: int | None = None, cluster: str | None = None,
             on_point: Callable[[Point, dict], None] | None = None,
             check: Callable[[Point], None] | None = None) -> dict:
    """Run the points not yet in `out_path`, appending one JSON line per point as each ends.
    `run(point.argv)` answers a point: {"result": ...} or {"error": "one line"}; on local
    processes and Dask it must be a module-level function (it is pickled by reference).

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
    answers = _execute(todo, run, workers, cluster, check)
    first = next(answers, None)  # every point checked: only now is the file touched
    _trim_torn_line(out_path)
    with open(out_path, "a") as out:
        for point, answer in itertools.chain([first] if first is not None else [], answers):
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


def _execute(todo: list[Point], run: Runner, workers: int | None, cluster: str | None,
             check: Callable[[Point], None] | None = None) -> Iterator[tuple[Point, dict]]:
    import os
    n = min(workers or os.cpu_count() or 1, len(todo))   # an idle worker is only a process
    if cluster or n <= 1 or len(todo) == 1:
        if check is not None:
            for p in todo:
                check(p)
        if cluster:
            yield from _on_dask(todo, run, cluster)
        else:
            for p in todo:
                yield p, run(p.argv)
        return
    yield from _on_processes(todo, run, n, check)


def _tasks(todo, n) -> list:
    """Points in order, in pairs (less IPC) but for the last 4 per worker, one by one (the
    workers end together)."""
    size = max(1, min(2, len(todo) // (16 * n)))
    cut = max(len(todo) - 4 * n, 0)
    return [todo[i:i + size] for i in range(0, cut, size)] + [[p] for p in todo[cut:]]


def _on_processes(todo: list[Point], run: Runner, n: int,
                  check: Callable[[Point], None] | None) -> Iterator[tuple[Point, dict]]:
    """The points on `n` local processes, each task submitted once its points are checked."""
    import concurrent.futures as cf
    import gc
    gc.freeze()  # the workers' collections leave the parent's objects (and pages) alone
    futures: dict = {}
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=_context()) as pool:
        try:
            for chunk in _tasks(todo, n):
                if check is not None:
                    for p in chunk:
                        check(p)
                futures[pool.submit(run_points, run, [p.argv for p in chunk])] = chunk
                gc.unfreeze()  # the workers are forked at the first submit
            for fut in cf.as_completed(futures):
                yield from zip(futures[fut], fut.result())
        except BaseException:
            gc.unfreeze()
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_points(run: Runner, argvs: list) -> list[dict]:
    """run(argv) for each argv, in order (one task of a worker)."""
    return [run(argv) for argv in argvs]


def _context():
    """fork where it is safe (Linux, and this process has no other thread): workers start at
    once with this process's imports and caches (a checker has imported what points run), as
    the 1-worker path runs warm in this process; else spawn (macOS's system libraries do not
    survive a fork)."""
    import multiprocessing as mp
    import sys
    import threading
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _on_dask(todo: list[Point], run: Runner, address: str) -> Iterator[tuple[Point, dict]]:
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
        futures = client.map(run, [p.argv for p in todo], key=[
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
