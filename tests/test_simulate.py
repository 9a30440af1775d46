"""Simulator: closed forms on contention-free topologies, contention, protocol choice."""

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.errors import ConfigError
from gpucomm.schedule import Schedule, step
from gpucomm.simulate import closed_form as cf
from gpucomm.simulate import get_protocol, ideal_protocol, predict, simulate
from gpucomm.topology import Device, Link, Topology, build_topology

BW, LAT = 100e9, 1e-6
ALPHA, BETA = 2 * LAT, 1 / BW  # GPU -> switch -> GPU: two links' latency, one link's bandwidth


def star(p, bw=BW, lat=LAT):
    """p GPUs on one non-blocking switch: no two ring/pairwise messages share a link."""
    devs = [Device(f"g{i}", "gpu", 0, "h100") for i in range(p)] + [Device("sw", "nvswitch", 0)]
    links = []
    for i in range(p):
        links += [Link(f"g{i}", "sw", bw, lat, "nvlink4"), Link("sw", f"g{i}", bw, lat, "nvlink4")]
    return Topology("star", devs, links, tuple(f"g{i}" for i in range(p)), p, 1)


CASES = [
    ("all_reduce", "ring", {}, cf.ring_all_reduce),
    ("reduce_scatter", "ring", {}, cf.ring_reduce_scatter),
    ("all_gather", "ring", {}, cf.ring_all_gather),
    ("all_reduce", "recursive_halving_doubling", {}, cf.recursive_halving_doubling_all_reduce),
    ("all_reduce", "recursive_doubling", {}, cf.recursive_doubling_all_reduce),
    ("all_gather", "recursive_doubling", {}, cf.recursive_doubling_all_gather),
    ("broadcast", "binomial_tree", {}, cf.binomial_tree_broadcast),
    ("all_to_all", "direct", {}, cf.pairwise_all_to_all),
    ("broadcast", "ring", {"chunks": 4}, lambda p, a, b, n: cf.chain_broadcast(p, a, b, n, 4)),
    # two channels' chains on the same links: each carries half the buffer at half the rate
    ("broadcast", "ring", {"chunks": 4, "channels": 2},
     lambda p, a, b, n: cf.chain_broadcast(p, a, 2 * b, n / 2, 4)),
    ("reduce", "ring", {"chunks": 4, "channels": 2},
     lambda p, a, b, n: cf.chain_broadcast(p, a, 2 * b, n / 2, 4)),
]


