"""The runtime's fault matrix, sampled: for each transport (shm, torch, MPI, and torch's
"gpucomm" backend) and a rotating choice of collective, 3 ranks loop the collective and one
peer is killed (SIGKILL) or frozen (SIGSTOP) at a random moment. Every survivor must raise
within the timeout naming that rank, nothing of the job may stay in /dev/shm, and the next
run on the same transport must work.

Cases are drawn from GPUCOMM_FAULT_SEED (default 0; the seed is in every failure message), so
a failure reproduces with the same seed and CI stays bounded (~12 cases).
"""
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time

import pytest

from gpucomm.bench.backends import remove_stale_mpich, shm_names
from mpi_check import mpi_missing
from gpucomm.runtime.launch import free_port, rank_env
from gpucomm.runtime.segment import leftovers

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
WORKER = os.path.join(HERE, "fault_worker.py")
NRANKS, TIMEOUT_S = 3, 3.0
SEED = int(os.environ.get("GPUCOMM_FAULT_SEED", "0"))
COLLECTIVES = {
    "shm": ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all",
            "gather", "scatter", "barrier"],
    "torch": ["all_reduce", "all_gather", "broadcast", "reduce_scatter"],
    "mpi": ["all_reduce", "all_to_all", "gather", "reduce"],
    "backend": ["all_reduce", "all_gather", "broadcast", "barrier"],
}
PER_TRANSPORT = {"shm": 4, "torch": 2, "mpi": 2, "backend": 2}


def _cases():
    rng = random.Random(SEED)
    cases = []
    for transport, n in PER_TRANSPORT.items():
        colls = rng.sample(COLLECTIVES[transport], n)
        for k, coll in enumerate(colls):
            action = ("kill", "stop")[(k + rng.randrange(2)) % 2]
            cases.append((transport, coll, rng.randrange(NRANKS), action,
                          round(rng.uniform(0.0, 0.3), 3)))
    return cases


def _report(**row):
    """One JSON line per case to $GPUCOMM_FAULT_REPORT (benchmarks/fault_matrix.py)."""
    path = os.environ.get("GPUCOMM_FAULT_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def _need(transport):
    if transport in ("torch", "backend"):
        pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    if transport == "mpi":
        if mpi_missing():  # mpi4py, its MPI library and mpiexec
            pytest.skip(mpi_missing())


def _env(base=None):
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([SRC, HERE, env.get("PYTHONPATH", "")])
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")
    return env


def _start(transport, args, session):
    """The ranks as processes (one mpiexec for MPI), in their own process groups."""
    from gpucomm.bench.backends import mpiexec
    cmd = [sys.executable, WORKER, transport, *args]
    if transport == "mpi":
        env = _env()
        env["GPUCOMM_SHM_SESSION"] = session
        # -disable-auto-cleanup: Hydra would otherwise end the job itself at the death
        return [subprocess.Popen([mpiexec(), "-disable-auto-cleanup", "-n", str(NRANKS), *cmd],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)]
    port = free_port()
    return [subprocess.Popen(cmd, env=_env(rank_env(r, NRANKS, port, session)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True) for r in range(NRANKS)]


def _finish(procs, victim_pid_of, limit_s):
    """Wait for the survivors; then kill whatever is left (the frozen victim). Outputs."""
    deadline = time.monotonic() + limit_s
    outs = []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=max(0.5, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            o = b""
        outs.append(o.decode(errors="replace"))
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            o, _ = p.communicate(timeout=30)
    return outs


def _run(transport, coll, victim, action, delay, tmp_path, limit_s):
    session = secrets.token_hex(6)
    out_dir = tmp_path / f"{transport}-{coll}-{victim}-{session}"
    out_dir.mkdir()
    before = shm_names() if transport == "mpi" else None
    procs = _start(transport, [coll, str(victim), action, str(delay), str(TIMEOUT_S),
                               str(out_dir)], session)
    try:
        if victim >= 0 and action == "stop":
            # a frozen rank never exits by itself: wait for the survivors' files
            want = {f"rank{r}.json" for r in range(NRANKS) if r != victim}
            end = time.monotonic() + limit_s
            while time.monotonic() < end and not want <= set(os.listdir(out_dir)):
                time.sleep(0.1)
            limit_s = 5
        outs = _finish(procs, None, limit_s)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if before is not None:
            remove_stale_mpich(before)
    results = {}
    for r in range(NRANKS):
        f = out_dir / f"rank{r}.json"
        if f.exists():
            results[r] = json.loads(f.read_text())
    return results, "\n".join(o[-3000:] for o in outs), leftovers(session)


@pytest.mark.parametrize("transport,coll,victim,action,delay", _cases(),
                         ids=lambda v: str(v))
def test_a_killed_or_frozen_peer_is_named_by_every_survivor(transport, coll, victim, action,
                                                            delay, tmp_path):
    _need(transport)
    case = f"seed {SEED}: {transport} {coll}, rank {victim} {action} after {delay}s"
    t0 = time.monotonic()
    results, out, left = _run(transport, coll, victim, action, delay, tmp_path, 150)
    survivors = [r for r in range(NRANKS) if r != victim]
    if transport == "mpi" and action == "kill":
        # MPICH's mpiexec (Hydra) ends survivors of a killed rank itself, some of the time
        # even with -disable-auto-cleanup: no hang, but not every survivor gets to report
        survivors = [r for r in survivors if r in results]
    named = []
    for r in survivors:
        assert r in results, f"{case}: rank {r} wrote nothing:\n{out}"
        err, since = results[r]["error"], results[r].get("since_progress_s", 1e9)
        assert err.split(":")[0] in ("CommTimeout", "TransportError"), f"{case}: {err!r}"
        # within the timeout (plus slack for a loaded machine) of the last call that worked
        assert since < TIMEOUT_S + 6, f"{case}: rank {r} took {since:.1f}s: {err}"
        named.append(f"rank {victim}" in err)
    if transport in ("shm", "backend"):
        # shm ranks see who each peer waits for, and see a dead peer's pid go
        assert all(named), f"{case}: not every survivor named rank {victim}: {results}"
    elif named:
        # over torch/MPI a survivor blocked on a survivor that is itself stuck on (or has
        # already failed over) the victim names the rank it waited for: at least the ones
        # waiting on the victim name it
        assert any(named), f"{case}: no survivor named rank {victim}: {results}"
    _report(transport=transport, collective=coll, victim=victim, action=action, delay_s=delay,
            seed=SEED, named=named, left=left,
            to_error_s=max([results[r].get("since_progress_s", -1) for r in survivors] or [-1]))
    assert left == [], f"{case}: left in /dev/shm: {left}"
    # the next run on the same transport works
    results, out, left = _run(transport, coll, -1, "none", 0, tmp_path, 150)
    for r in range(NRANKS):
        assert results.get(r, {}).get("ok") and "error" not in results[r], \
            f"{case}: the next run failed on rank {r}: {results.get(r)}\n{out}"
    assert left == []
    assert time.monotonic() - t0 < 200
