"""The fabric beyond line rate: per-QP ECMP, adaptive/spray, go-back-N, PFC, DCQCN, failures."""
import numpy as np
import pytest

from gpucomm.errors import ConfigError, TopologyError
from gpucomm.schedule import Schedule, step
from gpucomm.simulate import predict, simulate
from gpucomm.simulate.fabric import RTO_S, goodput, recovery_s
from gpucomm.simulate.paths import PathTable
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network, fabric_summary

GIB = 1 << 30


def _tiny(network=None, **kw):
    """4 one-GPU nodes, one NIC each; nodes 0,1 under leaf 0 and 2,3 under leaf 1; 2 spines."""
    return build_topology("dgx-h100", nodes=4, gpus_per_node=1, nics_per_node=1,
                          nic="roce-400g", fabric="rail-2tier", leaf_ports=2,
                          network=network, **kw)


def _pairs(pairs):
    src, dst = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    return Schedule("sendrecv", 4, "pairs", 1, [step(src, dst, 0, 1)])


def _time(topo, pairs, trace=False, **kw):
    return simulate(_pairs(pairs), topo, GIB, model="flow", protocol="simple", trace=trace, **kw)


def _collide(topo):
    """Do flows 0->2 and 1->3 leave leaf 0 by the same spine cable?"""
    t = PathTable(topo).routes(np.array([0, 1]), np.array([2, 3]), 0)
    return bool(set(t[0][t[0] >= 0]) & set(t[1][t[1] >= 0]))


def _seeds(routing="ecmp", **kw):
    return [Network(routing=routing, connections=1, seed=s, **kw) for s in range(16)]


def test_two_flows_hashed_onto_one_cable_take_twice_as_long():
    one = _time(_tiny(Network(connections=1)), [(0, 2)]).time_s
    nets = _seeds()
    hit = [n for n in nets if _collide(_tiny(n))]
    miss = [n for n in nets if not _collide(_tiny(n))]
    assert hit and miss  # 16 seeds over 2 spines: both outcomes occur
    assert _time(_tiny(hit[0]), [(0, 2), (1, 3)]).time_s == pytest.approx(2 * one, rel=0.02)
    assert _time(_tiny(miss[0]), [(0, 2), (1, 3)]).time_s == pytest.approx(one, rel=0.02)


@pytest.mark.parametrize("routing", ["adaptive", "spray"])
def test_adaptive_and_spray_split_the_two_flows(routing):
    one = _time(_tiny(Network(routing=routing)), [(0, 2)]).time_s
    for net in _seeds(routing)[:4]:
        assert _time(_tiny(net), [(0, 2), (1, 3)]).time_s == pytest.approx(one, rel=0.02)


def test_flowlet_routing_places_each_unit_on_the_least_loaded_path():
    # two one-QP flows out of leaf 0: ECMP collides on some seeds, the least-loaded choice
    # never does, and moves them as fast as the even split
    one = _time(_tiny(Network(routing="flowlet", connections=1)), [(0, 2)]).time_s
    for net in _seeds("flowlet"):
        assert not _collide(_tiny(net))
        assert _time(_tiny(net), [(0, 2), (1, 3)]).time_s == pytest.approx(one, rel=0.02)


def test_flowlet_routing_sees_the_down_links_of_the_path():
    # three leaves (two one-GPU nodes each), two spines: 0->4 and 2->5 leave different leaves
    # for one leaf; placed one after the other, the second avoids the spine whose down-link
    # into leaf 2 the first took (CONGA's leaf-to-leaf congestion feedback), which ECMP's
    # independent hashes do not on some seeds
    def downs(net):
        topo = build_topology("dgx-h100", nodes=6, gpus_per_node=1, nics_per_node=1,
                              nic="roce-400g", fabric="rail-2tier", leaf_ports=2, network=net)
        t = PathTable(topo).routes(np.array([0, 2]), np.array([4, 5]), 0)
        return [set(r[r >= 0]) for r in t]
    assert all(not (a & b & _spine_set(net)) for net in _seeds("flowlet")
               for a, b in [downs(net)])
    assert any(a & b & _spine_set(net) for net in _seeds("ecmp") for a, b in [downs(net)])


def _spine_set(net):
    topo = build_topology("dgx-h100", nodes=6, gpus_per_node=1, nics_per_node=1,
                          nic="roce-400g", fabric="rail-2tier", leaf_ports=2, network=net)
    kind = {d.name: d.kind for d in topo.devices}
    return {i for i, ln in enumerate(topo.links) if kind[ln.src] == kind[ln.dst] == "switch"}


def _spine_links(net):
    paths = PathTable(_tiny(net))
    row = paths.routes(np.array([0]), np.array([2]), 0)[0]
    row = row[row >= 0]
    return row[paths.lane_scale[row] > 1]


def test_hash_without_qp_puts_every_qp_of_a_nic_pair_on_one_path():
    same = _spine_links(Network(connections=1, qps_per_connection=8, hash_inputs=("src", "dst")))
    assert len(same) == 16 and len(set(same.tolist())) == 2  # 8 lanes x (up, down), one spine
    spread = _spine_links(Network(connections=1, qps_per_connection=8))
    assert len(spread) == 16 and len(set(spread.tolist())) == 4  # both spines


