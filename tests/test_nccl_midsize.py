"""Mid-size (1-64 MiB) mechanisms of NCCL's collectives: the chunk sizes NCCL picks per message
(enqueue.cc calcCollChunking), the pipeline fill of trees and NVLSTree, the latency refinements
NCCL's own model gives rings across nodes (tuning.cc), and the network stack of EFA
(aws-ofi-nccl's tuner). Each is checked against the hand-computed value of its source."""
import pytest

from gpucomm.simulate import constants as K
from gpucomm.simulate import nccl, predict
from gpucomm.simulate.protocol import (get_protocol, net_stack_floor_s, ring_channels,
                                      ring_protocol)
from gpucomm.topology import build_topology

MIB = 1 << 20


@pytest.mark.parametrize("proto,size,nodes,ppn,chunk", [
    # nstepsLL128 = 1 + 2 + 0.8 = 3.8: halve 576000 while S/(16 c) < 30.4 (down to 128 KiB):
    # 288000, 144000, 72000; then while S/(16 c) < 7.6 (down to 32 KiB): 36000
    ("ll128", 8 * MIB, 4, 8, 36000),
    ("ll128", 1 << 30, 4, 8, 576000),  # large: the full LL128 slot's payload
    ("ll128", 64 * MIB, 2, 8, 144000),  # 2.8 x 64 / 8 = 22.4: 576000 -> 288000 -> 144000
    ("simple", 64 * MIB, 2, 8, 512 * 1024),  # one 512 KiB Simple slot, no halving
    ("ll", 64 * MIB, 2, 8, 32 * 1024),  # half of the 64 KiB LL slot is payload
    ("simple", 1 * MIB, 2, 8, MIB / 16),  # a channel's whole share is one chunk
])
def test_tree_chunk_follows_calc_coll_chunking(proto, size, nodes, ppn, chunk):
    assert nccl.tree_chunk_bytes(proto, size, 16, nodes, ppn) == chunk


@pytest.mark.parametrize("version,size,nodes,ppn,chunk", [
    # NCCL 2.18, depth = 4 - 1 + 1 = 4 (Polaris x 2): 4 MiB / 16 channels is 256 KiB, one
    # 512 KiB slot's share; halve while S / (16 c) < 32 (down to 128 KiB), < 16 (to 64 KiB),
    # < 4 (to 32 KiB): 512 -> 256 -> 128 KiB (S / (16 x 128 KiB) = 2 < 16) -> 64 KiB (4 < 16)
    ("2.18", 4 * MIB, 2, 4, 64 * 1024),
    ("2.18", 1 << 30, 2, 4, 512 * 1024),  # 128 chunks a channel: no halving
    ("2.18", 64 * MIB, 16, 8, 64 * 1024),  # depth 11: 8, 16 < 88 -> 128 KiB; 32 < 44 -> 64 KiB
    ("2.21", 4 * MIB, 2, 4, 256 * 1024),  # 2.20 removed the rule: the channel's whole share
])
def test_tree_simple_chunk_halves_before_nccl_2_20(version, size, nodes, ppn, chunk):
    from gpucomm.simulate.versions import use
    with use(version):
        assert nccl.tree_chunk_bytes("simple", size, 16, nodes, ppn) == chunk


@pytest.mark.parametrize("size,nodes,chunk", [
    (1 << 30, 2, 128 * 1024),  # nvlsChunkSize
    (1 << 30, 4, 64 * 1024),  # NVLSTREE_MAX_CHUNKSIZE on 4 nodes or more
    (16 * MIB, 2, 64 * 1024),  # below 4 x 128 concurrent ops x 128 KiB = 64 MiB
    (4 * MIB, 4, 32 * 1024),  # below 1 x 128 x 64 KiB = 8 MiB
])
def test_nvls_tree_chunk_follows_calc_coll_chunking(size, nodes, chunk):
    assert nccl.nvls_tree_chunk_bytes(size, 8, nodes) == chunk


def test_tree_fill_counts_store_and_forward_hops_only():
    """Simple stores and forwards a chunk at every hop; LL128 only at network hops (the proxy
    sends a full slot), its NVLink hops forward lines as they land. Every such hop but the
    slowest adds one chunk's time."""
    shape = {"nodes": 4, "g": 8}
    size, t_intra, t_net = 8 * MIB, 1e-3, 2e-3
    share = 36000 * 16 / size  # the LL128 chunk's share of the buffer
    ll128 = nccl._tree_fill(shape, "ll128", size, 16, t_intra, t_net)
    assert ll128 == pytest.approx((2 * 2 - 1) * t_net * share)
    # Simple: 512 KiB chunks = the whole 8 MiB / 16 channels: 14 chain hops + 4 network hops
    simple = nccl._tree_fill(shape, "simple", size, 16, t_intra, t_net)
    assert simple == pytest.approx(14 * t_intra + 4 * t_net - t_net)
    assert nccl._tree_fill({"nodes": 1, "g": 8}, "ll128", size, 16, t_intra, 0.0) == 0.0


