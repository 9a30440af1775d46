"""The torch.distributed and MPI transports: one correctness suite, run under their launchers.

Each engine is launched once per case kind (torchrun / mpiexec with 4 ranks) and loops over every
algorithm, dtype and op inside (tests/test_transports_worker.py). Skips with the reason when
the engine or its launcher is missing.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from gpucomm.bench.backends import mapped_shm, remove_stale_mpich, shm_names
from mpi_check import mpi_missing

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "test_transports_worker.py")
SRC = os.path.join(os.path.dirname(HERE), "src")
NRANKS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, HERE, env.get("PYTHONPATH", "")])
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")
    return env


def _torch_cmd(n, *args):
    try:
        import torch.distributed  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torch is not installed ({e}); pip install torch==2.13.0")
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
            "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), WORKER, "torch",
            *args]


def _mpi_cmd(n, *args, cleanup=True):
    if mpi_missing():
        pytest.skip(mpi_missing())
    launcher = shutil.which("mpiexec")
    if launcher is None:
        pytest.skip("no mpiexec on PATH (pip install mpich provides one)")
    extra = [] if cleanup else ["-disable-auto-cleanup"]
    return [launcher, *extra, "-n", str(n), sys.executable, WORKER, "mpi", *args]


def _run(cmd, timeout=240):
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


VICTIM, TIMEOUT = 2, 2.0


@pytest.fixture(scope="module", params=["torch", "mpi"])
def run(request):
    """One launch per engine: the suite on 4 ranks, then rank 2 dies (see the worker)."""
    engine = request.param
    args = ("kill", str(VICTIM), str(TIMEOUT))
    cmd = _torch_cmd(NRANKS, *args) if engine == "torch" else \
        _mpi_cmd(NRANKS, *args, cleanup=False)  # Hydra would stop the job at the death
    if engine != "mpi":
        rc, out = _run(cmd)
        return engine, rc, out, []
    # ranks that exit without MPI_Finalize leave MPICH's /dev/shm segments: remove this job's
    before = shm_names()
    try:
        rc, out = _run(cmd)
    finally:
        removed = remove_stale_mpich(before)
    return engine, rc, out, (before, removed)


def test_correctness_suite(run):
    engine, rc, out, _ = run
    summary = re.findall(r"SUITE rank (\d+): (\d+) cases, (\d+) failures", out)
    assert len(summary) == NRANKS, out[-4000:]
    assert all(int(f) == 0 for _, _, f in summary), out[-4000:]
    cases = {int(r): int(n) for r, n, _ in summary}
    # every rank ran the world cases; ranks 0..P-2 also ran the sub-group cases
    assert min(cases.values()) > 100 and cases[0] > cases[NRANKS - 1], cases


def test_dead_rank_is_named_within_timeout(run):
    engine, rc, out, _ = run
    failed = re.findall(r"FAILED rank (\d+) after ([\d.]+) s: (\w+): ([^\n]*)", out)
    assert sorted(int(r) for r, *_ in failed) == [r for r in range(NRANKS) if r != VICTIM], \
        out[-4000:]
    for rank, secs, kind, msg in failed:
        assert float(secs) < TIMEOUT + 2.0, (rank, secs)
        assert kind in ("TransportError", "CommTimeout") and f"rank {VICTIM}" in msg, msg
    assert "NOFAIL" not in out


def test_nothing_left_in_dev_shm(run):
    """The dead-rank job leaves MPICH segments (no MPI_Finalize); the fixture removes them,
    and no segment of the job remains that no process maps."""
    engine, rc, out, cleanup = run
    if engine != "mpi":
        pytest.skip("only MPICH keeps segments in /dev/shm")
    before, removed = cleanup
    assert all(n.startswith("mpich_shm_") for n in removed), removed
    # of what appeared during the job, only segments a live process maps (another job running
    # beside this one) may remain; one that was being set up or torn down gets a moment
    for _ in range(10):
        left = (shm_names() - before) - mapped_shm()
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"left in /dev/shm: {sorted(left)}"


@pytest.mark.parametrize("engine", ["torch", "mpi"])
def test_init_builds_a_communicator_on_the_engine(engine):
    """gpucomm.runtime.init(transport=...) under torchrun / mpiexec with 2 ranks: the
    Communicator API (several collectives, async, send/recv) over the engine's transport."""
    cmd = _torch_cmd(2) if engine == "torch" else _mpi_cmd(2)
    assert cmd[-1] == engine
    cmd[-1:] = ["comm", engine]  # the worker's `comm ENGINE` mode
    before = shm_names()
    try:
        rc, out = _run(cmd, timeout=120)
    finally:
        remove_stale_mpich(before)
    got = re.findall(rf"COMM {engine} rank (\d+) of 2 \((\w+), local rank (\d+)\): (\d+) "
                     "failures", out)
    assert rc == 0 and sorted(int(r) for r, *_ in got) == [0, 1], out[-3000:]
    want = "TorchTransport" if engine == "torch" else "MPITransport"
    assert all(t == want and lr == r and f == "0" for r, t, lr, f in got), got


def test_init_names_the_transports_it_knows():
    from gpucomm.errors import ConfigError
    from gpucomm.runtime import init
    with pytest.raises(ConfigError, match="allowed are shm, torch, mpi"):
        init(transport="nccl")