def test_lanes_leave_an_uncontended_flow_alone():
    plain = _time(_tiny(), [(0, 2)]).time_s
    for net in (Network(qps_per_connection=4), Network(routing="spray")):
        assert _time(_tiny(net), [(0, 2)]).time_s == pytest.approx(plain, rel=1e-6)
    # and inside a node lanes change nothing
    node = build_topology("dgx-h100")
    base = predict("all_reduce", GIB, node, algorithm="ring", model="flow").time_s
    lanes = build_topology("dgx-h100", network=Network(qps_per_connection=4))
    assert predict("all_reduce", GIB, lanes, algorithm="ring", model="flow").time_s == \
        pytest.approx(base, rel=1e-6)


def test_more_qps_never_hurt_the_median_and_spray_is_best():
    def median(**kw):
        ts = [predict("all_reduce", GIB, build_topology(
            "dgx-h100", nodes=8, nic="roce-400g", fabric="rail-2tier", leaf_ports=4,
            placement="spread", network=Network(seed=s, **kw)), algorithm="ring",
            protocol="simple").time_s for s in range(5)]
        return float(np.median(ts))
    q1, q4, spray = median(), median(qps_per_connection=4), median(routing="spray")
    assert q4 <= q1 * (1 + 1e-9)
    assert spray <= q4 * (1 + 1e-9)


def _gbn_monte_carlo(p, w, packets=200_000, seed=1):
    """A go-back-N sender: a loss wastes the lost packet and the w-1 sent after it."""
    rng = np.random.default_rng(seed)
    sent = delivered = 0
    while delivered < packets:
        lost = rng.random(4096) < p
        if not lost.any():
            sent += 4096
            delivered += 4096
            continue
        k = int(np.argmax(lost))
        delivered += k
        sent += k + w
    return delivered / sent


@pytest.mark.parametrize("p,w", [(1e-3, 61), (1e-2, 20), (5e-2, 8)])
def test_go_back_n_goodput_matches_its_formula_and_a_simulated_sender(p, w):
    assert goodput(p, w) == pytest.approx((1 - p) / (1 + (w - 1) * p))
    assert goodput(p, w) == pytest.approx(_gbn_monte_carlo(p, w), rel=0.03)


def test_lossy_fabric_scales_network_links_by_goodput():
    topo = _tiny(Network(lossless=False, loss_rate=1e-3))
    plain, lossy = PathTable(_tiny()), PathTable(topo)
    net = plain.link_class == 2
    ratio = lossy.capacity[net] / plain.capacity[net]
    rtt = 2 * sum(plain.latency[i] for i in topo.route(0, 3))
    w = np.ceil(plain.capacity[net] * rtt / 4096) + 1
    r = RTO_S * plain.capacity[net] / 4096  # the timeout in packet times at each link's rate
    assert np.allclose(ratio, [(1 - 1e-3) / (1 + (x - 1) * 1e-3 + 2e-6 * y) for x, y in zip(w, r)])
    assert np.array_equal(lossy.capacity[~net], plain.capacity[~net])
    times = [_time(_tiny(Network(lossless=False, loss_rate=p)), [(0, 2)]).time_s
             for p in (0.0, 1e-4, 1e-3, 1e-2)]
    assert times == sorted(times) and times[-1] > times[0] * 1.2


def _gbn_timeout_sender(p, w, r, losses=20_000, seed=2):
    """A go-back-N sender on an RC QP, in packet times: a loss wastes its slot and the w-1
    sent before the receiver's one NAK comes back; a lost NAK, or each loss of the resent
    packet (the receiver does not NAK twice), costs a timeout of r instead."""
    rng = np.random.default_rng(seed)
    good = rng.geometric(p, losses) - 1  # delivered before each loss
    t = float(good.sum()) + losses
    nak_lost = rng.random(losses) < p
    t += float(np.where(nak_lost, r, w - 1).sum())
    t += r * float((rng.geometric(1 - p, losses) - 1).sum())  # resent head lost again
    return float(good.sum()) / t


@pytest.mark.parametrize("p,w,r", [(1e-3, 61, 1e5), (1e-2, 20, 1e3), (1e-2, 61, 5e4)])
def test_go_back_n_with_timeouts_matches_a_simulated_sender(p, w, r):
    assert goodput(p, w, r) == pytest.approx(_gbn_timeout_sender(p, w, r), rel=0.05)
    assert goodput(p, w, r) < goodput(p, w)


def test_lossy_roce_collapses_at_percent_loss_in_both_models():
    # NCCL's QP timeout (NCCL_IB_TIMEOUT 20: ~4.3 s) makes every lost NAK or resent packet
    # a multi-second stall: at 1% loss the wire carries well under 1% goodput, in the
    # analytic and the flow model alike (one capacity), on a contended (hashed) ring
    assert RTO_S == pytest.approx(4.096e-6 * 2 ** 20)
    kw = dict(algorithm="ring", protocol="simple")
    t = {}
    for p in (0.0, 1e-5, 1e-2):
        net = Network(routing="ecmp", lossless=p == 0.0, loss_rate=p)
        topo = build_topology("dgx-h100", nodes=4, nic="roce-400g", fabric="rail-2tier",
                              leaf_ports=2, placement="spread", network=net)
        a = predict("all_reduce", 64 << 20, topo, **kw).time_s
        f = predict("all_reduce", 64 << 20, topo, model="flow", **kw).time_s
        assert abs(f / a - 1) <= 0.15
        t[p] = a
    assert t[1e-5] < t[0.0] * 1.1  # a clean lossy fabric is fine
    assert t[1e-2] > t[0.0] * 20  # collapse: under 5% of lossless


