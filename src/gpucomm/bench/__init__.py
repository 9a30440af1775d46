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
from ..dtypes import get_dtype, check_op
from ..errors import ConfigError, TransportError
from ..runtime.launch import signals_interrupt
from .backends import BACKENDS, mpiexec, remove_stale_mpich, shm_names, unsupported
from .table import format_table

__all__ = ["run_bench", "format_table", "BACKENDS"]


def run_bench(backend: str, nranks: int, collective, sizes, *, dtype="float32", op="sum",
              root=0, algorithm="auto", iters=20, warmup=5, check=1, timeout=None,
              on_row=None, log=None) -> list[dict]:
    """Rows (dicts) of a sweep; `on_row(row)` is called as each size finishes."""
    coll, d = get_collective(collective), get_dtype(dtype)
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}: allowed are {', '.join(BACKENDS)}")
    if coll.name in ("sendrecv", "barrier"):
        raise ConfigError(f"bench runs all_reduce, reduce_scatter, all_gather, broadcast, "
                          f"reduce, all_to_all, gather and scatter, not {coll.name}")
    if coll.reduces:
        check_op(op, d)
    if backend == "gloo" and algorithm != "auto":
        raise ConfigError("--algorithm picks a gpucomm schedule: --backend gloo is gloo's own "
                          "collectives; use --backend torch to run the schedule over gloo")
    if not 0 <= root < nranks:
        raise ConfigError(f"root {root} is out of range: allowed are 0..{nranks - 1}")
    why = unsupported(backend, algorithm, d, op, coll.reduces)
    if why:
        raise ConfigError(f"--backend {backend}: {why}")
    with tempfile.TemporaryDirectory(prefix="gpucomm-bench-") as tmp:
        cfg = {"backend": backend, "collective": coll.name, "dtype": d.name, "op": op,
               "root": root, "algorithm": algorithm, "iters": iters, "warmup": warmup,
               "check": check, "sizes": [int(s) for s in sizes], "timeout": timeout,
               "out": os.path.join(tmp, "rows.jsonl")}
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
                                stderr=subprocess.STDOUT, env=env)
    launcher = [sys.executable, "-m", "gpucomm", "launch", "-n", str(nranks), "--exec", *cmd]
    return subprocess.Popen(launcher, stdout=logf, stderr=subprocess.STDOUT, env=env)
