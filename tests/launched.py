"""Tests that run their own file as every rank under gpucomm's launcher.

A rank records what it saw in a dict and `finish`es: OUT_DIR/rank<k>.json, then a clean close
(only if nothing broke: a broken communicator may not be closable) and an exit that skips
interpreter teardown. The test side `run_ranks` launches the script and reads those files back
(a rank that died writes none).
"""
import io
import json
import os
import sys
import time

import numpy as np
import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


# the tests of plans run in C (test_runtime_cplan, test_runtime_fast)
c_built = pytest.mark.skipif(
    __import__("gpucomm.runtime.shm_ll", fromlist=["WaitsRunner"]).WaitsRunner is None,
    reason="the C extension (gpucomm.runtime._stream) is not built")
# every call direct, so that small ones run the C plans too
DIRECT_ENV = {"GPUCOMM_TIMEOUT": "60", "GPUCOMM_DIRECT_MIN_BYTES": "4",
              "GPUCOMM_A2A_DIRECT_MIN_BYTES": "4"}


def inputs(coll: str, p: int, count: int, seed: int) -> list:
    """Every rank's float32 input of `coll` with `count` elements per block (the root's alone
    counts for broadcast and scatter)."""
    from gpucomm.collectives import get_collective
    rng = np.random.default_rng(seed)
    c = get_collective(coll)
    n = [c.inputs(r, p, 0)[1] * count if c.inputs(r, p, 0) else 0 for r in range(p)]
    return [rng.standard_normal(n[r]).astype(np.float32) for r in range(p)]


def finish(comm, res: dict, out_dir: str) -> None:
    with open(os.path.join(out_dir, f"rank{comm.rank}.json"), "w") as f:
        json.dump(res, f)
    if "error" not in res:
        comm.close()
    os._exit(0)


def all_right(results: list, log: str, nranks: int) -> None:
    """Every one of `nranks` ranks wrote its result, none an error, every output numpy's."""
    assert len(results) == nranks, log[-3000:]
    for res in results:
        assert "error" not in res, res.get("trace")
        assert res["wrong"] == [], res["wrong"][:5]


def run_ranks(script: str, nranks: int, mode: str, tmp_path, env: dict, timeout: float):
    """(results of the ranks that wrote one, the launcher's output, seconds taken)."""
    from gpucomm.runtime.launch import launch
    out = io.StringIO()
    t0 = time.monotonic()
    launch([sys.executable, script, mode, str(tmp_path)], nranks, out=out,
           env=dict(os.environ, PYTHONPATH=SRC, **env), timeout=timeout)
    elapsed = time.monotonic() - t0
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nranks)
               if (tmp_path / f"rank{r}.json").exists()]
    return results, out.getvalue(), elapsed