def test_pfc_without_cc_holds_a_victim_to_the_incast_rate():
    # 1, 2 and 0 send to 3 (a 3-way incast at node 3's NIC); 0 also sends to 2: the victim
    # shares node 0's uplink with 0->3
    pairs = [(0, 3), (1, 3), (2, 3), (0, 2)]
    ends = {}
    for cc in ("dcqcn", "none"):
        r = _time(_tiny(Network(connections=1, routing="spray", cc=cc)), pairs, trace=True)
        ends[cc] = {(rec[1], rec[2]): rec[6] for rec in r.timeline}
    assert ends["none"][(0, 2)] > 1.5 * ends["dcqcn"][(0, 2)]
    assert ends["none"][(1, 3)] == pytest.approx(ends["dcqcn"][(1, 3)], rel=0.05)


def test_dcqcn_recovery_charges_the_ramp_when_a_flow_speeds_up():
    # 0->3 (2 chunks) and 2->3 (1 chunk) share node 3's downlink at half rate each; when
    # 2->3 ends, 0->3 climbs from R/2 to R and owes recovery_s x R/2 bytes
    sched = Schedule("sendrecv", 4, "pairs", 4,
                     [step(np.array([0, 2]), np.array([3, 3]), 0, np.array([4, 6]),
                           np.array([2, 1]))])
    t = {cc: simulate(sched, _tiny(Network(connections=1, routing="spray", cc=cc)), GIB,
                      model="flow", protocol="simple").time_s for cc in ("none", "dcqcn")}
    assert recovery_s() == pytest.approx(2 * 55e-6 * (1 - 1 / 32))
    assert t["dcqcn"] - t["none"] == pytest.approx(recovery_s() / 2, rel=0.02)


def test_failed_links_lose_capacity_and_rehash():
    topo = build_topology("dgx-h100", nodes=4, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=2, network=Network(fail_links=1))
    plain = build_topology("dgx-h100", nodes=4, nic="roce-400g", fabric="rail-2tier",
                           leaf_ports=2, network=Network())
    assert len(topo.links) == len(plain.links) - 2
    f = fabric_summary(topo)
    assert f["tiers"][0]["uplinks_per_leaf"] == 1
    assert f["tiers"][0]["oversubscription"] == 2
    with pytest.raises(TopologyError, match="failed cable"):
        _tiny(Network(fail_links=4))
    with pytest.raises(ConfigError, match="more than"):
        _tiny(Network(fail_links=99))


def test_topo_summary_names_tiers_oversubscription_and_redundancy():
    t = build_topology("dgx-h100", nodes=64, nic="roce-400g", fabric="rail-2tier",
                       leaf_ports=32, oversubscription=2)
    f = fabric_summary(t)
    assert [x["tier"] for x in f["tiers"]] == ["leaf", "spine"]
    assert f["tiers"][0]["switches"] == 16 and f["tiers"][1]["switches"] == 16
    assert f["tiers"][0]["oversubscription"] == 2
    assert f["redundancy"]["paths"] == 16


@pytest.mark.parametrize("kw,field", [
    (dict(routing="ospf"), "routing"), (dict(qps_per_connection=0), "qps_per_connection"),
    (dict(hash_inputs=("port",)), "hash_inputs"), (dict(loss_rate=0.1), "loss_rate"),
    (dict(lossless=False, loss_rate=1.5), "loss_rate"), (dict(fail_links=-1), "fail_links"),
    (dict(cc="timely"), "cc")])
def test_bad_network_values_name_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        Network(**kw)


# ---- the command line -----------------------------------------------------------------------
def _cli(capsys, *argv):
    from gpucomm.cli import main
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse refuses a flag's value itself (exit 2, one line)
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


TINY = ("--nodes", "4", "--nic", "roce-400g", "--fabric", "rail-2tier", "--leaf-ports", "2")


def test_topo_show_prints_the_fabric(capsys):
    rc, out, _ = _cli(capsys, "topo", "show", *TINY, "--fail-links", "1", "--routing", "spray")
    assert rc == 0
    assert "leaf   16 switch(es), oversubscription 2, uplinks per leaf 1" in out
    assert "spine  2 switch(es)" in out and "redundancy:" in out
    assert "spray routing" in out and "1 failed cable(s)" in out


def test_sim_flags_change_the_prediction(capsys):
    import json
    base = ("sim", *TINY, "--placement", "spread", "-b", "1G", "-e", "1G", "--algorithm", "ring",
            "--format", "json")
    bw = {}
    for name, extra in (("plain", ()), ("lossy", ("--lossy", "--loss-rate", "1e-2")),
                        ("spray", ("--routing", "spray"))):
        rc, out, _ = _cli(capsys, *base, *extra)
        assert rc == 0
        bw[name] = json.loads(out)["rows"][0]["busbw"]
    assert bw["lossy"] < bw["plain"] * 0.7
    assert bw["spray"] >= bw["lossy"]


