"""`import gpucomm.torch`: the "gpucomm" torch.distributed backend, and DDP trained on it.

One torchrun (2 ranks): every torch.distributed call DDP/FSDP make, then 50 DDP steps that must
end with the same parameters as the same run on gloo (examples/ddp_gpucomm.py).
"""
import ast
import os
import re
import subprocess
import sys

import pytest

from test_transports import _env, _free_port

HERE = os.path.dirname(os.path.abspath(__file__))

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
pytest.importorskip("gpucomm.runtime.shm", reason="the shm communicator is not there")


def _torchrun(n, *argv, timeout=180):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), *argv]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def run():
    """One torchrun: every call (worker `backend` mode), then 50 DDP steps against gloo."""
    return _torchrun(2, os.path.join(HERE, "test_transports_worker.py"), "backend")


def test_every_call_ddp_and_fsdp_make(run):
    rc, out = run
    got = re.findall(r"BACKEND rank (\d+): (\d+) failures", out)
    assert sorted(int(r) for r, _ in got) == [0, 1], out[-4000:]
    assert all(f == "0" for _, f in got), out[-4000:]


@pytest.mark.parametrize("how, calls_of", [("", "allreduce"),
                                           (", comm hook", "allreduce_hook")])
def test_ddp_on_gpucomm_matches_gloo_after_50_steps(run, how, calls_of):
    """DDP's default path, and gpucomm's comm hook (`gpucomm.torch.allreduce_hook`, which
    averages the buckets on the communicator directly)."""
    rc, out = run
    lines = re.findall(rf"DDP rank (\d+){how}: 50 steps, max \|gpucomm - gloo\| = ([^,]+), "
                       r"[^{]*gpucomm calls (\{[^}]*\})", out)
    assert rc == 0 and len(lines) == 2, out[-4000:]
    for _, diff, calls in lines:
        assert float(diff) <= 1e-5
        calls = ast.literal_eval(calls)  # DDP's gradient all-reduces went through gpucomm
        assert calls[calls_of] >= 50 and calls["broadcast"] >= 1, calls
