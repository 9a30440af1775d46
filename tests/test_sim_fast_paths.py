"""The simulator's fast paths give the answer of the whole, unreduced simulation.

Fast paths: the ring frontier in closed form (analytic), one node standing for all under
node-shift symmetry (flow), one vectorised pass over every size of a sweep (analytic, every
algorithm), and intra-node routes of replica nodes taken from node 0's table.
"""
import numpy as np
import pytest

from gpucomm.algorithms import algorithms, build
from gpucomm.collectives import COLLECTIVES
from gpucomm.simulate import predict, simulate
from gpucomm.simulate.core import SizeSweep
from gpucomm.simulate.paths import PathTable
from gpucomm.topology import build_topology

REL = 1e-3  # the bar: 0.1%


def _full_flow(sched, topo, size, proto):
    """The flow model op by op (a trace turns every fast path off)."""
    return simulate(sched, topo, size, model="flow", protocol=proto, trace=True)


@pytest.mark.parametrize("system,nodes,kw", [
    ("dgx-h100", 2, {}), ("dgx-h100", 3, {}), ("dgx-a100", 3, {"nics_per_node": 2}),
    ("dgx-h100", 2, {"fabric": "fat-tree"})])
@pytest.mark.parametrize("proto", ["simple", "ll128", "ll"])
def test_flow_ring_from_one_node_equals_whole_ring(system, nodes, kw, proto):
    topo = build_topology(system, nodes=nodes, **kw)
    p = topo.nranks
    # chunks equal (exact symmetry), and an uneven split 1 element in 40,000 apart
    for channels, size in ((1, 4 * p * 16), (2, 4 * p * 2 * 4096), (1, 4 * (p * 40_000 + 5))):
        sched = build("all_reduce", "ring", p, channels=channels)
        fast = simulate(sched, topo, size, model="flow", protocol=proto)
        assert "node-shift symmetry" in fast.note
        full = _full_flow(sched, topo, size, proto)
        assert full.note == ""
        assert fast.time_s == pytest.approx(full.time_s, rel=REL)
        assert fast.ops == full.ops
        busy_f, busy_w = fast.link_busy_s, full.link_busy_s
        assert set(busy_f) == set(busy_w)
        assert all(busy_f[k] == pytest.approx(busy_w[k], rel=REL) for k in busy_w)


def test_flow_symmetry_is_refused_where_the_cluster_is_not_symmetric():
    # 5 nodes on a fat-tree with 4 nodes per leaf: node 3 -> 4 crosses a spine, 0 -> 1 not
    topo = build_topology("dgx-h100", nodes=5, fabric="fat-tree")
    sched = build("all_reduce", "ring", topo.nranks)
    res = simulate(sched, topo, 1 << 20, model="flow", protocol="simple")
    assert res.note == ""
    # a placement other than the identity: the whole schedule
    topo = build_topology("dgx-h100", nodes=2)
    ranks = np.roll(np.arange(16), 3)
    res = simulate(build("all_reduce", "ring", 16), topo, 1 << 20, model="flow",
                   protocol="simple", ranks=ranks)
    assert res.note == ""


CASES = [(c, a.name) for c in COLLECTIVES for a in algorithms(c)]


