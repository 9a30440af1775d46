"""The shm runtime's plan compiler pass by pass, dependency lowering, the runtime options, and
the proof that bench's predictor costs the very plan the runtime runs (every knob flipped).
In-process: no ranks are spawned."""
import dataclasses

import pytest

from gpucomm.algorithms import build
from gpucomm.bench.plancost import FORMAT, add_predictions, host_plan, plan_work
from gpucomm.collectives import layout
from gpucomm.errors import ConfigError
from gpucomm.runtime import options as rt_options
from gpucomm.runtime.actions import (IN, OUT, PEER, PEER_IN, PEER_OUT, SHM, Action, Entry, Loc,
                                     Op, lower)
from gpucomm.runtime.communicator import choose_algorithm
from gpucomm.runtime.options import ENV_NAMES, RuntimeOptions
from gpucomm.runtime.passes import (SliceMap, Tracker, copy_ins, drop_empty, fill_outputs,
                                    lower_steps, tail_waits, versions)
from gpucomm.runtime.plan import compile_plan, plan_call
from gpucomm.runtime.shm import ShmTransport

MiB = 1 << 20


# --- actions ------------------------------------------------------------------------------
def test_locations_name_themselves_and_their_peer_twin():
    assert [loc.text for loc in Loc] == ["shm", "in", "out", "peer", "peer.in", "peer.out"]
    assert (SHM.of_peer, IN.of_peer, OUT.of_peer, PEER_IN.of_peer) == (PEER, PEER_IN, PEER_OUT,
                                                                       PEER_IN)
    assert PEER_IN.is_private and PEER_OUT.is_private and not PEER.is_private


def test_lower_numbers_references_once_through_removals_and_replacements():
    a0 = Op(rank=0, src=IN, peer=0, src_off=0, dst=OUT, dst_off=0, n=4)
    a1 = Op(rank=0, src=IN, peer=0, src_off=4, dst=OUT, dst_off=4, n=4)
    b0 = Op(rank=1, src=PEER_IN, peer=0, src_off=0, dst=OUT, dst_off=0, n=4,
            deps=[a1, Entry(0)])
    b1 = Op(rank=1, src=PEER_IN, peer=0, src_off=0, dst=OUT, dst_off=0, n=4, deps=[a0])
    ranks = [[a0, a1], [b0, b1]]
    assert lower(ranks)[1][0].deps == ((0, 2),)  # the latest reference per peer wins
    a1.stands_for = a0  # a removed op: a reference to it means the op before it
    ranks[0].remove(a1)
    assert lower(ranks)[1][0].deps == ((0, 1),)
    a0.stands_for = Entry(0)  # ... or the rank's entry
    ranks[0].remove(a0)
    assert lower(ranks)[1][1].deps == ((0, 0),)
    wait = Op.wait(1, 0, [b0])
    b1.stands_for = wait  # replaced: a reference means what replaced it
    ranks[1][1] = wait
    c = Op(rank=0, src=PEER_OUT, peer=1, src_off=0, dst=OUT, dst_off=0, n=4, deps=[b1])
    ranks[0].append(c)
    assert lower(ranks)[0][0].deps == ((1, 2),)
    assert lower(ranks)[1][1].describe() == "wait r1>=1"


def test_drop_empty_forwards_references_to_the_op_before():
    keep = Op(rank=0, src=IN, peer=0, src_off=0, dst=OUT, dst_off=0, n=4)
    empty = Op(rank=0, src=IN, peer=0, src_off=4, dst=OUT, dst_off=4, n=0)
    reader = Op(rank=1, src=PEER_IN, peer=0, src_off=4, dst=OUT, dst_off=4, n=1,
                deps=[empty])
    rows = lower(drop_empty([[keep, empty], [reader]]))
    assert len(rows[0]) == 1 and rows[1][0].deps == ((0, 1),)


# --- the passes, one at a time --------------------------------------------------------------
def _ring_all_reduce(block_count=4, slice_elems=1 << 16):
    lay = SliceMap.of(build("all_reduce", "ring", 2), block_count, slice_elems)
    return lay, versions(lay), Tracker.start(lay)


def test_versions_count_writes_and_the_values_peers_read():
    lay, ver, _ = _ring_all_reduce()
    # ring on 2 ranks: each chunk is written once on each rank (reduced, or copied in)
    assert ver.final.tolist() == [[1, 1], [1, 1]]
    # rank 0 sends its input chunk 0 (version 0), then its reduced chunk 1 (version 1)
    assert {(r, c, v) for r, c, v in ver.peer_read if r == 0} == {(0, 0, 0), (0, 1, 1)}