@pytest.mark.parametrize("coll,name,params,formula", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
@pytest.mark.parametrize("model", ["analytic", "flow"])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_models_match_closed_forms(coll, name, params, formula, model, p):
    n = 1 << 20
    sched = build(coll, name, p, **params)
    res = simulate(sched, star(p), n, model=model, protocol=ideal_protocol())
    assert res.time_s == pytest.approx(formula(p, ALPHA, BETA, res.size), rel=1e-9)


def test_ring_frontier_equals_general_engine():
    topo = build_topology("dgx-h100", nodes=2)
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        sched = build(coll, "ring", 16, channels=4)
        fast = simulate(sched, topo, 1 << 24, protocol="simple")
        general = simulate(sched, topo, 1 << 24, protocol="simple", trace=True)
        assert fast.time_s == pytest.approx(general.time_s, rel=1e-12)
        assert len(general.timeline) == general.ops


def test_flow_equals_analytic_without_contention():
    topo = build_topology("dgx-h100", nodes=2)
    sched = build("all_reduce", "ring", 16, channels=8)
    a = simulate(sched, topo, 1 << 26, protocol="simple", lanes=2)
    f = simulate(sched, topo, 1 << 26, protocol="simple", lanes=2, model="flow")
    assert f.time_s == pytest.approx(a.time_s, rel=1e-6)


def _pairs(p, pairs):
    src, dst = zip(*pairs)
    return Schedule("sendrecv", p, "pairs", 1, (step(list(src), list(dst), 0, 1),))


def test_two_flows_on_one_nic_take_twice_as_long():
    topo = build_topology("dgx-h100", nodes=2, nics_per_node=1)
    n = 1 << 28
    one = simulate(_pairs(16, [(0, 8)]), topo, n, model="flow", protocol=ideal_protocol())
    two = simulate(_pairs(16, [(0, 8), (1, 9)]), topo, n, model="flow", protocol=ideal_protocol())
    assert two.time_s / one.time_s == pytest.approx(2.0, rel=0.01)


def _nics_of(topo, table):
    """The NICs each route leaves its node by (NIC -> fabric switch links)."""
    return [{topo.links[i].src for i in row if i >= 0 and topo.device(
        topo.links[i].src).kind == "nic" and topo.device(topo.links[i].dst).kind == "switch"}
        for row in table]


def test_inter_node_ops_leave_by_the_sending_gpus_own_nics():
    from gpucomm.simulate.paths import PathTable
    dgx = build_topology("dgx-h100", nodes=2)
    # one GPU per node (a DP group of GPU k): its own NIC, whatever the channel
    for k in (0, 3, 7):
        paths = PathTable(dgx, [k, 8 + k])
        assert paths.rails_per_node == 1
        for c in range(3):
            assert _nics_of(dgx, paths.routes([0], [1], c)) == [{f"n0.nic{k}"}]
    # a full-node ring: its channels spread over all 8 rails of the node
    paths = PathTable(dgx, list(range(16)))
    assert paths.rails_per_node == 8
    left = [_nics_of(dgx, paths.routes([7], [8], c))[0] for c in range(8)]
    assert set().union(*left) == {f"n0.nic{i}" for i in range(8)}
    # the 8 DP groups as one schedule (rank 2k, 2k+1 = GPU k of node 0, node 1): NIC k each
    union = PathTable(dgx, [r for k in range(8) for r in (k, 8 + k)])
    got = _nics_of(dgx, union.routes(np.arange(0, 16, 2), np.arange(1, 16, 2), 0))
    assert got == [{f"n0.nic{k}"} for k in range(8)]
    # a PCIe box: GPUs 0-3 sit next to nic0, 4-7 next to nic1
    pcie = build_topology("pcie", nodes=2)
    union = PathTable(pcie, [r for k in range(8) for r in (k, 8 + k)])
    got = _nics_of(pcie, union.routes(np.arange(0, 16, 2), np.arange(1, 16, 2), 0))
    assert got == [{f"n0.nic{k // 4}"} for k in range(8)]


def test_groups_with_own_nics_do_not_queue_on_nic0():
    n = 1 << 28
    for system, slowdown in (("dgx-h100", 1.0), ("pcie", 4.0)):
        topo = build_topology(system, nodes=2)
        one = simulate(_pairs(16, [(0, 8)]), topo, n, model="flow", protocol=ideal_protocol())
        all8 = simulate(_pairs(16, [(k, 8 + k) for k in range(8)]), topo, n, model="flow",
                        protocol=ideal_protocol())
        assert all8.time_s / one.time_s == pytest.approx(slowdown, rel=0.02), system


def test_oversubscribed_fabric_slows_all_to_all():
    kw = dict(nodes=4, fabric="fat-tree", leaf_ports=8)
    full = build_topology("dgx-h100", oversubscription=1.0, **kw)
    over = build_topology("dgx-h100", oversubscription=4.0, **kw)
    sched = build("all_to_all", "direct", 32)
    t_full = simulate(sched, full, 1 << 28, model="flow", protocol="simple").time_s
    t_over = simulate(sched, over, 1 << 28, model="flow", protocol="simple").time_s
    assert t_over > 1.5 * t_full


def test_pcie_through_host_is_slower_than_nvlink_by_the_catalog_ratio():
    nvl = build_topology("dgx-h100")
    pcie = build_topology("pcie", gpus_per_node=2)
    n = 1 << 30
    t_nvl = simulate(_pairs(2, [(0, 1)]), nvl, n, protocol=ideal_protocol()).time_s
    t_pcie = simulate(_pairs(2, [(0, 1)]), pcie, n, protocol=ideal_protocol()).time_s
    assert t_pcie / t_nvl == pytest.approx(nvl.path_bandwidth(0, 1) / pcie.path_bandwidth(0, 1),
                                           rel=0.01)
    assert t_pcie / t_nvl > 3


def test_auto_picks_ll_small_and_simple_large():
    topo = build_topology("dgx-h100")
    small = predict("all_reduce", 1024, topo, algorithm="ring")
    large = predict("all_reduce", 1 << 30, topo, algorithm="ring")
    assert small.protocol == "ll" and large.protocol == "simple"
    assert {c[1] for c in large.candidates} == {"ll", "ll128", "simple"}
    auto = predict("all_reduce", 1 << 30, topo)
    assert auto.algorithm == "nvls"  # H100 NVSwitch reduces in the switch
    assert predict("all_reduce", 1 << 30, topo, exclude=["nvls"]).algorithm != "nvls"


def test_protocol_efficiency_and_latency_order():
    topo = build_topology("dgx-h100")
    sched = build("all_reduce", "ring", 8)
    t = {p: simulate(sched, topo, 8, protocol=p).time_s for p in ("ll", "ll128", "simple")}
    assert t["ll"] < t["ll128"] < t["simple"]
    big = {p: simulate(sched, topo, 1 << 30, protocol=p, lanes=16).time_s
           for p in ("ll", "simple")}
    assert big["ll"] > 1.9 * big["simple"]  # half of every LL line is flags
    assert get_protocol("ll128").wire_efficiency == pytest.approx(120 / 128)


def test_nvls_busbw_scales_like_in_switch_traffic():
    topo = build_topology("dgx-h100")
    r4 = predict("all_reduce", 8 << 30, topo, algorithm="nvls", ranks=range(4))
    r8 = predict("all_reduce", 8 << 30, topo, algorithm="nvls")
    # per-GPU traffic S(1 + 1/g): busbw = B·2(g-1)/(g+1)
    assert r8.busbw_GBps / r4.busbw_GBps == pytest.approx((14 / 9) / (6 / 5), rel=0.01)


def test_result_fields_and_busbw():
    topo = build_topology("dgx-h100")
    r = predict("all_gather", 1 << 20, topo, algorithm="ring")
    row = r.to_row()
    assert set(row) == {"size", "count", "type", "redop", "root", "time_us", "algbw", "busbw",
                        "algorithm", "protocol", "reason"}
    assert r.busbw_GBps == pytest.approx(r.algbw_GBps * 7 / 8)
    assert r.link_busy_s and max(r.utilisation().values()) <= 1.0 + 1e-9


def test_bad_inputs():
    topo = build_topology("dgx-h100")
    sched = build("all_reduce", "ring", 8)
    with pytest.raises(ConfigError, match="model"):
        simulate(sched, topo, 1024, model="magic")
    with pytest.raises(ConfigError, match="protocol"):
        simulate(sched, topo, 1024, protocol="fast")
    with pytest.raises(ConfigError, match="only 8 GPUs"):
        simulate(build("all_reduce", "ring", 9), topo, 1024)
    with pytest.raises(ConfigError, match="unknown algorithm"):
        predict("all_reduce", 1024, topo, algorithm="nope")
    with pytest.raises(ConfigError, match="nvls"):
        predict("all_reduce", 1024, build_topology("dgx-a100"), algorithm="nvls")


def test_ring_search_follows_nvlink_on_a_cube_mesh():
    from gpucomm.simulate.rings import ring_orders
    topo = build_topology("dgx-v100")
    rings = ring_orders(topo, list(range(8)))
    assert rings is not None and len(rings) > 1
    for ring in rings:  # every hop of every ring is a direct NVLink pair
        for a, b in zip(ring, np.roll(ring, -1)):
            assert topo.links[topo.route(int(a), int(b))[0]].tech.startswith("nvlink")
    assert ring_orders(build_topology("dgx-h100"), list(range(8))) is None  # a switch
    flat = simulate(build("all_reduce", "ring", 8), topo, 1 << 28, protocol="simple")
    searched = predict("all_reduce", 1 << 28, topo, algorithm="ring", protocol="simple")
    assert searched.busbw_GBps > 3 * flat.busbw_GBps


def test_per_channel_ranks_are_validated():
    topo = build_topology("dgx-h100")
    sched = build("all_reduce", "ring", 4, channels=2)
    ok = simulate(sched, topo, 1 << 20, ranks=[[0, 1, 2, 3], [3, 2, 1, 0]])
    assert ok.time_s > 0
    with pytest.raises(ConfigError, match="same GPUs"):
        simulate(sched, topo, 1 << 20, ranks=[[0, 1, 2, 3], [4, 5, 6, 7]])
    with pytest.raises(ConfigError, match="twice"):
        simulate(sched, topo, 1 << 20, ranks=[0, 1, 1, 3])


def test_nvls_chunk_rules_follow_nccl():
    from gpucomm.simulate.nccl import nvls_efficiency
    effs = [nvls_efficiency("hopper", s, 8) for s in (1 << 20, 16 << 20, 256 << 20, 2 << 30)]
    assert effs == sorted(effs) and len(set(effs)) == 4
    assert effs[-1] == pytest.approx(0.85)  # NCCL's nvlsEfficiency at its 128 KiB chunk
    assert nvls_efficiency("ampere", 1 << 30, 8) == 0.0


def test_broadcast_chain_is_pipelined_in_slices():
    topo = build_topology("dgx-a100")
    big = predict("broadcast", 1 << 28, topo, algorithm="ring", protocol="simple")
    assert big.busbw_GBps > 0.8 * topo.path_bandwidth(0, 1) / 1e9


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_chains_follow_the_searched_rings_from_the_root_on_every_channel(coll):
    """On a NVLink mesh (DGX-1's hybrid cube mesh) NCCL's broadcast/reduce run one chain per
    ring of its search, as all_gather does; in rank order they crossed pairs without NVLink
    (ABCI's 4 x V100 broadcast log: 101 GB/s measured, 22 predicted). Every channel's chain
    starts (broadcast) or ends (reduce) at the root's GPU."""
    topo = build_topology("dgx-v100")
    chain = predict(coll, 64 << 20, topo, algorithm="ring", protocol="simple", root=3)
    ring = predict("all_gather", 64 << 20, topo, algorithm="ring", protocol="simple")
    assert chain.busbw_GBps > 0.8 * ring.busbw_GBps
    rows = np.atleast_2d(chain.timed.placement)
    assert len(rows) > 1 and (rows[:, 3] == 3).all()


def test_the_tree_chain_in_a_node_follows_the_searched_ring_not_rank_order():
    """NCCL's tree goes through a node along its searched graph; on DGX-1's hybrid cube mesh
    rank order crosses GPU 3 -> 4 over PCIe (chain 6 GB/s, tree all_reduce 13 ms at 64 MiB)."""
    from gpucomm.simulate import nccl
    from gpucomm.simulate.core import path_table
    from gpucomm.simulate.paths import NVLINK
    topo = build_topology("dgx-v100")
    placement = np.arange(8)
    chain = nccl._shape(path_table(topo, placement), topo, placement)["chain"]
    assert chain.cls == NVLINK and chain.capacity > 20e9
    tree = predict("all_reduce", 64 << 20, topo, algorithm="tree", protocol="ll128")
    ring = predict("all_reduce", 64 << 20, topo, algorithm="ring", protocol="ll128")
    assert tree.time_s < 2 * ring.time_s


def test_a_broadcast_across_nodes_uses_every_rail():
    """One channel per NIC, as NCCL's rings: a broadcast between two DGX H100 is not held to
    one NIC's line rate (it was: 41 GB/s at 256 MiB over 8 x 400G)."""
    topo = build_topology("dgx-h100", nodes=2)
    res = predict("broadcast", 256 << 20, topo, algorithm="ring", protocol="simple")
    assert res.busbw_GBps > 2 * 50


@pytest.mark.parametrize("coll,name", [("all_reduce", "double_binary_tree"),
                                       ("all_reduce", "recursive_halving_doubling"),
                                       ("all_to_all", "direct")])
def test_flow_window_matches_exact_event_checks(monkeypatch, coll, name):
    from gpucomm.simulate import flow
    topo = build_topology("dgx-h100", nodes=4)
    sched = build(coll, name, 32)
    exact = simulate(sched, topo, 1 << 22, model="flow", protocol="simple").time_s
    monkeypatch.setattr(flow, "EXACT_OPS", 0)
    windowed = simulate(sched, topo, 1 << 22, model="flow", protocol="simple").time_s
    assert windowed == pytest.approx(exact, rel=1e-9)


def test_host_issue_time_bounds_back_to_back_collectives():
    from gpucomm.simulate import constants as K
    from gpucomm.simulate.predict import host_issue_s
    topo = build_topology("dgx-a100")
    device = predict("all_reduce", 8, topo)
    assert device.time_s > host_issue_s(1)  # one GPU per thread: the device time shows
    assert predict("all_reduce", 8, topo, gpus_per_thread=1).time_s == device.time_s
    # one thread launching on 8 GPUs in turn (nccl-tests -g 8): 8 launches per collective
    g8 = predict("all_reduce", 8, topo, gpus_per_thread=8)
    assert g8.time_s == pytest.approx(8 * K.HOST_LAUNCH_S) and g8.time_s > device.time_s
    assert g8.busbw_GBps == pytest.approx(device.busbw_GBps * device.time_s / g8.time_s)
    # replayed from a CUDA graph (-G): no host launch cost
    assert predict("all_reduce", 8, topo, gpus_per_thread=8, cuda_graph=True).time_s == \
        device.time_s
    # large messages: the device time dominates, the bound changes nothing
    big = predict("all_reduce", 1 << 28, topo)
    assert predict("all_reduce", 1 << 28, topo, gpus_per_thread=8).time_s == big.time_s
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="gpus_per_thread"):
            predict("all_reduce", 8, topo, gpus_per_thread=bad)


