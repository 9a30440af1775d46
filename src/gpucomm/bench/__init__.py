"""nccl-tests-style benchmarks on real processes: `run_bench(...)` starts the ranks (our
launcher, which sets torchrun's environment, for shm, gloo and torch; mpiexec for mpi),
collects one row per size and returns them. `algorithm` other than auto runs that gpucomm
schedule: on shared memory (shm) or over the engine's point-to-point ops (torch, mpi).

    rows = run_bench("shm", 2, "all_reduce", sizes=[8, 1 << 20])
    print(format_table(rows))
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from ..collectives import get_collective
from ..dtypes import PREMULSUM, check_op, get_dtype
from ..errors import ConfigError, TransportError
from ..limits import (MAX_LOCAL_RANKS, check_finite, check_host_memory, check_ranks,
                      check_size)
from ..runtime.launch import dies_with_parent, signals_interrupt
from .backends import BACKENDS, mpiexec, remove_stale_mpich, shm_names, unsupported
from .table import format_table

__all__ = ["run_bench", "format_table", "BACKENDS"]


def run_bench(backend: str, nranks: int, collective, sizes, *, dtype="float32", op="sum",
              root=0, algorithm="auto", iters=20, warmup=5, check=1, timeout=None,
              on_row=None, log=None, agg_iters=1, average=3, blocking=0,
              schedule=None) -> list[dict]:
    """Rows (dicts) of a sweep; `on_row(row)` is called as each size finishes.

    nccl-tests' `-m agg_iters` (collectives per timed iteration), `-a average` (0 rank 0,
    1 mean, 2 min, 3 max over ranks) and `-z blocking` (3: a barrier after every iteration;
    our calls return when done, so 1 and 2 change nothing). `schedule`: run this Schedule
    (an imported MSCCL file) instead of a registered algorithm."""
    coll, d = bench_collective(collective), get_dtype(dtype)
    if schedule is not None:
        from .sweep import register_fixed
        if schedule.collective != coll or schedule.nranks != nranks:
            raise ConfigError(f"the schedule is {schedule.collective.name} on "
                              f"{schedule.nranks} ranks; the benchmark runs {coll.name} on "
                              f"{nranks}")
        root, algorithm = schedule.root, register_fixed(schedule)
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}: allowed are {', '.join(BACKENDS)}")
    _check_counts(nranks, iters, warmup, check, timeout)
    if coll.reduces:
        check_op("sum" if op == PREMULSUM else op, d)
    sizes = [check_size(int(s)) for s in sizes]
    # every rank holds an input and an output buffer of at most S each, and the transport
    # stages up to S more (the shm data segment, an engine's bounce buffers)
    check_host_memory(3 * nranks * max(sizes, default=0),
                      f"{nranks} ranks with {max(sizes, default=0)} B buffers")
    if backend == "gloo" and algorithm != "auto":
        raise ConfigError("--algorithm picks a gpucomm schedule: --backend gloo is gloo's own "
                          "collectives; use --backend torch to run the schedule over gloo")
    if not 0 <= root < nranks:
        raise ConfigError(f"root {root} is out of range: allowed are 0..{nranks - 1}")
    if algorithm != "auto":
        _check_algorithm(coll, algorithm, nranks, root)
    why = unsupported(backend, algorithm, d, "sum" if op == PREMULSUM else op, coll.reduces)
    if why:
        raise ConfigError(f"--backend {backend}: {why}")
    with tempfile.TemporaryDirectory(prefix="gpucomm-bench-") as tmp:
        cfg = {"backend": backend, "collective": coll.name, "dtype": d.name, "op": op,
               "root": root, "algorithm": algorithm, "iters": iters, "warmup": warmup,
               "check": check, "sizes": [int(s) for s in sizes], "timeout": timeout,
               "agg_iters": int(agg_iters), "average": int(average), "blocking": int(blocking),
               "schedule_file": None,
               "out": os.path.join(tmp, "rows.jsonl")}
        if schedule is not None:
            cfg["schedule_file"] = os.path.join(tmp, "schedule.json")
            with open(cfg["schedule_file"], "w") as f:
                f.write(schedule.to_json())
        path = os.path.join(tmp, "cfg.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        open(cfg["out"], "w").close()
        cmd = [sys.executable, "-m", "gpucomm.bench.sweep", path]
        logf = open(os.path.join(tmp, "log.txt"), "w+")
        before = shm_names() if backend == "mpi" else None
        proc = None
        try:
            with signals_interrupt():  # SIGTERM/SIGHUP, like ^C, stop the ranks first
                proc = _start(backend, nranks, cmd, logf)
                rows = _collect(proc, cfg["out"], on_row)
        finally:
            if proc is not None:
                _end(proc)
            if before is not None:  # what MPICH leaves when ranks die (a clean exit leaves none)
                remove_stale_mpich(before)
        logf.seek(0)
        text = logf.read()
        logf.close()
        if proc.returncode != 0 or len(rows) < len(sizes):
            tail = "\n".join(text.strip().splitlines()[-15:])
            raise TransportError(f"{backend} benchmark ranks failed (exit {proc.returncode})"
                                 + (f":\n{tail}" if tail else ""))
        if log is not None and text.strip():
            log.write(text)
    return rows


BENCH_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                     "all_to_all", "gather", "scatter")


def bench_collective(name):
    try:
        coll = get_collective(name)
    except ConfigError:
        coll = None
    if coll is None or coll.name not in BENCH_COLLECTIVES:
        raise ConfigError(f"bench cannot run collective {str(name)!r}: allowed are "
                          f"{', '.join(BENCH_COLLECTIVES)}")
    return coll


def _check_counts(nranks, iters, warmup, check, timeout) -> None:
    """The sweep's numbers, checked before any rank starts (limits.py)."""
    check_ranks(nranks, MAX_LOCAL_RANKS, "ranks on one host")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ConfigError(f"iterations must be an integer >= 1, got {iters!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ConfigError(f"warm-up iterations must be an integer >= 0, got {warmup!r}")
    if check not in (0, 1) or isinstance(check, float):
        raise ConfigError(f"check must be 0 (off) or 1 (on), got {check!r}")
    if timeout is not None:
        check_finite(timeout, "timeout (seconds)", above=0)


def _check_algorithm(coll, algorithm: str, nranks: int, root: int) -> None:
    """A registered schedule that serves `nranks` (nvls is only a model of the switch)."""
    from ..algorithms import get_algorithm
    if algorithm == "nvls":
        raise ConfigError("nvls is the simulator's model of in-switch reduction (NVLink "
                          "SHARP), not a schedule processes can run: choose a registered "
                          "algorithm (gpucomm algo list) or auto")
    get_algorithm(coll, algorithm).build(nranks, root=root)  # ScheduleError if it cannot


def _collect(proc, path, on_row) -> list:
    """Rows as rank 0 appends them, until the job ends."""
    rows, seen = [], 0
    while True:
        done = proc.poll()
        with open(path) as f:
            lines = f.read().splitlines()
        for line in lines[seen:]:
            row = json.loads(line)
            rows.append(row)
            if on_row:
                on_row(row)
        seen = len(lines)
        if done is not None:
            return rows
        time.sleep(0.05)


def _end(proc, grace_s: float = 10.0) -> None:
    """Stop the launcher (ours or mpiexec) the way that lets it stop its ranks and remove
    their shared memory: SIGTERM, then SIGKILL if it outlasts `grace_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def _start(backend, nranks, cmd, logf):
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    if backend == "mpi":
        exe = mpiexec()
        if exe is None:
            raise ConfigError("--backend mpi needs mpiexec (pip install mpi4py mpich)")
        # bound to cores like the ranks of `gpucomm launch`, so the comparison is even
        bind = ["-bind-to", "core"] if nranks <= (os.cpu_count() or 1) else []
        return subprocess.Popen([exe, *bind, "-n", str(nranks), *cmd], stdout=logf,
                                stderr=subprocess.STDOUT, env=env, preexec_fn=dies_with_parent())
    launcher = [sys.executable, "-m", "gpucomm", "launch", "--nproc", str(nranks), "--exec", *cmd]
    # SIGTERM when this process dies, even by SIGKILL: the launcher then stops its ranks
    return subprocess.Popen(launcher, stdout=logf, stderr=subprocess.STDOUT, env=env,
                            preexec_fn=dies_with_parent())