def test_copy_ins_stage_exactly_the_inputs_peers_read_first():
    lay, ver, t = _ring_all_reduce(block_count=4, slice_elems=1)  # 2-element chunks: 2 slices
    copy_ins(lay, ver, t)
    for r in range(2):
        c = r  # rank r's peer reads r's input chunk r before r overwrites it
        ops = t.ops[r]
        assert [(o.src, o.dst, o.dst_off, o.n) for o in ops] == \
            [(IN, SHM, lo, hi - lo) for lo, hi in lay.slices[c]]
        assert t.loc[r][c] == [SHM, SHM] and t.writer[r][c] == ops


def test_lower_steps_read_after_write_and_final_value_placement():
    lay, ver, t = _ring_all_reduce()
    copy_ins(lay, ver, t)
    lower_steps(lay, ver, t, direct=False)
    red = next(o for o in t.ops[0] if o.reduce)
    # reduces the peer's staged chunk, after the peer's copy-in of it
    assert red.src == PEER and red.deps == [t.ops[1][0]]
    # its result is read by the peer afterwards: kept in shared memory, copied out while hot
    nxt = t.ops[0][t.ops[0].index(red) + 1]
    assert (red.dst, nxt.src, nxt.dst) == (SHM, SHM, OUT)
    lay, ver, t = _ring_all_reduce()
    lower_steps(lay, ver, t, direct=True)  # direct: straight into the output
    red = next(o for o in t.ops[0] if o.reduce)
    assert red.src == PEER_IN and red.dst == OUT
    assert isinstance(red.deps[0], Entry) and red.deps[0].rank == 1


def test_reductions_are_complete_where_their_sum_holds_every_rank():
    """An average divides in a plan's `complete` reductions (NCCL's post-division), so every
    reduced output value must come from exactly one, here or copied from a peer (a tree's
    leaves get theirs): on 3 ranks a ring all-reduce's second reduction of a chunk completes
    it (the first holds 2 of 3 inputs), every reducing plan on 2-5 ranks has complete
    reductions, and no non-reducing plan has any. (That the outputs are the division's bits
    is checked by running them: test_runtime_fast, test_runtime_cplan.)"""
    from gpucomm.algorithms import REGISTRY
    from gpucomm.collectives import get_collective
    lay = SliceMap.of(build("all_reduce", "ring", 3), 3, 1 << 16)
    t = Tracker.start(lay)
    lower_steps(lay, versions(lay), t, direct=True)
    for ops in t.ops:
        assert [o.complete for o in ops if o.reduce] == [False, True]
    for coll, algo in sorted(REGISTRY):
        c = get_collective(coll)
        for p in (2, 3, 4, 5):
            try:
                s = build(coll, algo, p, root=p - 1)
            except Exception:  # noqa: BLE001  (the algorithm does not serve p ranks)
                continue
            for direct in (False, True):
                plan = compile_plan(s, 12, slice_elems=5, direct=direct)
                done = [a for acts in plan.actions for a in acts if a.complete]
                assert all(a.reduce for a in done)
                assert bool(done) == c.reduces, (coll, algo, p, direct)


def test_fill_outputs_copies_chunks_no_op_wrote():
    lay = SliceMap.of(build("broadcast", "ring", 2, root=0), 8, 1 << 16)
    ver, t = versions(lay), Tracker.start(lay)
    lower_steps(lay, ver, t, direct=True)
    assert not t.ops[0]  # the root receives nothing ...
    fill_outputs(lay, ver, t)
    # ... but keeps its input: each of its 8 one-element chunks
    assert [(o.src, o.dst, o.src_off, o.n) for o in t.ops[0]] == [(IN, OUT, c, 1) for c in range(8)]


def test_tail_waits_hold_user_buffers_until_the_last_peer_read():
    lay, ver, t = _ring_all_reduce()
    lower_steps(lay, ver, t, direct=True)
    tail_waits(lay, t)
    for r in range(2):
        last = t.ops[r][-1]
        assert last.n == 0 and len(last.deps) == 1
        peer_op = last.deps[0]
        assert peer_op.rank == 1 - r and peer_op.src.is_private and peer_op.peer == r
        assert peer_op is [o for o in t.ops[1 - r] if o.src.is_private][-1]


