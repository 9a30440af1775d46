"""The algorithm families: proofs for every rank count, textbook byte counts, bad parameters."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm import dtypes as dt
from gpucomm.algorithms import algorithms, build
from gpucomm.algorithms.hierarchical import divisors
from gpucomm.algorithms.tree import double_binary_tree
from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.execute import execute
from gpucomm.schedule import Schedule, step
from gpucomm.verify import VerifyError, verify

from conftest import make_inputs

FAST = settings(max_examples=30, deadline=None)


def test_cli_verifies_every_algorithm_up_to_33_ranks(capsys):
    assert main(["algo", "verify", "--all", "--max-ranks", "33", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] == 0
    # Every algorithm serves every rank count: nothing is skipped as unsupported.
    assert {r["algorithm"] for r in out["results"]} >= {a.name for a in algorithms()}
    assert all(r["not_supported"] == 0 and r["verified"] >= 33 for r in out["results"])


def _log2(p: int) -> int:
    return p.bit_length() - 1


def _pow2(p: int) -> bool:
    return p & (p - 1) == 0


def _sent(coll, name, p, block_count, root=0, **params):
    sched = verify(build(coll, name, p, root=root, **params))
    return sched.bytes_sent(block_count, 1)  # itemsize 1: counts are in elements


ranks = st.integers(1, 40)


@FAST
@given(p=ranks, chunks=st.integers(1, 6))
def test_double_binary_tree_moves_every_chunk_up_and_down_each_edge(p, chunks):
    m = 2 * chunks * 8 + 3  # need not divide: every element crosses every edge twice
    assert _sent("all_reduce", "double_binary_tree", p, m, chunks=chunks).sum() == 2 * (p - 1) * m


@pytest.mark.parametrize("p", range(2, 34))
def test_double_binary_trees_are_complementary_binary_trees(p):
    for parent in double_binary_tree(p):
        assert (parent < 0).sum() == 1 and np.bincount(parent[parent >= 0]).max() <= 2
        for r in range(p):  # every rank reaches the root
            x, hops = r, 0
            while parent[x] >= 0 and hops <= p:
                x, hops = parent[x], hops + 1
            assert parent[x] < 0
    inner = [set(t[t >= 0].tolist()) for t in double_binary_tree(p)]
    # NCCL's property: no rank is an inner node of both trees (for odd P, the first root is)
    assert inner[0] & inner[1] <= ({0} if p % 2 else set())


@FAST
@given(p=ranks)
def test_recursive_doubling_sends_log_p_buffers_plus_the_fold(p):
    m, p2 = 24, 1 << _log2(p)
    want = [_log2(p2) * m + (m if r + p2 < p else 0) if r < p2 else m for r in range(p)]
    assert _sent("all_reduce", "recursive_doubling", p, m).tolist() == want


@FAST
@given(p=ranks)
def test_rabenseifner_sends_2_p_minus_1_over_p(p):
    p2 = 1 << _log2(p)
    m = p2 * 5
    core = 2 * (p2 - 1) * m // p2
    want = [core + (m if r + p2 < p else 0) if r < p2 else m for r in range(p)]
    assert _sent("all_reduce", "recursive_halving_doubling", p, m).tolist() == want


@FAST
@given(p=ranks)
def test_direct_all_reduces(p):
    m = p * 7
    assert _sent("all_reduce", "one_shot", p, m).tolist() == [(p - 1) * m] * p
    assert _sent("all_reduce", "two_shot", p, m).tolist() == [2 * (p - 1) * m // p] * p


@FAST
@given(data=st.data(), p=ranks)
def test_hierarchical_sends_what_a_ring_sends(data, p):
    g = data.draw(st.sampled_from(divisors(p) + [None]))
    m = p * 3
    assert _sent("all_reduce", "hierarchical", p, m, group_size=g).tolist() == \
        [2 * (p - 1) * m // p] * p


@pytest.mark.parametrize("p, want", [(8, 8), (16, 8), (12, 6), (6, 6), (7, 7), (17, 1), (1, 1)])
def test_hierarchical_default_group_is_a_divisor_up_to_a_node(p, want):
    assert dict(build("all_reduce", "hierarchical", p).params)["group_size"] == want


@FAST
@given(p=ranks, b=st.integers(0, 9))
def test_reduce_scatter_and_all_gather_send_p_minus_1_blocks(p, b):
    # M = S = P blocks; the bandwidth-optimal algorithms send (P-1)/P·M = (P-1) blocks a rank
    want = [(p - 1) * b] * p
    assert _sent("all_gather", "bruck", p, b).tolist() == want
    assert _sent("all_gather", "direct", p, b).tolist() == want
    assert _sent("reduce_scatter", "direct", p, b).tolist() == want
    assert _sent("all_to_all", "direct", p, b).tolist() == want
    if _pow2(p):
        assert _sent("all_gather", "recursive_doubling", p, b).tolist() == want
        assert _sent("reduce_scatter", "recursive_halving", p, b).tolist() == want


@FAST
@given(p=ranks, b=st.integers(0, 9))
def test_bruck_all_to_all_sends_each_block_once_per_set_bit(p, b):
    hops = sum(bin(d).count("1") for d in range(p))  # block at distance d hops popcount(d) times
    assert _sent("all_to_all", "bruck", p, b).tolist() == [hops * b] * p
    if _pow2(p):  # the textbook count: P/2 blocks in each of log2 P rounds
        assert hops == p // 2 * _log2(p)


@FAST
@given(data=st.data(), p=ranks)
def test_binomial_trees(data, p):
    root, m = data.draw(st.integers(0, p - 1)), 11
    rel = (np.arange(p) - root) % p
    bcast = _sent("broadcast", "binomial_tree", p, m, root=root)
    assert bcast.sum() == (p - 1) * m and bcast[root] == (p - 1).bit_length() * m
    red = _sent("reduce", "binomial_tree", p, m, root=root)
    assert red.tolist() == [0 if v == 0 else m for v in rel]
    # relative rank v != 0 roots a subtree of min(lowest bit of v, P - v) ranks
    subtree = [0 if v == 0 else min(v & -v, p - v) * m for v in rel.tolist()]
    assert _sent("gather", "binomial_tree", p, m, root=root).tolist() == subtree
    assert _sent("scatter", "binomial_tree", p, m, root=root).sum() == sum(subtree)
    assert _sent("gather", "direct", p, m, root=root).tolist() == [0 if v == 0 else m for v in rel]
    assert _sent("scatter", "direct", p, m, root=root).sum() == (p - 1) * m


@FAST
@given(p=ranks)
def test_barrier_and_sendrecv(p):
    barrier = verify(build("barrier", "dissemination", p))
    assert barrier.nsteps == (p - 1).bit_length()  # ceil(log2 P) rounds
    assert barrier.bytes_sent(0, 1).sum() == 0
    assert _sent("sendrecv", "direct", p, 5).tolist() == [5 * (p > 1)] * p


@pytest.mark.parametrize("name", [a.name for a in algorithms("all_reduce")])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_all_reduce_sums_are_bitwise_identical_on_every_rank(name, dtype):
    for p in (3, 5, 6, 12):
        sched = build("all_reduce", name, p)
        ins = make_inputs("all_reduce", p, 37, dtype, "sum", seed=p)
        # magnitudes spread over many binades make any difference in order show in the bits
        ins = [dt.to_storage(dt.to_compute(x, dt.get_dtype(dtype)) * 4.0 ** (r % 7),
                             dt.get_dtype(dtype)) for r, x in enumerate(ins)]
        outs = execute(sched, ins, "sum", dtype)
        for r, o in enumerate(outs):
            assert o.tobytes() == outs[0].tobytes(), f"{name} P={p}: rank {r} differs from rank 0"


@pytest.mark.parametrize("coll, name, p", [
    ("all_reduce", "recursive_halving_doubling", 6), ("all_reduce", "double_binary_tree", 5),
    ("all_to_all", "bruck", 7), ("gather", "binomial_tree", 6), ("all_reduce", "one_shot", 4)])
def test_a_broken_schedule_is_caught(coll, name, p):
    good = build(coll, name, p)
    steps = list(good.steps())
    for mutate in ("drop", "unreduce" if good.collective.reduces else "misroute"):
        bad_steps = list(steps)
        i = next(k for k, s in enumerate(bad_steps)
                 if len(s) and (mutate != "unreduce" or s.reduce.any()))
        cols = list(bad_steps[i].columns())
        if mutate == "drop":  # lose the last op of a step
            cols = [c[:-1] for c in cols]
        elif mutate == "unreduce":  # reductions become copies: contributions are overwritten
            cols[5] = np.zeros_like(cols[5])
        else:  # the last op goes to the wrong rank
            cols[1] = np.concatenate([cols[1][:-1], (cols[1][-1:] + 1) % p])
        bad_steps[i] = step(*cols)
        bad = Schedule(good.collective, p, name + "-broken", good.chunks_per_block,
                       tuple(bad_steps), good.scratch_blocks, good.root, good.channels)
        with pytest.raises(VerifyError, match=r"rank \d+ chunk \d+"):
            verify(bad)


@pytest.mark.parametrize("coll, name, params, match", [
    ("all_reduce", "double_binary_tree", {"chunks": 0}, "chunks must be an integer >= 1"),
    ("all_reduce", "double_binary_tree", {"chunks": "4"}, "chunks must be an integer >= 1"),
    ("all_reduce", "hierarchical", {"group_size": 4}, "valid are 1, 2, 3, 6"),
    ("all_reduce", "hierarchical", {"group_size": 0}, "must divide the 6 ranks"),
    ("all_reduce", "recursive_doubling", {"chunks": 2}, "allowed are none"),
    ("all_to_all", "bruck", {"channels": 2}, "no parameter"),
])
def test_bad_parameters_are_config_errors(coll, name, params, match):
    with pytest.raises(ConfigError, match=match):
        build(coll, name, 6, **params)


def test_cli_rejects_a_bad_group_size(capsys):
    argv = ["algo", "show", "hierarchical", "all_reduce", "--ranks", "6", "--param", "group_size=4"]
    assert main(argv) == 2
    assert "valid are 1, 2, 3, 6" in capsys.readouterr().err


def test_show_double_binary_tree(capsys):
    assert main(["algo", "show", "double_binary_tree", "all_reduce", "--ranks", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("double_binary_tree all_reduce: 8 ranks, 8 chunk(s)/block")
    assert "step 0: 1→2 c0 (reduce), 5→6 c0 (reduce), 0→1 c4 (reduce), 4→5 c4 (reduce)" in out
    assert "rank 0: 1048576 B (1.0000 × S)" in out and "rank 1: 2097152 B (2.0000 × S)" in out


@pytest.mark.parametrize("coll, name, steps", [
    ("all_reduce", "recursive_halving_doubling", 20), ("all_reduce", "recursive_doubling", 20),
    ("all_gather", "bruck", 10), ("barrier", "dissemination", 10),
    ("broadcast", "binomial_tree", 10),
    ("all_reduce", "double_binary_tree", None)])
def test_log_depth_schedules_build_fast_at_1024_ranks(coll, name, steps):
    sched = build(coll, name, 1024)
    if steps is None:  # up and down both trees' depth, plus the pipeline of 4 chunks
        assert sched.nsteps < 4 * 10 + 4
    else:
        assert sched.nsteps == steps


def test_the_bitwise_check_catches_a_rank_dependent_reduction_order():
    # A one-shot variant where rank r adds the peers in the order r+1, r+2, ...: still a correct
    # all-reduce (it verifies), but the ranks round differently, which the check above must see.
    p, r = 5, np.arange(5)
    steps = [step(r, (r + s) % p, 0, 1 + r) for s in range(1, p)]
    steps += [step(r, r, 1 + (r + s) % p, 0, reduce=True) for s in range(1, p)]
    naive = verify(Schedule("all_reduce", p, "naive", 1, tuple(steps), scratch_blocks=p))
    ins = [x * 4.0 ** (i % 7) for i, x in
           enumerate(make_inputs("all_reduce", p, 64, "float32", "sum", seed=1))]
    outs = execute(naive, [x.astype(np.float32) for x in ins], "sum", "float32")
    assert len({o.tobytes() for o in outs}) > 1


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("p,root", [(2, 1), (5, 0), (5, 3), (8, 7)])
def test_chains_on_several_channels_verify_and_split_the_buffer(coll, p, root):
    """chain_broadcast / chain_reduce with C channels: C chains side by side, each carrying
    its own 1/C of the chunks (NCCL's one chain per ring)."""
    from gpucomm.verify import verify
    sched = build(coll, "ring", p, root=root, chunks=4, channels=3)
    verify(sched)
    assert sched.channels == 3 and dict(sched.params)["channels"] == 3
    ops = [op for s in sched.steps() for op in zip(s.channel.tolist(), s.src_chunk.tolist())]
    assert {ch: sorted({c for k, c in ops if k == ch}) for ch in range(3)} == {
        ch: list(range(4 * ch, 4 * ch + 4)) for ch in range(3)}