@pytest.mark.parametrize("argv,needle", [
    (("--lossy", "--loss-rate", "2"), "--loss-rate: 2 is out of range (allowed: 0..1"),
    (("--loss-rate", "0.01"), "give --lossy"),
    (("--hash-inputs", "src,port"), "hash_inputs src,port not allowed"),
    (("--fail-links", "99"), "fail_links 99 is more than"),
    (("--qps-per-connection", "100"), "qps_per_connection 100 not allowed")])
def test_bad_fabric_flags_are_one_line_exit_2(capsys, argv, needle):
    rc, out, err = _cli(capsys, "sim", *TINY, "-b", "1M", "-e", "1M", *argv)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_plan_takes_the_fabric_flags(capsys):
    import json
    base = ("plan", "--model", "llama3-8b", "--nodes", "4", "--tp", "8", "--seq", "2048",
            "--global-batch", "16", "--nic", "roce-400g", "--fabric", "rail-2tier",
            "--leaf-ports", "1", "--no-contention", "--format", "json")
    rc, out, _ = _cli(capsys, *base)
    assert rc == 0
    lossless = json.loads(out)["comm_time_s"]
    rc, out, _ = _cli(capsys, *base, "--lossy", "--loss-rate", "1e-2")
    assert rc == 0
    lossy = json.loads(out)["comm_time_s"]
    assert lossy["DP"] > lossless["DP"]


def test_auto_routing_follows_the_nic_and_infiniband_never_drops():
    net = Network(lossless=False, loss_rate=1e-3)
    kw = dict(nodes=4, gpus_per_node=1, nics_per_node=1, fabric="rail-2tier", leaf_ports=2,
              network=net)
    ib = build_topology("dgx-h100", nic="ib-ndr", **kw).network
    roce = build_topology("dgx-h100", nic="roce-400g", **kw).network
    efa = build_topology("dgx-h100", nic="efa-400g", **kw).network
    assert (ib.routing, ib.lossless, ib.loss_rate) == ("static", True, 0.0)
    assert (roce.routing, roce.lossless, roce.loss_rate) == ("ecmp", False, 1e-3)
    assert efa.routing == "spray"


def test_failed_cables_never_make_the_all_reduce_faster():
    def t(k, seed):
        topo = build_topology("dgx-h100", nodes=4, nic="roce-400g", fabric="rail-2tier",
                              leaf_ports=2, placement="spread",
                              network=Network(fail_links=k, seed=seed, routing="spray"))
        return predict("all_reduce", GIB, topo, algorithm="ring", protocol="simple").time_s
    slower = 0
    for seed in range(3):
        base, failed = t(0, seed), t(3, seed)
        assert failed >= base * (1 - 1e-9)
        slower += failed > base * 1.05
    assert slower  # losing cables on the spine path shows


def test_sim_seeds_gives_the_median_and_spread(capsys):
    import json
    rc, out, _ = _cli(capsys, "sim", "--nodes", "8", "--nic", "roce-400g", "--fabric", "rail-2tier",
                      "--leaf-ports", "4", "--placement", "random", "--seeds", "4", "-b", "1G",
                      "-e", "1G", "--algorithm", "ring", "--format", "json")
    assert rc == 0
    row = json.loads(out)["rows"][0]
    assert row["seeds"] == 4
    assert row["busbw_min"] <= row["busbw_median"] <= row["busbw_max"]
    assert row["busbw_min"] < row["busbw_max"]  # jobs land and hash differently


# ---- issue 25: every algorithm's network traffic on the fabric ------------------------------
def _cluster(seed=0, **kw):
    """8 DGX H100 on a 2-leaf-group rail fabric, spread so that tree edges cross the spines."""
    return build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=4, placement="spread", network=Network(seed=seed, **kw))


@pytest.mark.parametrize("algorithm", ["ring", "tree", "nvls_tree"])
def test_ecmp_with_one_qp_is_slower_than_an_even_split(algorithm):
    # nvls_tree opens 8 connections per tree edge and rail (every NVLS channel its own), so
    # on a rail fabric its busiest NIC (an inner tree node) carries more than the hashed
    # cables do; on a top-of-rack leaf (16 NICs over 18 uplinks) the cables are as loaded
    def cluster(seed, **kw):
        if algorithm != "nvls_tree":
            return _cluster(seed, **kw)
        return build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="tor-2tier",
                              leaf_ports=2, placement="spread",
                              network=Network(seed=seed, **kw))

    def t(**kw):
        return float(np.median([predict("all_reduce", 4 * GIB, cluster(s, **kw),
                                        algorithm=algorithm).time_s for s in range(3)]))
    ecmp, spray = t(routing="ecmp"), t(routing="spray")
    assert ecmp > spray * 1.05