def test_compile_plan_is_the_passes_in_order():
    sched = build("all_gather", "ring", 3)
    lay = SliceMap.of(sched, 5, 2)
    ver, t = versions(lay), Tracker.start(lay)
    copy_ins(lay, ver, t)
    lower_steps(lay, ver, t, False)
    fill_outputs(lay, ver, t)
    tail_waits(lay, t)
    assert lower(drop_empty(t.ops)) == compile_plan(sched, 5, slice_elems=2).actions


# --- options ------------------------------------------------------------------------------
def test_options_from_the_environment_and_their_errors(monkeypatch):
    env = {"GPUCOMM_PUSH": "0", "GPUCOMM_SLICE_BYTES": "4096", "GPUCOMM_STREAM_MIN_BYTES": "0"}
    got = RuntimeOptions.from_env(env)
    assert (got.push, got.slice_bytes, got.stream_min_bytes) == (False, 4096, 0)
    assert RuntimeOptions.from_env({}) == RuntimeOptions()
    with pytest.raises(ConfigError, match="GPUCOMM_PUSH='no': allowed are 0 and 1"):
        RuntimeOptions.from_env({"GPUCOMM_PUSH": "no"})
    with pytest.raises(ConfigError, match="GPUCOMM_PIECE_BYTES='1M' is not an integer"):
        RuntimeOptions.from_env({"GPUCOMM_PIECE_BYTES": "1M"})
    with pytest.raises(ConfigError, match="^GPUCOMM_SLICE_BYTES: .*slice_bytes must be an "
                                          "integer >= 1"):
        RuntimeOptions.from_env({"GPUCOMM_SLICE_BYTES": "0"})
    with pytest.raises(ConfigError, match="push must be True or False"):
        RuntimeOptions(push=1)
    with pytest.raises(ConfigError, match="options must be a gpucomm.runtime.RuntimeOptions"):
        rt_options.use({"push": False})
    monkeypatch.setattr(rt_options, "_active", None)  # restored after the test
    monkeypatch.setenv("GPUCOMM_CMA", "0")
    assert rt_options.use(None).cma is False  # read again from the environment
    assert rt_options.use(RuntimeOptions(piece_bytes=64)).piece_bytes == 64
    assert rt_options.current().piece_bytes == 64


# --- the predictor costs the runtime's plan -------------------------------------------------
FLIPPED = {"slice_bytes": 64 << 10, "direct_min_bytes": 64 << 10, "direct_slice_bytes": 96 << 10,
           "many_direct_min_bytes": 64 << 10,
           "a2a_direct_min_bytes": 4 << 20,
           "piece_bytes": 4096, "push": False, "stream": False, "stream_min_bytes": 1 << 30,
           "a2a_stream_min_bytes": 64 << 10,
           "cma": False, "ll_max_bytes": 0}
HOST = {"format": FORMAT, "cma": True}  # a calibrated host that allows cross-memory attach


def test_two_ranks_and_more_go_direct_from_their_own_thresholds():
    """A 2-rank chunk goes direct from `direct_min_bytes`, a wider job's from
    `many_direct_min_bytes`, an all-to-all's from `a2a_direct_min_bytes` at any width."""
    from gpucomm.runtime.plan import is_direct
    opts = RuntimeOptions()
    got = {(coll, p, kib): is_direct(build(coll, "direct", p), kib << 8, 4, opts, True)
           for coll in ("all_gather", "all_to_all") for p in (2, 3)
           for kib in (8, 64, 512)}
    assert [k for k, direct in got.items() if direct] == [
        ("all_gather", 2, 64), ("all_gather", 2, 512), ("all_gather", 3, 512),
        ("all_to_all", 2, 64), ("all_to_all", 2, 512), ("all_to_all", 3, 64),
        ("all_to_all", 3, 512)]
    assert not is_direct(build("all_gather", "direct", 2), 64 << 8, 4, opts, False)


def test_every_option_has_a_flipped_value_here():
    assert set(FLIPPED) == {f.name for f in dataclasses.fields(RuntimeOptions)} == set(ENV_NAMES)
    assert all(FLIPPED[k] != getattr(RuntimeOptions(), k) for k in FLIPPED)


