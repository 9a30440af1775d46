"""The shm transport's compiled plans and its streaming copy, without spawning processes
(tests/test_runtime.py runs the plans on real ranks)."""
import ctypes

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.runtime import memcopy
from gpucomm.runtime.options import RuntimeOptions
from gpucomm.runtime.actions import IN, OUT, PEER_IN, PEER_OUT, SHM, Action, fused_push
from gpucomm.runtime.plan import compile_plan
from gpucomm.runtime.push import completes


def _addr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("streaming", [True, False])
def test_copy_matches_numpy_at_every_alignment_and_length(streaming):
    copy = memcopy.copier(RuntimeOptions(stream=streaming, stream_min_bytes=0))
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 4096 + 64, dtype=np.uint8)
    for n in [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 1000, 4096]:
        for so in (0, 1, 7, 16, 33):
            for do in (0, 3, 8, 15, 48):
                dst = np.zeros(4096 + 64, np.uint8)
                copy(_addr(dst) + do, _addr(src) + so, n)
                want = np.zeros_like(dst)
                want[do:do + n] = src[so:so + n]
                assert np.array_equal(dst, want), (n, so, do)


def test_overlapping_copy_moves_like_memmove():
    buf = np.arange(1000, dtype=np.uint8)
    want = buf.copy()
    want[10:710] = buf[0:700]
    memcopy.copy(_addr(buf) + 10, _addr(buf), 700, min_bytes=0)
    assert np.array_equal(buf, want)


def test_stream_extension_rejects_negative_size():
    if memcopy._stream_copy is None:
        pytest.skip("built without the C extension")
    buf = ctypes.create_string_buffer(8)
    with pytest.raises(ValueError, match="nbytes"):
        memcopy._stream_copy(ctypes.addressof(buf), ctypes.addressof(buf), -1)


@pytest.mark.parametrize("algo", ["ring", "direct", "bruck", "recursive_doubling"])
def test_two_rank_all_gather_pushes_its_block_instead_of_being_read(algo):
    """Each rank copies its block and writes it into the peer right after; nobody reads a
    peer's input any more, and the plan runs to completion."""
    plan = compile_plan(build("all_gather", algo, 2), 1 << 20, slice_elems=1 << 30,
                        direct=True)
    for r in range(2):
        rows = plan.actions[r]
        assert not any(a.src == PEER_IN for a in rows), plan.describe(r)
        fused = [i for i in range(len(rows) - 1) if fused_push(rows[i], rows[i + 1])]
        assert len(fused) == 1, plan.describe(r)
        copy, push = rows[fused[0]], rows[fused[0] + 1]
        assert (copy.src, copy.dst, push.dst, push.peer) == (IN, OUT, PEER_OUT, 1 - r)
        assert push.dst_off == r * (1 << 20)  # the peer's block r


@pytest.mark.parametrize("algo", ["binomial_tree", "ring"])
def test_a_two_rank_broadcast_out_of_place_is_read_by_the_peer_while_the_root_copies(algo):
    """The root copies its input into its output; pushing the same range into the peer as
    well would make it copy twice while the peer idles: the peer reads it, at the same time."""
    plan = compile_plan(build("broadcast", algo, 2), 1 << 20, slice_elems=1 << 30,
                        direct=True)
    root, peer = plan.actions
    assert not any(a.dst == PEER_OUT for a in root), plan.describe(0)
    assert {(a.src, a.dst) for a in root if a.n} == {(IN, OUT)}, plan.describe(0)
    reads = [a for a in peer if a.src == PEER_IN]
    assert sum(a.n for a in reads) == 1 << 20 and not any(a.deps[1:] for a in reads), \
        plan.describe(1)


@pytest.mark.parametrize("algo", ["direct", "binomial_tree"])
@pytest.mark.parametrize("root", [0, 1])
def test_a_two_rank_gathers_non_root_writes_its_block_while_the_root_copies_its_own(algo, root):
    """The non-root has nothing else to do: it writes into the root's output instead of
    waiting while the root reads it, and the root waits for that write only after its own
    copy."""
    plan = compile_plan(build("gather", algo, 2, root=root), 1 << 20, slice_elems=1 << 30,
                        direct=True)
    mine, other = plan.actions[root], plan.actions[1 - root]
    assert not any(a.src == PEER_IN for a in mine), plan.describe(root)
    assert [(a.src, a.dst) for a in mine if a.n] == [(IN, OUT)] and not mine[-1].n, \
        plan.describe(root)
    writes = [a for a in other if a.dst == PEER_OUT]
    assert [(a.src, a.dst_off, a.n) for a in writes] == [(IN, (1 - root) << 20, 1 << 20)], \
        plan.describe(1 - root)


def test_without_streaming_copies_the_all_gather_keeps_its_pull():
    """Pushing a copied block from cache only pays when the copy streams past the cache."""
    plan = compile_plan(build("all_gather", "ring", 2), 1 << 20, slice_elems=1 << 30,
                        direct=True, stream=False)
    assert not any(a.dst == PEER_OUT for rows in plan.actions for a in rows)
    assert all(any(a.src == PEER_IN for a in rows) for rows in plan.actions)


def test_plans_without_a_local_copy_to_share_keep_their_reads():
    for coll, p in (("all_gather", 3), ("all_to_all", 2)):
        plan = compile_plan(build(coll, "direct", p), 1 << 20, slice_elems=1 << 30,
                            direct=True)
        assert not any(a.dst == PEER_OUT for rows in plan.actions for a in rows)
        assert any(a.src == PEER_IN for rows in plan.actions for a in rows)


def test_completes_detects_a_deadlock():
    wait = lambda q, k: Action(False, SHM, q, 0, SHM, 0, 0, SHM, 0, ((q, k),))  # noqa: E731
    assert completes([[wait(1, 1)], [wait(0, 0)]])
    assert not completes([[wait(1, 1)], [wait(0, 1)]])