def _frontier_loop(x, a, nsteps):
    """The ring frontier recurrence step by step (what frontier.ring_line solves in closed
    form)."""
    start, fin = np.zeros(len(x)), None
    for s in range(nsteps):
        if s:
            start = np.maximum(np.roll(fin, 1), start + x)
        fin = start + x + a
    return float(fin.max())


@pytest.mark.parametrize("seed", range(40))
def test_ring_closed_form_equals_the_recurrence(seed):
    from gpucomm.simulate.frontier import ring_line
    rng = np.random.default_rng(seed)
    p = int(rng.integers(1, 40))
    nsteps = int(rng.integers(1, 3 * p + 2))
    kinds = int(rng.integers(1, 4)) if seed % 2 else p  # few path classes, or all distinct
    x = rng.choice(rng.uniform(1e-6, 1e-3, kinds), p)
    a = rng.choice(rng.uniform(0, 2e-5, kinds), p)
    end, slope = ring_line(x, a, nsteps)
    assert end == pytest.approx(_frontier_loop(x, a, nsteps), rel=1e-12)
    # the slope is a supporting line of the end as a function of the chunk size c (x = c x0):
    # never above the end anywhere, equal at c = 1
    for c in (0.0, 0.3, 1.0, 2.5, 40.0):
        assert end + slope * (c - 1) <= _frontier_loop(c * x, a, nsteps) * (1 + 1e-12) + 1e-18