def test_tree_fill_shows_at_mid_sizes_not_at_large_ones():
    """On 4 x 8 H100 the fill of tree/LL128 is a sizeable share of an 8 MiB all-reduce and a
    small one of 1 GiB (bandwidth term per byte being the same)."""
    t = build_topology("dgx-h100", nodes=4)
    mid = predict("all_reduce", 8 * MIB, t, algorithm="tree", protocol="ll128")
    big = predict("all_reduce", 1 << 30, t, algorithm="tree", protocol="ll128")
    per_byte_big = big.time_s / (1 << 30)
    assert mid.time_s > 1.2 * per_byte_big * 8 * MIB


def test_ring_across_nodes_carries_nccls_latency_refinements():
    simple = get_protocol("simple", "hopper", 2)
    r = ring_protocol(simple, "hopper", 2, "all_reduce", 16 * MIB, 16, 16)
    # plateau effect of ring (ncclTopoGetAlgoTime): x1.4 from compute capability 8.0 on; a
    # Simple step inside the node pays its own latency, at least the proxy's messages of the
    # channels on one NIC (1 here: 3 us, RING_PACE_PER_MESSAGE), not a network step (14 us)
    hops = tuple(max(h, K.NET_MESSAGE_OVERHEAD_S["simple"])
                 for h in (K.HOP_LATENCY_S["simple"]["nvlink"], K.HOP_LATENCY_S["simple"]["pcie"]))
    assert r.hop_latency_s == pytest.approx(tuple(1.4 * h for h in (*hops, 14e-6)))
    # two channels a NIC (NCCL's across nodes on every catalog node): 2 x 3 us inside the node
    two = ring_protocol(simple, "hopper", 2, "all_reduce", 16 * MIB, 16, 16, channels_per_nic=2)
    assert two.hop_latency_s == pytest.approx(tuple(
        1.4 * max(h, 2 * K.NET_MESSAGE_OVERHEAD_S["simple"]) for h in (*hops[:2], 14e-6)))
    assert r.base_latency_s == pytest.approx(1.4 * simple.base_latency_s)
    volta = ring_protocol(get_protocol("simple", "volta", 2), "volta", 2, "all_reduce",
                          16 * MIB, 16, 16)
    assert volta.base_latency_s == pytest.approx(1.9 * simple.base_latency_s)
    # no plateau for all-gather; one message per slice: 16 MiB / (16 ch x 16 ranks) / 2
    ag = ring_protocol(simple, "hopper", 2, "all_gather", 16 * MIB, 16, 16)
    assert ag.hop_latency_s == pytest.approx((*hops, 14e-6)) and ag.slice_bytes == 32 * 1024
    # every step of a ring across nodes costs at least a network step: LL's NVLink hop
    # (0.6 us) becomes the network's 2.7 us, and an EFA stack's floor raises every hop alike;
    # on one node nothing changes
    ll = get_protocol("ll", "hopper", 2)
    assert ring_protocol(ll, "hopper", 2, "all_reduce", MIB, 16, 16).hop_latency_s == \
        pytest.approx((K.HOP_LATENCY_S["ll"]["net"],) * 3)
    assert ring_protocol(ll, "hopper", 2, "all_reduce", MIB, 16, 16, 20e-6).hop_latency_s == \
        pytest.approx((20e-6,) * 3)
    one = get_protocol("ll", "hopper", 1)
    assert ring_protocol(one, "hopper", 1, "all_reduce", MIB, 8, 16) is one


def test_multi_node_ll_cap_uses_nccls_cpu_row():
    """Across nodes NCCL picks llMaxBws by CPU (Intel row by default), not by GPU."""
    assert get_protocol("ll", "hopper", 2).total_cap_Bps == pytest.approx(39.0e9)
    assert get_protocol("ll", "hopper", 4).total_cap_Bps == pytest.approx(20.4e9)
    assert get_protocol("ll", "hopper", 1).total_cap_Bps == pytest.approx(141.0e9)


