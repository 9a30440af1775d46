"""Shared transfers (`push.share_transfers`) on real processes: a 2-rank all-to-all whose
blocks are read from the front by their rank and written from the back by the peer, counted
in C (`_stream.c` shared_read/shared_write). Outputs are bit for bit numpy's reference on the
same buffers with fresh values every call, in and out of place (and one rank in place, its peer
not), whoever takes which piece:
- both ranks on one core, so one runs while the other waits and takes over its transfer
  (that it did is asserted: pieces written from the back);
- one rank without the C waiter (the interpreter reads its whole block and writes none of
  the peer's), the other in C;
- both in Python.

Ranks run this file as a script (`python test_runtime_share.py MODE OUT_DIR`) under the
launcher; each writes OUT_DIR/rank<k>.json.
"""
import os
import sys
import traceback

import numpy as np
from launched import all_right, c_built, finish, inputs, run_ranks

HERE = os.path.abspath(__file__)
COUNT = (1 << 19) + 1000  # float32 elements per block: 2 MiB + 4000 B, 8 pieces, a short last


def _calls(comm, in_place: bool, calls: int, seed: int) -> tuple[list, int]:
    """(calls whose output differs from the reference, pieces this rank wrote into the
    peer's output, in all)."""
    from gpucomm.collectives import reference
    from gpucomm.runtime.shm_control import BACK
    p, wrong, written = comm.world_size, [], 0
    inp = np.empty(p * COUNT, np.float32)
    out = inp if in_place else np.empty(p * COUNT, np.float32)
    for i in range(calls):
        ins = inputs("all_to_all", p, COUNT, 31 * i + seed)
        want = reference("all_to_all", ins)[comm.rank]
        inp[:] = ins[comm.rank]
        # in place, the input's own block is never copied aside (`unalias`): NaNs where the
        # copies go show a plan that reads it there
        comm.transport._input_copy._buf[:] = 0xFF
        comm.all_to_all(out, inp)
        if out.tobytes() != want.tobytes():
            wrong.append(f"{'in place' if in_place else 'out of place'} call {i}")
        word = int(comm.transport._me[BACK])
        written += word & 0xFFFFFFFF if word >> 32 == comm.transport.seq & 0xFFFFFFFF else 0
    return wrong, written


if __name__ == "__main__":
    mode, out_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)) + "/src")
    from gpucomm.runtime import shm_ll
    rank = int(os.environ["RANK"])  # set by the launcher
    if mode == "one_core":  # both ranks on the first core they may use
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if mode == "python" or (mode == "mixed" and rank == 1):
        shm_ll.WaitsRunner = None  # as with an extension that lacks the C waits
    import gpucomm.runtime as rt
    comm = rt.init()
    res: dict = {"rank": comm.rank, "c": comm.transport._waiter is not None}
    try:
        res["wrong"], res["written"] = _calls(comm, False, 8, 0)
        for seed, in_place in enumerate((True, comm.rank == 0), 1):  # then one rank in place
            wrong, written = _calls(comm, in_place, 4, seed)
            res["wrong"] += wrong
            res["written"] += written
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["trace"] = traceback.format_exc()
    finish(comm, res, out_dir)


def run(mode, tmp_path):
    return run_ranks(HERE, 2, mode, tmp_path, {"GPUCOMM_TIMEOUT": "60"}, 300)


@c_built
def test_a_rank_takes_over_the_transfer_of_a_peer_that_is_not_running(tmp_path):
    results, log, _ = run("one_core", tmp_path)
    all_right(results, log, 2)
    assert sum(res["written"] for res in results) > 0, results


@c_built
def test_a_rank_in_c_and_one_in_python_share_transfers_exactly(tmp_path):
    results, log, _ = run("mixed", tmp_path)
    all_right(results, log, 2)
    assert [res["c"] for res in sorted(results, key=lambda r: r["rank"])] == [True, False]
    assert sorted(results, key=lambda r: r["rank"])[1]["written"] == 0


def test_ranks_in_python_run_shared_transfers_as_plain_reads(tmp_path):
    results, log, _ = run("python", tmp_path)
    all_right(results, log, 2)
    assert all(res["written"] == 0 and not res["c"] for res in results), results