@pytest.mark.parametrize("knob", ["none", *FLIPPED, "all"])
def test_predictor_and_runtime_compile_one_plan_with_every_knob_flipped(monkeypatch, knob):
    """Each knob set through its environment variable, as a user sets it: the shm transport
    (a real one, 1 rank, its cross-memory probe taken as passed) and bench's predictor read
    the options in force and must compile the identical plan for every call."""
    monkeypatch.setattr(rt_options, "_active", None)  # restored after the test
    flips = FLIPPED if knob == "all" else {knob: FLIPPED[knob]} if knob != "none" else {}
    for name, value in flips.items():
        monkeypatch.setenv(ENV_NAMES[name], str(int(value)))
    opts = rt_options.use(None)
    tr = ShmTransport(0, 1, 10.0)
    try:
        assert tr.options == opts
        tr.cma = True
        for coll, p, size in (("all_gather", 2, 16 * MiB), ("all_reduce", 2, 16 * MiB),
                              ("all_reduce", 2, 256 << 10), ("broadcast", 3, 4 * MiB),
                              ("reduce_scatter", 3, 3 * MiB), ("all_to_all", 2, 8 * MiB),
                              ("all_to_all", 2, 1 * MiB), ("all_gather", 3, 768 << 10)):
            sched = build(coll, choose_algorithm(coll, size, p), p).materialize()
            bc = layout(coll, size, "float32", p).block_count
            runtime_plan, _ = tr.plan(sched, bc, 4)
            assert host_plan(HOST, sched, bc, 4) == runtime_plan, (coll, p, size, knob)
    finally:
        tr.close()


def test_push_off_changes_what_the_predictor_costs(monkeypatch):
    """The drift this replaced: with GPUCOMM_PUSH=0 the predictor costed the push plan. A
    2-rank 16 MiB all-gather without pushes pulls the peer's block (a full copy) instead of
    writing its own from cache (half a copy)."""
    sched = build("all_gather", "direct", 2).materialize()
    bc = layout("all_gather", 16 * MiB, "float32", 2).block_count
    monkeypatch.setattr(rt_options, "_active", None)
    on = host_plan(HOST, sched, bc, 4, RuntimeOptions.from_env({}))
    monkeypatch.setenv("GPUCOMM_PUSH", "0")
    off = host_plan(HOST, sched, bc, 4, RuntimeOptions.from_env())
    assert any(a.dst == PEER_OUT for row in on.actions for a in row)
    assert not any(a.dst == PEER_OUT for row in off.actions for a in row)
    assert plan_work(on, 4)[0] == (4 * MiB, 0.0, 8 * MiB)
    assert plan_work(off, 4)[0] == (8 * MiB, 0.0, 8 * MiB)


def test_add_predictions_uses_the_options_it_is_given(monkeypatch, tmp_path):
    from gpucomm.bench import plancost
    host = {"format": FORMAT, "cma": True, "bandwidth_Bps": 1e10, "latency_s": 1e-5,
            "cache_bytes": 0.0, "rates": {1: {k: 1e10 for k in (
                "copy_Bps", "reduce_Bps", "copy_cache_Bps", "reduce_cache_Bps", "stream_Bps")}}}
    host["rates"][1]["copy_Bps"] = 5e9  # copies dearer than streamed copies
    monkeypatch.setattr(plancost, "load_host", lambda path=None: host)
    times = {}
    for push in (True, False):
        rows = [{"size": 16 * MiB, "type": "float32", "algorithm": "auto"}]
        add_predictions(rows, "all_gather", 2, options=RuntimeOptions(push=push))
        times[push] = rows[0]["predicted_time_us"]
    assert times[True] < times[False]


def test_plan_call_turns_options_into_compile_arguments():
    sched = build("all_reduce", "two_shot", 2).materialize()
    bc = layout("all_reduce", 8 * MiB, "float32", 2).block_count
    opts = RuntimeOptions()
    assert plan_call(sched, bc, 4, opts, cma=True).direct
    assert not plan_call(sched, bc, 4, opts, cma=False).direct
    assert not plan_call(sched, bc, 4, opts.replace(cma=False), cma=True).direct
    staged = plan_call(sched, bc, 4, opts.replace(slice_bytes=MiB), cma=False)
    assert max(a.n for row in staged.actions for a in row) == MiB // 4
    assert isinstance(staged.actions[0][0], Action)


