"""All-to-all's staged/direct choice follows the cores the ranks may run on
(`RuntimeOptions.a2a_direct_min`): the shm transport counts the union of its ranks' CPU
affinities at set-up, so every rank compiles the same plan. Both ways on real processes:
ranks as the launcher binds them (a core each where there are enough) and every rank bound to
one core (they share it: 1 MiB all-to-all goes direct). Results bit for bit numpy's.

Ranks run this file as a script (`python test_runtime_cores.py MODE OUT_DIR`) under the
launcher; each writes OUT_DIR/rank<k>.json.
"""
import os
import sys
import traceback

import numpy as np
import pytest
from launched import finish, inputs, run_ranks

HERE = os.path.abspath(__file__)
MiB = 1 << 20


def rank_main(mode: str, out_dir: str) -> None:
    if mode == "one_core":  # every rank on the one core the test names
        os.sched_setaffinity(0, {int(os.environ["TEST_ONE_CORE"])})
    import gpucomm.runtime as rt
    from gpucomm.collectives import layout, reference
    comm = rt.init()
    res: dict = {"cores": comm.transport.cores, "own": sorted(os.sched_getaffinity(0))}
    try:
        p = comm.world_size
        sched = comm.schedule("all_to_all", MiB)
        bc = layout("all_to_all", MiB, "float32", p).block_count
        res["direct"] = comm.transport.plan(sched, bc, 4)[0].direct
        res["wrong"] = []
        out = np.empty(bc * p, np.float32)
        for i in range(4):  # general path, then cached calls in C
            ins = inputs("all_to_all", p, bc, 11 + i)
            comm.all_to_all(out, ins[comm.rank])
            if out.tobytes() != reference("all_to_all", ins)[comm.rank].tobytes():
                res["wrong"].append(i)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["trace"] = traceback.format_exc()
    finish(comm, res, out_dir)


def run(nranks, mode, tmp_path):
    from gpucomm.runtime.plan import usable_cores
    env = {"GPUCOMM_TIMEOUT": "60", "TEST_ONE_CORE": str(usable_cores()[0])}
    return run_ranks(HERE, nranks, mode, tmp_path, env, 120)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
@pytest.mark.parametrize("mode", ["launcher", "one_core"])
def test_all_to_all_goes_direct_where_ranks_share_cores(tmp_path, mode):
    from gpucomm.runtime.plan import usable_cores
    results, log, _ = run(2, mode, tmp_path)
    assert len(results) == 2, log[-3000:]
    union = set().union(*(r["own"] for r in results))
    want_cores = 1 if mode == "one_core" else min(len(usable_cores()), len(union))
    for res in results:
        assert "error" not in res, res.get("trace")
        assert res["wrong"] == [], res
        assert res["cores"] == len(union) == want_cores, res
        # a 512 KiB chunk: staged where each rank has a core of its own, direct where not
        # (direct needs cross-memory attach; without it everything is staged)
        assert not res["direct"] if res["cores"] >= 2 else res["direct"] or not _cma(), res


def _cma() -> bool:
    from gpucomm.bench.plancost import cma_allowed
    return cma_allowed()


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2])