@pytest.mark.parametrize("coll,name", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_sweep_pass_equals_size_by_size(coll, name):
    topo = build_topology("dgx-h100", nodes=2, nics_per_node=2)
    sched = build(coll, name, topo.nranks)
    sizes = [8, 4096, 3 << 17, 1 << 24]
    alone = [simulate(sched, topo, s, protocol=pr) for s in sizes for pr in ("ll", "simple")]
    sweep = SizeSweep(sizes)
    swept = [simulate(sched, topo, s, protocol=pr, sweep=sweep) for s in sizes
             for pr in ("ll", "simple")]
    for a, b in zip(alone, swept):
        assert b.time_s == pytest.approx(a.time_s, rel=1e-12)
        assert b.link_busy_s.keys() == a.link_busy_s.keys()


@pytest.mark.parametrize("model", ["analytic", "flow"])
def test_predicted_sweep_equals_point_by_point(model):
    topo = build_topology("dgx-h100", nodes=2)
    sizes = [8, 1 << 16, 1 << 22] if model == "analytic" else [1 << 16, 1 << 22]
    alone = [predict("all_reduce", s, topo, model=model) for s in sizes]
    sweep = SizeSweep(sizes)
    swept = [predict("all_reduce", s, topo, model=model, sweep=sweep) for s in sizes]
    for a, b in zip(alone, swept):
        assert (b.algorithm, b.protocol) == (a.algorithm, a.protocol)
        assert b.time_s == pytest.approx(a.time_s, rel=1e-12)


def test_replica_routes_equal_the_topologys_own():
    topo = build_topology("dgx-h100", nodes=3)
    paths = PathTable(topo)
    rng = np.random.default_rng(0)
    src = rng.integers(0, topo.nranks, 400)
    dst = rng.integers(0, topo.nranks, 400)
    ch = rng.integers(0, 4, 400)
    same = (src // 8 == dst // 8) & (src != dst)
    got = paths.routes(src[same], dst[same], ch[same])
    want = topo.route_matrix(src[same], dst[same], ch[same])
    for g, w in zip(got, want):
        assert g[g >= 0].tolist() == w[w >= 0].tolist()


@pytest.mark.parametrize("proto", ["simple", "ll128", "ll"])
def test_flow_ring_steady_state_extrapolated_equals_whole_ring(proto, monkeypatch):
    from gpucomm.simulate import symmetry
    monkeypatch.setattr(symmetry, "STEADY_PROBE_STEPS", 40)  # 6 nodes: 94 steps, probe 40
    topo = build_topology("dgx-h100", nodes=6, nics_per_node=2)
    p = topo.nranks
    sched = build("all_reduce", "ring", p, channels=2)
    for size in (4 * p * 2 * 8, 4 * p * 2 * 4096):
        fast = simulate(sched, topo, size, model="flow", protocol=proto)
        assert "extrapolated" in fast.note
        full = _full_flow(sched, topo, size, proto)
        assert fast.time_s == pytest.approx(full.time_s, rel=REL)
        assert fast.link_busy_s.keys() == full.link_busy_s.keys()


@pytest.mark.parametrize("system,nodes", [("polaris", 6), ("dgx-h100", 3)])
@pytest.mark.parametrize("size", [4, 1000, 123456, 10**7 + 4, 1 << 30])
def test_ring_frontier_with_unequal_chunks_matches_the_general_engine(system, nodes, size,
                                                                      monkeypatch):
    """Sizes that do not split evenly over P x C chunks: the frontier brackets the exact end
    between the smallest and largest chunk and answers within 0.1% (else it declines)."""
    from gpucomm.simulate import analytic
    topo = build_topology(system, nodes=nodes)
    sched = build("all_reduce", "ring", topo.nranks, channels=2)
    fast = simulate(sched, topo, size, protocol="simple").time_s
    monkeypatch.setattr(analytic, "is_ring", lambda s: False)
    whole = simulate(sched, topo, size, protocol="simple").time_s
    assert fast == pytest.approx(whole, rel=1e-3)


# ---- auto: closed-form floors first, simulation only where a candidate can win ----------
AUTO_CLUSTERS = [("dgx-h100", 1, {}), ("dgx-h100", 4, {}), ("dgx-a100", 3, {"nics_per_node": 2}),
                 ("polaris", 6, {}), ("dgx-h100", 16, {"ring_only": True})]


def _full_auto(monkeypatch, *args, **kw):
    """predict with every candidate timed (no floor skips anything)."""
    from gpucomm.simulate import ranking
    with monkeypatch.context() as m:
        m.setattr(ranking, "ring_floor", lambda *a: None)
        return predict(*args, **kw)


@pytest.mark.parametrize("system,nodes,kw", AUTO_CLUSTERS,
                         ids=[f"{s}x{n}" for s, n, _ in AUTO_CLUSTERS])
def test_auto_ranked_by_floors_equals_full_evaluation(system, nodes, kw, monkeypatch):
    kw = dict(kw)
    ring_only = kw.pop("ring_only", False)  # 128 ranks: the collectives auto may time a ring for
    topo = build_topology(system, nodes=nodes, **kw)
    skipped = 0
    for coll in ("all_reduce", "reduce_scatter", "all_gather") if ring_only else COLLECTIVES:
        for size in (8, 4096, 1 << 20, 1 << 26, 1 << 30):
            fast = predict(coll, size, topo)
            full = _full_auto(monkeypatch, coll, size, topo)
            assert (fast.algorithm, fast.protocol) == (full.algorithm, full.protocol), coll
            assert fast.time_s == pytest.approx(full.time_s, rel=1e-12)
            assert fast.reason == full.reason
            assert full.note == "" or "not simulated" not in full.note
            skipped += "not simulated" in fast.note
    if topo.nranks >= 32:
        assert skipped  # the floors do skip rings on a cluster this size


@pytest.mark.parametrize("system,nodes", [("dgx-h100", 2), ("polaris", 4), ("dgx-a100", 3)])
def test_ring_floor_is_below_every_simulated_ring(system, nodes):
    from gpucomm.simulate.ranking import ring_floor
    topo = build_topology(system, nodes=nodes)
    p = topo.nranks
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        for channels in (1, 2):
            sched = build(coll, "ring", p, channels=channels)
            for size in (8, 1 << 16, 1 << 24):
                for pr in ("ll", "ll128", "simple"):
                    t = simulate(sched, topo, size, protocol=pr).time_s
                    assert ring_floor(coll, p, pr) <= t


# ---- a ring is known by its steps, not its name ------------------------------------------
def _renamed(sched, name):
    d = sched.to_dict()
    d["algorithm"] = name
    from gpucomm.schedule import Schedule
    return Schedule.from_dict(d)


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
def test_is_ring_reads_the_steps_not_the_name(coll):
    from gpucomm.simulate.analytic import is_ring
    topo = build_topology("dgx-h100", nodes=2)
    p = topo.nranks
    ring = build(coll, "ring", p, channels=2)
    assert is_ring(ring)
    assert is_ring(_renamed(ring, "my_pipeline"))  # a ring under another name is a ring
    other = {"all_reduce": "recursive_halving_doubling"}.get(coll)
    others = [a.name for a in algorithms(coll) if a.name != "ring"]
    for name in ([other] if other else []) + others[:2]:
        fake = _renamed(build(coll, name, p), "ring")
        assert not is_ring(fake), name
        # timed as what its steps do: the general engine's answer, not the ring frontier's
        want = simulate(build(coll, name, p), topo, 1 << 20, protocol="simple").time_s
        got = simulate(fake, topo, 1 << 20, protocol="simple")
        assert got.time_s == pytest.approx(want, rel=1e-12)
        assert "ring frontier" not in got.note
    note = simulate(ring, topo, 1 << 20, protocol="simple").note
    assert "ring frontier in closed form" in note and "repeat every 8" in note
    # one step out of place (a chunk sent twice), or a step missing: not a ring
    steps = list(ring.materialize().steps())
    from gpucomm.schedule import Schedule, step
    bad = steps[1]
    steps[1] = step(bad.src, bad.dst, np.roll(bad.src_chunk, 1), nchunks=bad.nchunks,
                    reduce=bad.reduce, channel=bad.channel)
    for broken in (steps, list(ring.materialize().steps())[:-1]):
        sched = Schedule(ring.collective, p, "ring", ring.chunks_per_block, tuple(broken),
                         channels=ring.channels, params=ring.params)
        assert not is_ring(sched)


# ---- the flow model re-solves only the max-min groups an event touches -------------------
@pytest.mark.parametrize("system,nodes,kw", [("dgx-a100", 2, {"nics_per_node": 2}),
                                             ("dgx-h100", 3, {"fabric": "fat-tree"})])
def test_flow_partial_resolve_equals_resolving_every_crowded_flow(system, nodes, kw,
                                                                  monkeypatch):
    from gpucomm.simulate import flow
    topo = build_topology(system, nodes=nodes, **kw)
    p = topo.nranks
    cases = [(c, a.name) for c in ("all_reduce", "all_to_all", "all_gather")
             for a in algorithms(c)]
    fast = {k: simulate(build(k[0], k[1], p), topo, 1 << 22, model="flow", protocol="simple",
                        trace=True).time_s for k in cases}
    monkeypatch.setattr(flow, "_touched", lambda m, crowded, changed, nlinks: crowded)
    for k in cases:
        whole = simulate(build(k[0], k[1], p), topo, 1 << 22, model="flow", protocol="simple",
                         trace=True).time_s
        assert fast[k] == pytest.approx(whole, rel=1e-9), k


@pytest.mark.parametrize("system,nodes,kw", [("dgx-h100", 3, {"nic": "ib-ndr"}),
                                             ("dgx-a100", 2, {}), ("polaris", 3, {})])
def test_one_pass_geometry_equals_the_masked_formulas(system, nodes, kw):
    """PathTable.geometry (one gather per property, padding as a sentinel link) gives what
    the masked per-property formulas give, on every pair's routes and on ring steps."""
    topo = build_topology(system, nodes=nodes, **kw)
    paths = PathTable(topo)
    p = topo.nranks
    s, d = np.divmod(np.arange(p * p), p)
    for src, dst, ch in ((s, d, 0), (np.arange(p), np.roll(np.arange(p), -1), 1),
                         (np.repeat(np.arange(p), 4), np.repeat(np.roll(np.arange(p), 1), 4),
                          np.tile(np.arange(4), p))):
        table = paths.routes(src, dst, ch)
        valid = table >= 0
        safe = np.where(valid, table, 0)
        lat = np.where(valid, paths.latency[safe], 0.0).sum(axis=1)
        cls = np.where(valid, paths.link_class[safe], 0).max(axis=1)
        cap = np.where(valid, paths.capacity[safe], np.inf).min(axis=1)
        counts = np.bincount(table[valid], minlength=paths.nlinks)
        share = np.where(valid, (paths.capacity * paths.lane_scale)[safe]
                         / np.maximum(counts[safe], 1), np.inf).min(axis=1)
        for got in (paths.geometry(table), paths.properties(table)):
            np.testing.assert_allclose(got[0], lat, rtol=1e-12)  # summed in another order
            for want, have in zip((cls, cap, share), got[1:]):
                np.testing.assert_array_equal(have, want)
                assert have.dtype == want.dtype


def test_node_groups_in_placement_order():
    """node_groups: nodes in order of their first placed rank, ranks in placement order,
    remembered per placement (the same answer at the second call)."""
    from gpucomm.simulate.nccl import node_groups
    topo = build_topology("dgx-h100", nodes=4)
    rng = np.random.default_rng(7)
    for k in (0, 1, 5, 32):
        placed = rng.permutation(32)[:k]
        want: dict = {}
        for r in placed.tolist():
            want.setdefault(r // 8, []).append(r)
        for _ in range(2):
            got = node_groups(topo, placed)
            assert got == want and list(got) == list(want)


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter", "all_reduce"])
def test_ring_with_some_empty_chunks_is_answered_by_its_frontier_as_the_engine_times_it(coll):
    """Chunks of 0 and 1 element on a cluster whose channels run alike: the channel of the
    larger chunks is the slowest, so the frontier's end at the larger size is the engine's."""
    import dataclasses

    from gpucomm.simulate import analytic
    from gpucomm.simulate.core import coster, path_table
    from gpucomm.simulate.protocol import get_protocol
    topo = build_topology("dgx-h100", nodes=4)
    p, c = topo.nranks, 8
    sched = build(coll, "ring", p, channels=c)
    # a network message costs 1 us however small (what ring_protocol gives a tiny ring)
    proto = dataclasses.replace(get_protocol("ll", "hopper", 4), slice_bytes=4,
                                message_overhead_s=1e-6)
    cst = coster(path_table(topo, np.arange(p)), proto, 1.0, c)
    count = p + 3 if coll == "all_reduce" else 5  # a channel of larger chunks only
    ring = analytic.ring_many(sched, cst, [count], 4)[0]
    general = analytic.run(sched, cst, sched.chunk_bounds(count), 4)
    zero = analytic.run(sched, cst, sched.chunk_bounds(count - count % (p * c if coll ==
                                                                        "all_reduce" else c)), 4)
    assert general.end_s > 1.001 * zero.end_s  # the element's message matters here
    assert ring is not None and ring.end_s == pytest.approx(general.end_s, rel=1e-12)
    few = analytic.ring_many(sched, cst, [3], 4)[0] if coll == "all_reduce" else None
    assert few is None  # an all-reduce whose larger chunks fill no channel: the engine's


@pytest.mark.parametrize("coll,name,nodes", [
    ("broadcast", "ring", 2),  # a chain (chain.chain_many)
    ("all_reduce", "double_binary_tree", 2),  # the general engine
    ("all_reduce", "ring", 3)])  # a ring: the uneven sizes go to the general engine
def test_a_sweep_runs_the_sizes_asked_one_row_each_with_the_batchs_numbers(
        coll, name, nodes, monkeypatch):
    """A SizeSweep answers a chain's and the general engine's sizes when asked, one row each
    (most keys of a sweep across nodes are asked one size): bit for bit the column the batch
    over every size of the sweep gives it."""
    from gpucomm.collectives import layout
    from gpucomm.simulate import analytic, chain, core
    from gpucomm.simulate.core import coster, path_table
    from gpucomm.simulate.protocol import get_protocol
    topo = build_topology("dgx-h100", nodes=nodes)
    sched = build(coll, name, topo.nranks, **({"chunks": 4} if coll == "broadcast" else {}))
    sizes = [8, 4096 + 8, 3 << 17, (1 << 24) + 24]
    proto = get_protocol("simple", "hopper", nodes)
    rows = [0]
    run, chain_many = analytic.run, chain.chain_many

    def counted_run(s, cst, bounds, *args, **kw):
        rows[0] += len(np.atleast_2d(bounds))
        return run(s, cst, bounds, *args, **kw)

    def counted_chain(s, shape, cst, bounds, *args):
        rows[0] += len(np.atleast_2d(bounds))
        return chain_many(s, shape, cst, bounds, *args)
    monkeypatch.setattr(analytic, "run", counted_run)
    monkeypatch.setattr(core, "chain_many", counted_chain)
    sweep = SizeSweep(sizes)
    swept = [simulate(sched, topo, s, protocol=proto, sweep=sweep) for s in sizes[:2]]
    assert rows[0] <= 2  # the two sizes asked, no more
    monkeypatch.undo()
    cst = coster(path_table(topo, np.arange(topo.nranks)), proto, 1.0, sched.channels)
    bounds = np.array([sched.chunk_bounds(layout(sched.collective, s, "float32",
                                                 sched.nranks).block_count) for s in sizes])
    shape = analytic.chain_of(sched)
    batch = chain.chain_many(sched, shape, cst, bounds, 4) if shape else \
        analytic.run(sched, cst, bounds, 4)
    ring = analytic.ring_many(sched, cst, [layout(sched.collective, s, "float32", sched.nranks)
                                           .block_count for s in sizes], 4) \
        if analytic.is_ring(sched) else [None] * len(sizes)
    for j, res in enumerate(swept):
        end = ring[j].end_s if ring[j] is not None else float(batch.end_s[j])
        assert res.time_s == end + proto.base_latency_s