def test_bench_header_prints_the_options_in_force_and_parsers_still_read_it(monkeypatch):
    from argparse import Namespace

    from gpucomm.bench.table import format_log
    from gpucomm.cli.bench import _settings
    from gpucomm.interop.nccltests import parse_log
    monkeypatch.setattr(rt_options, "_active", None)
    monkeypatch.setenv("GPUCOMM_PUSH", "0")
    monkeypatch.setenv("GPUCOMM_SLICE_BYTES", str(64 << 10))
    settings = _settings(Namespace(backend="shm"))
    assert settings == ("gpucomm runtime options: slice 64 KiB, direct from 16 KiB (512 KiB on 3 "
                        "ranks or more) in 16 MiB slices (all-to-all from 16 KiB), piece "
                        "256 KiB, push off, stream on "
                        "from 256 KiB (all-to-all: from 32 MiB of buffers in all), cma on, "
                        "small-message path to 2 KiB",)
    assert _settings(Namespace(backend="mpi")) == ()
    row = {"size": 64, "count": 16, "type": "float32", "redop": "sum", "root": -1,
           "time_us": 10.0, "algbw": 0.01, "busbw": 0.01, "wrong": 0, "ip_time_us": 10.0,
           "ip_algbw": 0.01, "ip_busbw": 0.01, "ip_wrong": 0}
    text = format_log([row], test="all_reduce_perf", devices=[(0, "h", 0, "cpu", "CPU", 1)],
                      settings=settings)
    assert "\n# gpucomm runtime options: slice 64 KiB" in text
    assert parse_log(text).collective == "all_reduce"


def test_runtime_modules_and_functions_stay_small():
    """The budget of issue 15: no module in runtime/ over 400 lines, no function over 60
    (p2p.py and rendezvous.py are being split in a parallel change)."""
    import ast
    import pathlib

    import gpucomm.runtime
    over = []
    for path in sorted(pathlib.Path(gpucomm.runtime.__file__).parent.glob("*.py")):
        if path.name in ("p2p.py", "rendezvous.py"):
            continue
        text = path.read_text()
        if text.count("\n") > 400:
            over.append(f"{path.name}: {text.count(chr(10))} lines")
        over += [f"{path.name}:{f.lineno} {f.name}: {f.end_lineno - f.lineno + 1} lines"
                 for f in ast.walk(ast.parse(text))
                 if isinstance(f, ast.FunctionDef) and f.end_lineno - f.lineno + 1 > 60]
    assert not over, over


# sha256 of every plan below, as compiled by the plan compiler before it was split into passes
# (commit d9b5f07, 10-tuples with numbered dependencies): the passes and the push rewrites
# over references must compile the same actions, dependencies included. Since the 2-rank
# broadcast's peer keeps its pull (`push.push_copies` pushes only where the peer pushes back)
# and a 2-rank gather's non-root writes its block (`push.push_from_idle`), 21 plans differ
# (test_shm_plan checks both new forms): 2-rank broadcast, binomial_tree and ring, direct with
# push and streaming (5); 2-rank gather, direct and binomial_tree, direct with push (16). Every
# other plan compiled the same under the old rules, under which this digest was
# 53165dfdbdefedfe12089283bd387e8c14e627c997ab8782dba0...
PRE_PASSES_DIGEST = "aaf0cb596581719e3b36cf647123f619c9257c32849e2ed01a3dcc738f3574be"


def test_plans_are_those_of_the_compiler_before_the_passes():
    import hashlib
    import itertools

    from gpucomm.algorithms import REGISTRY
    h = hashlib.sha256()
    for coll, algo in sorted(REGISTRY):
        for p in (2, 3, 4):
            try:
                s = build(coll, algo, p, root=1)
            except Exception:  # noqa: BLE001  (the algorithm does not exist on p ranks)
                continue
            for bc, se in ((7, 3), (1 << 12, 1 << 10)):
                for direct, push, stream in itertools.product((False, True), repeat=3):
                    for pr in ((None, s.root) if direct else (None,)):
                        plan = compile_plan(s, bc, slice_elems=se, direct=direct, push_root=pr,
                                            push=push, stream=stream)
                        rows = [[(int(a[0]), *map(int, a[1:9]), tuple(a[9])) for a in r]
                                for r in plan.actions]
                        h.update(repr((coll, algo, p, bc, se, direct, push, stream, pr, rows,
                                       plan.shm_elems)).encode())
    assert h.hexdigest() == PRE_PASSES_DIGEST


def test_shm_read_says_whose_shared_buffer_peers_read():
    """A rank's next call waits for its peers to end this one only where a peer reads its
    shared buffer: always in staged plans, never in a direct all-to-all (peers read the
    user buffers, waited for within the call)."""
    for p in (2, 3, 4):
        staged = compile_plan(build("all_reduce", "ring", p), 64, slice_elems=16)
        assert staged.shm_read == (True,) * p
        a2a = compile_plan(build("all_to_all", "direct", p), 64, direct=True)
        assert a2a.shm_read == (False,) * p
        for plan in (staged, a2a):
            for r in range(p):
                reads = any(a.src == PEER and a.peer == r for row in plan.actions
                            for a in row)
                assert plan.shm_read[r] == reads