@pytest.mark.parametrize("algorithm", ["ring", "tree", "nvls_tree"])
def test_losing_half_the_spine_cables_slows_every_algorithm(algorithm):
    # 2 leaf groups x 8 rails = 16 leaves x 4 uplinks = 64 cables; 24 down (32 cut some
    # leaf pairs apart with this seed)
    whole = predict("all_reduce", 4 * GIB, _cluster(routing="spray"), algorithm=algorithm)
    cut = predict("all_reduce", 4 * GIB, _cluster(routing="spray", fail_links=24),
                  algorithm=algorithm)
    assert cut.time_s > whole.time_s * 1.1


def test_tree_without_a_fabric_model_is_unchanged():
    from gpucomm.simulate.nccl_trees import tree_fabric_slowdown
    from gpucomm.simulate.core import path_table
    topo = build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=4, placement="spread")
    assert topo.network is None
    pl = np.arange(topo.nranks)
    from gpucomm.simulate.nccl import node_groups
    assert tree_fabric_slowdown(path_table(topo, pl), pl, node_groups(topo, pl)) == 1.0


def test_trees_open_nccls_connections_per_rail():
    # NCCL: tree channels are the search's (one per NIC) and their copies, tree 0 on the
    # first half and tree 1 on the copies (1 connection per tree and rail on 8 NICs);
    # NVLSTree runs all 16 NVLS channels on every head, tree c % 2 (8 per tree and rail)
    from gpucomm.simulate.core import path_table
    from gpucomm.simulate.nccl import node_groups
    from gpucomm.simulate.nccl_trees import tree_fabric_slowdown

    def slow(nvls, seed, **kw):
        topo = build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="tor-2tier",
                              leaf_ports=2, placement="spread",
                              network=Network(seed=seed, routing="ecmp", **kw))
        pl = np.arange(topo.nranks)
        return tree_fabric_slowdown(path_table(topo, pl), pl, node_groups(topo, pl), nvls)

    for seed in range(3):
        assert slow(False, seed) == slow(False, seed, connections=1)
        assert slow(True, seed) == slow(False, seed, connections=8)
    # more connections, more hashes: the busiest cable nearer the mean
    assert np.mean([slow(True, s) for s in range(4)]) < np.mean([slow(False, s)
                                                                 for s in range(4)])


def test_nvls_tree_on_a_one_to_one_rail_fabric_is_paced_by_its_nic(monkeypatch):
    # NVLSTree's inner node sends on 4 tree edges (3 in the tree where it is inner, its
    # parent edge in the other) x 8 connections (NVLS channels of that tree) = 32 at once;
    # every connection moves at the pipeline's one pace, so a NIC's capacity / 32 each. On a
    # 1:1 rail fabric a leaf-spine cable has the NIC's capacity: hashing costs nothing until
    # a cable carries more than 32 of them, and then exactly cable / 32. The tree (1
    # connection per tree edge and rail) has 4 on that NIC: a cable with 5 already slows it
    from gpucomm.simulate import fabric
    from gpucomm.simulate.core import path_table
    from gpucomm.simulate.nccl import node_groups
    from gpucomm.simulate.nccl_trees import tree_fabric_slowdown
    seen = []
    pace = fabric.FabricPolicy.pipeline_slowdown

    def spy(self, table, capacity):
        seen.append((self, table, capacity))
        return pace(self, table, capacity)
    monkeypatch.setattr(fabric.FabricPolicy, "pipeline_slowdown", spy)

    def loads(nvls, seed, routing="ecmp"):
        topo = build_topology("dgx-h100", nodes=16, nic="roce-400g", fabric="rail-2tier",
                              leaf_ports=8, placement="random",
                              network=Network(seed=seed, routing=routing))
        pl = np.arange(topo.nranks)
        slow = tree_fabric_slowdown(path_table(topo, pl), pl, node_groups(topo, pl), nvls)
        pol, table, cap = seen[-1]
        cnt = np.bincount(table[table >= 0], minlength=len(cap))
        kind = {d.name: d.kind for d in topo.devices}
        wire = np.array([{kind[ln.src], kind[ln.dst]} == {"nic", "switch"}
                         for ln in topo.links])
        nic, cable = wire & (cnt > 0), pol.between & (cnt > 0)
        assert np.ptp(cap[nic | cable]) == 0  # 1:1: one capacity for NICs and cables
        return slow, int(cnt[nic].max()), int(cnt[cable].max())

    nvls = [loads(True, seed) for seed in range(8)]  # seed 7: a cable with 33
    for slow, nic, cable in nvls:
        assert nic == 4 * 8
        assert slow == pytest.approx(max(cable / nic, 1.0))
    assert max(c for _, _, c in nvls) > 32 and np.median([s for s, _, _ in nvls]) == 1.0
    assert loads(True, 7, "spray")[0] == 1.0
    tree = [loads(False, seed) for seed in range(3)]
    for slow, nic, cable in tree:
        assert (nic, slow) == (4, pytest.approx(max(cable / nic, 1.0)))
    assert np.median([s for s, _, _ in tree]) > 1.0


