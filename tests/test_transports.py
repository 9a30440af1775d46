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

import pytest

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
    try:
        import mpi4py.MPI  # noqa: F401
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"mpi4py or its MPI library is missing ({e}); pip install mpi4py mpich")
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
    rc, out = _run(cmd)
    return engine, rc, out


def test_correctness_suite(run):
    engine, rc, out = run
    summary = re.findall(r"SUITE rank (\d+): (\d+) cases, (\d+) failures", out)
    assert len(summary) == NRANKS, out[-4000:]
    assert all(int(f) == 0 for _, _, f in summary), out[-4000:]
    cases = {int(r): int(n) for r, n, _ in summary}
    # every rank ran the world cases; ranks 0..P-2 also ran the sub-group cases
    assert min(cases.values()) > 100 and cases[0] > cases[NRANKS - 1], cases


def test_dead_rank_is_named_within_timeout(run):
    engine, rc, out = run
    failed = re.findall(r"FAILED rank (\d+) after ([\d.]+) s: (\w+): ([^\n]*)", out)
    assert sorted(int(r) for r, *_ in failed) == [r for r in range(NRANKS) if r != VICTIM], \
        out[-4000:]
    for rank, secs, kind, msg in failed:
        assert float(secs) < TIMEOUT + 2.0, (rank, secs)
        assert kind in ("TransportError", "CommTimeout") and f"rank {VICTIM}" in msg, msg
    assert "NOFAIL" not in out