# --- shared transfers (push.share_transfers) ------------------------------------------------
def _a2a_plan(nbytes, nranks=2, **opts):
    sched = build("all_to_all", "direct", nranks).materialize()
    bc = layout("all_to_all", nbytes, "float32", nranks).block_count
    return plan_call(sched, bc, 4, RuntimeOptions(**opts), cma=True)


def test_two_rank_direct_all_to_all_shares_both_transfers_in_pieces():
    from gpucomm.runtime.push import completes
    plan = _a2a_plan(4 * MiB)  # 2 MiB blocks: 8 pieces of 256 KiB
    for r, row in enumerate(plan.actions):
        q, block = 1 - r, MiB // 2  # elements per block
        read, write = (a for a in row if a.share)
        assert (read.src, read.dst, read.src_off, read.dst_off, read.n) == \
            (PEER_IN, OUT, r * block, q * block, block)
        # the write is the peer's read seen from the other side: this rank's input into it
        assert (write.src, write.dst, write.peer, write.src_off, write.dst_off, write.n) == \
            (IN, PEER_OUT, q, q * block, r * block, block)
        assert read.share == write.share == block // 8 and read.deps == write.deps == ((q, 0),)
        # nothing returns before the peer's write (its last touch of this rank's output)
        assert row[-1].n == 0 and row[-1].deps == ((q, row.index(write) + 1),)
    assert completes(plan.actions)
    # the predictor costs the transfer once, as the plain pull plan's read
    assert plan_work(plan, 4) == plan_work(_a2a_plan(4 * MiB, push=False), 4)


def test_shared_transfers_only_where_both_ranks_read_blocks_of_2_mib_or_more():
    assert all(a.share == MiB // 8 for row in _a2a_plan(8 * MiB).actions for a in row if a.share)
    # 1 MiB all-to-all: 512 KiB blocks; 64 MiB: each block is read in two 16 MiB slices
    for plan in (_a2a_plan(4 * MiB, push=False), _a2a_plan(MiB), _a2a_plan(4 * MiB - 8),
                 _a2a_plan(64 * MiB), _a2a_plan(12 * MiB, nranks=3),
                 _a2a_plan(4 * MiB, cma=False)):
        assert not any(a.share for row in plan.actions for a in row)
    gather = build("all_gather", "direct", 2).materialize()
    plan = plan_call(gather, 4 * MiB, 4, RuntimeOptions(), cma=True)
    assert not any(a.share for row in plan.actions for a in row)


def test_all_to_all_local_blocks_stream_only_where_the_call_outgrows_the_cache():
    """A 2-rank direct all-to-all's local copy streams (from `stream_min_bytes`) only where
    both ranks' inputs and outputs, 8 blocks, reach `a2a_stream_min_bytes` (32 MiB); with
    more ranks, and in other direct plans, from `stream_min_bytes`; staged plans never; and
    the predictor costs what the plan says (a cached copy below the threshold, a streamed one
    above)."""
    # 2 ranks: 4 MiB per rank is 16 MiB in all, 8 MiB is 32
    for nbytes, p, want in ((MiB, 2, -1), (4 * MiB, 2, -1), (8 * MiB, 2, 256 << 10),
                            (2 * MiB, 4, 256 << 10), (4 * MiB, 3, 256 << 10)):
        assert _a2a_plan(nbytes, p).stream_min_bytes == want, (nbytes, p)
    assert _a2a_plan(MiB, a2a_stream_min_bytes=0).stream_min_bytes == 256 << 10
    assert _a2a_plan(16 * MiB, stream=False).stream_min_bytes == -1
    assert _a2a_plan(64 << 10).stream_min_bytes == -1  # 32 KiB chunks: staged
    sched = build("all_gather", "direct", 2).materialize()
    bc = layout("all_gather", 16 * MiB, "float32", 2).block_count
    assert plan_call(sched, bc, 4, RuntimeOptions(), cma=True).stream_min_bytes == 256 << 10
    block = 2 * MiB  # a 4 MiB all-to-all's local block: copied through the cache
    assert plan_work(_a2a_plan(4 * MiB), 4)[0][2] == 0.0
    assert plan_work(_a2a_plan(4 * MiB, a2a_stream_min_bytes=16 * MiB), 4)[0][2] == block
    assert plan_work(_a2a_plan(16 * MiB), 4)[0][2] == 8 * MiB