def test_double_binary_tree_is_ncclgetdtree():
    from gpucomm.simulate.nccl_trees import dtree_parents
    for n in range(2, 40):
        t0, t1 = dtree_parents(n)
        for tree in (t0, t1):
            assert (tree < 0).sum() == 1  # one root
            for r in range(n):  # every rank reaches the root
                seen, x = 0, r
                while tree[x] >= 0 and seen <= n:
                    x, seen = tree[x], seen + 1
                assert seen <= n
        inner0 = set(t0[t0 >= 0].tolist())
        inner1 = set(t1[t1 >= 0].tolist())
        assert len(inner0 & inner1) <= 1  # a rank inner in one tree is a leaf in the other
    assert [p.tolist() for p in dtree_parents(8)] == [[-1, 2, 4, 2, 0, 6, 4, 6],
                                                      [1, 3, 1, 7, 5, 3, 5, -1]]


def test_static_routing_is_by_destination():
    # flows into one leaf from another: destination mod up-ports never collide (2 spines,
    # 2 destinations under leaf 1), whatever the seed
    for s in range(4):
        assert not _collide(_tiny(Network(routing="static", seed=s)))
    # two sources to one destination share its path (D-mod-k: by destination only)
    t = PathTable(_tiny(Network(routing="static"))).routes(np.array([0, 1]), np.array([2, 2]), 0)
    spine = [set(r[r >= 0]) for r in t]
    assert len(spine[0] & spine[1]) >= 2  # the spine down-link and the NIC down-link


def test_placement_and_hash_seeds_are_separate():
    def ring(**kw):
        return _tiny(Network(**kw), placement="random")
    a, b = ring(seed=0, placement_seed=5), ring(seed=3, placement_seed=5)
    assert [ln.dst for ln in a.links] == [ln.dst for ln in b.links]  # same placement
    c = ring(seed=0, placement_seed=0)
    d = ring(seed=0)  # placement_seed -1: the hash seed
    assert [ln.dst for ln in c.links] == [ln.dst for ln in d.links]
    with pytest.raises(ConfigError, match="placement_seed"):
        Network(placement_seed=-2)


def test_cli_port_level_fabric_gets_the_network_model(capsys):
    rc, out, _ = _cli(capsys, "topo", "show", *TINY)
    assert rc == 0 and "network: ecmp routing" in out
    rc, out, _ = _cli(capsys, "topo", "show", *TINY, "--nic", "ib-ndr")
    assert rc == 0 and "network: static routing" in out
    rc, out, _ = _cli(capsys, "topo", "show", *TINY, "--hash-seed", "3", "--seed", "7")
    assert "seed 3, placement seed 7" in out


@pytest.mark.parametrize("kw", [dict(), dict(network=Network(fail_links=5, seed=2)),
                                dict(placement="random", oversubscription=2)])
def test_two_tier_switch_table_is_the_general_search(kw):
    from gpucomm.topology.routing import _pad2
    t = build_topology("dgx-h100", nodes=12, nic="roce-400g", fabric="rail-2tier",
                       leaf_ports=4, **kw)
    r = t.router
    tab = r._ensure_tables()
    up = np.unique(np.asarray(r.ldst)[tab["up"]])
    down = np.unique(np.asarray(r.lsrc)[tab["down"]])
    slow = _pad2([[r._paths(int(a), int(b), False) for b in down] for a in up])
    fast = r._two_tier(up, down)
    assert fast is not None
    assert np.array_equal(slow[1], fast[1])
    alts = slow[0].shape[2]
    assert np.array_equal(slow[0], fast[0][:, :, :alts]) and (fast[0][:, :, alts:] < 0).all()


def test_flow_model_refuses_early_past_its_op_budget(monkeypatch):
    from gpucomm.simulate import core
    monkeypatch.setattr(core, "FLOW_MAX_OPS", 100)
    with pytest.raises(ConfigError, match="more than 100 ops.*--sim-model analytic"):
        predict("all_reduce", GIB, _cluster(routing="ecmp"), algorithm="ring", model="flow")


def test_analytic_and_flow_agree_on_a_contended_ring_under_dcqcn():
    # collisions that persist from step to step cost DCQCN no ramp: its rate never gets to
    # climb between the steps of a pipelined ring (the old per-event debt made flow 2.4x
    # slower at 1 GiB on 16 nodes)
    topo = build_topology("dgx-h100", nodes=4, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=2, placement="spread", network=Network(routing="ecmp"))
    kw = dict(algorithm="ring", protocol="simple")
    for size in (64 << 20, 256 << 20):
        a = predict("all_reduce", size, topo, **kw).time_s
        f = predict("all_reduce", size, topo, model="flow", **kw).time_s
        assert abs(f / a - 1) <= 0.15


def test_dcqcn_ramp_is_cut_short_when_the_competitor_returns():
    # 0->3 (2 chunks) shares node 3's downlink with 2->3 (1 chunk), whose successor (1
    # chunk into the same destination chunk, on another channel) follows as soon as the
    # data landed: 0->3's fair rate rises for a hop latency only, and the two end together,
    # so DCQCN has next to nothing to climb (a per-event debt charged R/2 x recovery_s)
    sched = Schedule("sendrecv", 4, "pairs", 8,
                     [step(np.array([0, 2]), np.array([3, 3]), 0, np.array([4, 6]),
                           np.array([2, 1])),
                      step(np.array([2]), np.array([3]), 7, 6, 1, channel=1)])
    t = {cc: simulate(sched, _tiny(Network(connections=1, routing="spray", cc=cc)), GIB,
                      model="flow", protocol="simple").time_s for cc in ("none", "dcqcn")}
    # (what it loses: the hop latency during which it could not yet climb, well under the
    # R/2 x recovery_s a sustained rise costs)
    assert 0 <= t["dcqcn"] - t["none"] < recovery_s() / 4