@pytest.mark.parametrize("seed", range(30))
def test_ring_closed_form_on_a_periodic_ring_equals_the_recurrence(seed):
    """Identical nodes make x and a repeat every node: d ranks solved, range maxima at the
    ends of residue classes; the same end (and slope) as the whole recurrence."""
    from gpucomm.simulate.frontier import period, ring_line
    rng = np.random.default_rng(500 + seed)
    d = int(rng.integers(1, 9))
    reps = int(rng.integers(2, 9))
    x = np.tile(rng.choice(rng.uniform(1e-6, 1e-3, 3), d), reps)
    a = np.tile(rng.choice(rng.uniform(0, 2e-5, 2), d), reps)
    p = len(x)
    nsteps = int(rng.integers(2, 3 * p + 2))
    assert p % period(x, a) == 0 and period(x, a) <= d
    end, slope = ring_line(x, a, nsteps, d=period(x, a))
    assert end == pytest.approx(_frontier_loop(x, a, nsteps), rel=1e-12)
    assert end == pytest.approx(ring_line(x, a, nsteps)[0], rel=1e-12)
    for c in (0.0, 0.5, 3.0):  # a supporting line of the end in the chunk size
        assert end + slope * (c - 1) <= _frontier_loop(c * x, a, nsteps) * (1 + 1e-12) + 1e-18


@pytest.mark.parametrize("seed", range(12))
def test_ring_curve_answers_every_size_as_solving_it(seed):
    """RingCurve solves a few sizes and fills the rest from supporting lines: every size
    equals the recurrence solved at that size."""
    from gpucomm.simulate.frontier import RingCurve
    rng = np.random.default_rng(100 + seed)
    p = int(rng.integers(2, 30))
    nsteps = int(rng.integers(2, 3 * p))
    rows = [(rng.choice(rng.uniform(1e-9, 1e-6, 3), p), rng.choice(rng.uniform(0, 2e-5, 2), p))
            for _ in range(int(rng.integers(1, 4)))]
    curve = RingCurve(rows, nsteps)
    cs = [0.0] + [float(2 ** k) for k in range(0, 34)] + [3.0 * 2 ** 20 + 7]
    got = curve.values(cs)
    for c in cs:
        want = max(_frontier_loop(c * x0, a, nsteps) for x0, a in rows)
        assert got[c] == pytest.approx(want, rel=1e-9)
    assert curve.solved < len(cs)