def test_efa_network_step_costs_aws_tuner_latency():
    """aws-ofi-nccl's tuner: 20 us per inter-node step, +3 us completion for Simple; NICs on
    IB verbs keep NCCL's own latencies. A tree all-reduce of 8 B on 2 nodes crosses the
    network twice, so it is about 2 x (20 us - NCCL's 5 us LL hop - IB's path) slower."""
    efa = build_topology("dgx-a100", nodes=2, nic="efa-400g", nics_per_node=4)
    ib = build_topology("dgx-a100", nodes=2)
    assert net_stack_floor_s(efa, "ll") == pytest.approx(20e-6)
    assert net_stack_floor_s(efa, "simple") == pytest.approx(23e-6)
    assert net_stack_floor_s(ib, "simple") == 0.0
    gap = (predict("all_reduce", 8, efa, algorithm="tree", protocol="ll").time_s
           - predict("all_reduce", 8, ib, algorithm="tree", protocol="ll").time_s)
    assert 2 * (20 - 5 - 3) * 1e-6 < gap < 2 * (20 - 5) * 1e-6


@pytest.mark.parametrize("mib, measured_us", [(1, 156.9), (2, 156.6), (4, 178.1)])
def test_ring_across_nodes_steps_at_network_pace(monkeypatch, mib, measured_us):
    """A ring all-reduce on 2 x 8 H100 over NDR (nccl-tests #309, NCCL_ALGO=Ring) levels off at
    ~155 us from 1 to 4 MiB: 30 steps at the network step's 4 us, where NCCL's own latency
    (NVLink steps at 1.9 us) would give ~110 us. Without the rule the model is 25-30% fast."""
    t = build_topology("dgx-h100", nodes=2)
    paced = predict("all_reduce", mib * MIB, t, algorithm="ring").time_us
    assert paced == pytest.approx(measured_us, rel=0.12)
    monkeypatch.setattr(K, "RING_STEP_AT_NET_PACE", False)
    nccl_floor = predict("all_reduce", mib * MIB, t, algorithm="ring").time_us
    assert nccl_floor < 0.8 * measured_us


@pytest.mark.parametrize("proto,nbytes,ranks,channels", [
    # enqueue.cc: nc drops while nBytes < nc x nThreads x threadThreshold; a ring's LL
    # threshold is 8 B x nRanks a thread (tuning.cc), 512 threads: 64 KiB a channel on 16 ranks
    ("ll", 8, 16, 1), ("ll", 64 * 1024, 16, 1), ("ll", 128 * 1024, 16, 2), ("ll", MIB, 16, 16),
    ("ll128", 5120, 16, 1), ("ll128", 10240, 16, 2),  # 640 threads x 8 B
    ("simple", 32 * 1024, 16, 1), ("simple", 64 * 1024, 16, 2),  # 512 threads x 64 B
])
def test_ring_channels_follow_nccls_channel_tuning(proto, nbytes, ranks, channels):
    assert ring_channels(proto, nbytes, ranks, 16) == channels


def test_a_one_channel_ring_pays_the_network_only_at_node_boundaries():
    """On one channel (an 8 B ring) NVLink steps keep their own latency, held only at NCCL's
    per-message overhead (tuning.cc); the network steps pay the NIC kind's latency (20 us), not
    the NIC's measured step floor (65 us). From two channels on, every step is held at the
    network step, floor included."""
    ll = get_protocol("ll", "hopper", 2)
    nvl, floor, net = ll.hop_latency_s[0], 65e-6, 20e-6  # a NIC's measured floor, its kind's
    tiny = ring_protocol(ll, "hopper", 2, "all_reduce", 8, 16, 16, floor, net).hop_latency_s
    assert tiny[0] == pytest.approx(max(nvl, K.NET_MESSAGE_OVERHEAD_S["ll"]))
    assert tiny[2] == pytest.approx(net)
    paced = ring_protocol(ll, "hopper", 2, "all_reduce", 128 * 1024, 16, 16, floor, net)
    assert paced.hop_latency_s == pytest.approx((floor,) * 3)


def test_efa_rings_of_8_bytes_cross_the_network_four_times():
    """Published 2-node EFA rings (both tables): p3dn (NCCL 2.4.8) 137 us and p4d (NCCL 2.7.8,
    GPUDirect RDMA) 159 us for 8 B. 30 steps at p4d's measured 70 us step would be ~2 ms; 4
    crossings at the EFA kind's 20 us (AWS's tuner) and 26 NVLink steps are ~110-125 us."""
    p3dn = build_topology("dgx-v100", nodes=2, nic="efa-100g", nics_per_node=1)
    p4d = build_topology("dgx-a100", nodes=2, nic="efa-100g", nics_per_node=4)
    for topo, measured in ((p3dn, 137), (p4d, 159)):
        t = predict("all_reduce", 8, topo, algorithm="ring", protocol="ll").time_us
        assert measured / 1.5 < t < measured * 1.1