def test_background_load_adaptive_routes_around_what_spraying_meets():
    def t(routing, bg):
        return predict("all_reduce", 4 * GIB, _cluster(routing=routing, background=bg),
                       algorithm="ring").time_s
    spray0, spray, ar, ecmp0, ecmp = (t("spray", 0.0), t("spray", 0.3), t("adaptive", 0.3),
                                      t("ecmp", 0.0), t("ecmp", 0.3))
    assert spray > spray0 * 1.05 and ecmp > ecmp0 * 1.05  # other jobs' load costs
    assert ar < spray  # adaptive routing fills what the cables leave together
    # flowlets see what other jobs leave too, in whole queue pairs: better than hashing
    flowlet = t("flowlet", 0.3)
    assert ecmp > flowlet > t("flowlet", 0.0) * 1.02
    # Spectrum-X decides by the leaf's own queues; without InfiniBand's credits a loaded
    # spine-to-leaf cable is not in its view, so it stays between the two
    # (up to the share head-of-line blocking takes from it, which the even split of spray
    # does not pay: fabric_ar.ar_share, about 1% with Spectrum-4's buffer)
    sx = t("spectrum-x", 0.3)
    assert ar < sx <= spray * 1.01
    # on a fabric of its own, what sets them apart is what one ingress port holds before its
    # sender stops: Spectrum-4's shared buffer against credits for the loop
    # (fabric_ar.AR_SWITCHES: less head-of-line blocking on Spectrum-X)
    assert t("spectrum-x", 0.0) < t("adaptive", 0.0)
    with pytest.raises(ConfigError, match="background"):
        Network(background=0.6)


def _three_tier(**kw):
    """8 one-GPU nodes on a rail-3tier fat tree of 4-port switches: 4 leaves (2 nodes each),
    2 pods of 2 leaves, 2 aggregation switches per pod, 4 core switches."""
    return build_topology("dgx-h100", nodes=8, gpus_per_node=1, nics_per_node=1,
                          nic="roce-400g", fabric="rail-3tier", leaf_ports=2,
                          network=Network(routing="ecmp", connections=1,
                                          qps_per_connection=16, **kw))


def test_three_tier_has_two_hashing_stages_and_polarization_halves_them():
    def core_uplinks(topo):
        names = [d.name for d in topo.devices]
        t = PathTable(topo).routes(np.array([0]), np.array([4]), 0)  # pod 0 -> pod 1
        return {i for i in t[0][t[0] >= 0]
                if names[topo.index_of(topo.links[i].src)].startswith("agg")
                and topo.links[i].dst.startswith("core")}
    assert fabric_summary(_three_tier())["redundancy"]["paths"] == 2  # within a pod
    free = [core_uplinks(_three_tier(seed=s)) for s in range(4)]
    stuck = [core_uplinks(_three_tier(seed=s, polarized=True)) for s in range(4)]
    # 16 QPs over 2 aggregation switches x 2 cores: independent stages use all 4
    # agg->core cables; polarized, each aggregation switch repeats the leaf's choice: 2
    assert all(len(u) == 4 for u in free)
    assert all(len(u) == 2 for u in stuck)


def test_single_pod_three_tier_joins_rails_at_the_core():
    """One pod (2 leaf groups of 2 nodes, leaf_ports 2), 2 rails: the shared core is the only
    tier both rails reach, so it is built even without a second pod."""
    topo = build_topology("dgx-h100", nodes=4, gpus_per_node=2, nics_per_node=2,
                          nic="roce-400g", fabric="rail-3tier", leaf_ports=2)
    topo.check_routes()
    names = [d.name for d in topo.devices]
    rank = {names[topo.index_of(r)]: k for k, r in enumerate(topo.ranks)}

    def via(a, b):
        return {topo.links[i].dst.split(".")[0].rstrip("0123456789")
                for i in topo.route(rank[a], rank[b])}
    assert "core" in via("n0.gpu0", "n2.gpu1")  # rail 0 -> rail 1: up to the core
    assert "core" not in via("n0.gpu0", "n2.gpu0")  # one rail, one pod: leaf, agg, leaf
    tiers = fabric_summary(topo)["tiers"]
    assert [t["tier"] for t in tiers] == ["leaf", "spine", "core"]
    assert tiers[2]["switches"] == 4  # uplinks 2 x leaf_ports 2, shared by both rails


def test_tied_paths_keep_the_first_64_depth_first_when_a_fabric_has_more():
    """Between pods of a 16-port three-tier fabric there are 16 x 16 = 256 tied paths; the
    router keeps the first MAX_ECMP of a depth-first walk back from the destination (each
    predecessor link in turn), sorted: a reference walk, path by path."""
    topo = build_topology("dgx-h100", nodes=272, gpus_per_node=1, nics_per_node=1,
                          nic="roce-400g", fabric="rail-3tier", leaf_ports=16)
    r = topo.router
    leaf = [topo.index_of(f"leaf{g}.0") for g in (0, 3, 16)]  # pod 0, pod 0, pod 1

    def reference(a, b):
        _, preds = r._sssp(a, False, True)
        out = []

        def walk(v, tail):
            if v == a:
                out.append(tuple(reversed(tail)))
            for li in preds.get(v, []) if v != a else []:
                if len(out) < 64:
                    walk(int(r.lsrc[li]), tail + [li])
        walk(b, [])
        return sorted(out)
    for a in leaf:
        for b in leaf:
            if a != b:
                assert r._paths(a, b, False) == reference(a, b)
    assert len(r._paths(leaf[0], leaf[2], False)) == 64  # capped from 256
    assert len(r._paths(leaf[0], leaf[1], False)) == 16  # within a pod: one per agg switch


def test_polarized_hashing_slows_a_three_tier_ring():
    def t(**kw):
        topo = build_topology("dgx-h100", nodes=32, nic="roce-400g", fabric="rail-3tier",
                              leaf_ports=4, placement="random",
                              network=Network(routing="ecmp", **kw))
        return predict("all_reduce", GIB, topo, algorithm="ring", protocol="simple").time_s
    free = np.median([t(seed=s) for s in range(2)])
    stuck = np.median([t(seed=s, polarized=True) for s in range(2)])
    assert stuck > free * 1.2
    with pytest.raises(ConfigError, match="polarized"):
        Network(polarized="yes")


def test_tor_2tier_puts_every_nic_of_a_rack_on_one_leaf_with_spare_uplinks():
    """Meta's AI Zone shape: a top-of-rack leaf over two 8-NIC hosts, 1:1.125 uplinks."""
    t = build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="tor-2tier", leaf_ports=2,
                       oversubscription=1 / 1.125)
    f = fabric_summary(t)
    assert f["tiers"][0]["switches"] == 4 and f["tiers"][0]["uplinks_per_leaf"] == 18
    assert f["tiers"][1]["switches"] == 18 and f["redundancy"]["paths"] == 18
    assert f["tiers"][0]["oversubscription"] == pytest.approx(16 / 18, abs=1e-3)
    leaf_of = {ln.src: ln.dst for ln in t.links if ln.dst.startswith("leaf")
               and ln.src.startswith("n")}
    assert {leaf_of[f"n{k}.nic{i}"] for k in (2, 3) for i in range(8)} == {"leaf1"}
    # within a rack, nodes meet at their leaf: the route never reaches a spine
    assert not any(t.links[i].dst.startswith("spine") for i in t.route(16, 24))
    with pytest.raises(ConfigError, match="oversubscription 0.8"):
        build_topology("dgx-h100", nodes=2, nic="roce-400g", oversubscription=0.8)


def test_tor_2tier_qp_scaling_helps_a_hashed_ring():
    def ring(q, routing="ecmp"):
        t = build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="tor-2tier",
                           leaf_ports=2, oversubscription=1 / 1.125,
                           network=Network(routing=routing, qps_per_connection=q, seed=1))
        return predict("all_reduce", 1 << 30, t, algorithm="ring", protocol="simple").time_s
    one, four, spray = ring(1), ring(4), ring(1, "spray")
    assert spray <= four < one


def test_maxmin_rates_fill_progressively_and_count_lanes():
    from gpucomm.simulate.fabric_ar import maxmin_rates
    # A and B share link 0 (capacity 1), B and C link 1 (capacity 2); D's two lanes on link 2
    # (capacity 1, carried twice as it is split over lanes) each take half of D
    table = np.array([[0, -1], [0, 1], [1, -1], [2, 2]])
    rates = maxmin_rates(table, np.array([1.0, 2.0, 1.0]), np.array([1.0, 1.0, 2.0]))
    assert rates == pytest.approx([0.5, 0.5, 1.5, 1.0])


def test_random_pairs_mean_share_orders_ecmp_flowlet_and_per_packet():
    """Geoffray & Hoefler's statistic on a small Clos (64 one-NIC nodes, 8 per leaf): the
    mean over random pairs of the max-min rate; hashing collides, flowlets avoid it at this
    size, per-packet adaptive routing is the even split."""
    from gpucomm.simulate.fabric_ar import maxmin_rates

    def mean_share(routing, seed):
        topo = build_topology("dgx-h100", nodes=64, gpus_per_node=1, nics_per_node=1,
                              nic="roce-400g", fabric="rail-2tier", leaf_ports=8,
                              placement="random", network=Network(routing=routing, seed=seed,
                                                                  connections=1))
        paths = PathTable(topo)
        order = np.random.default_rng(seed).permutation(64)
        table = paths.routes(order[0::2], order[1::2], 0)
        return (maxmin_rates(table, paths.capacity, paths.lane_scale)
                / paths.properties(table)[2]).mean()
    ecmp, flowlet, ib, sx = ([mean_share(r, s) for s in range(3)]
                             for r in ("ecmp", "flowlet", "adaptive", "spectrum-x"))
    # (G&H: adaptive routing reaches 100% at small node counts, 77% at 512)
    assert max(ecmp) < 0.9 and np.mean(ecmp) < 0.95 <= np.mean(flowlet) <= 1.0
    assert ib == pytest.approx([1.0] * 3) and sx == pytest.approx([1.0] * 3)
