"""NCCL's point-to-point channel rules (simulate/p2p.py) against hand-worked NCCL arithmetic."""
import numpy as np
import pytest

from gpucomm.simulate import constants as K
from gpucomm.simulate import p2p, predict, versions
from gpucomm.simulate.core import path_table
from gpucomm.topology import build_topology

GB = 1e9


def _plan(topo):
    placement = np.arange(topo.nranks)
    return p2p.plan(topo, placement, path_table(topo, placement))


@pytest.mark.parametrize("nodes,gpn,ring,per_peer,cmin", [
    # 400G NIC per GPU: 4 channels per net peer (ceil(50 / 14)); the ring search leaves
    # 4 channels per rail, 16 at most; halve while perPeer * ceil(P / 8) > p2p channels
    (10, 8, 16, 1, 1),   # 4*10 > 16, 2*10 > 16 -> 1
    (2, 8, 16, 4, 1),    # 4*2 <= 16 -> 4; nChannelsMin: 4*16 > 16 ... -> 1
    (10, 1, 4, 2, 1),    # 4*2 > 4 -> 2; 2*2 <= 4
    (2, 1, 4, 4, 2),     # 4*1 <= 4 -> 4; nChannelsMin 4*2 > 4 -> 2
])
def test_channels_per_peer_across_nodes(nodes, gpn, ring, per_peer, cmin):
    p = _plan(build_topology("dgx-h100", nodes=nodes, gpus_per_node=gpn))
    assert (p["p2p_channels"], p["cmax"], p["cmin"]) == (ring, per_peer, cmin)
    assert p["chunk"] == 128 * 1024


@pytest.mark.parametrize("nodes,version,per_peer", [
    # 2.29 (paths.cc ncclTopoComputeP2pChannels): ceil(50 / 14) = 4 per net peer, halved
    # while perPeer * ceil(P / 8) > 16 p2p channels
    (2, "2.29", 4), (4, "2.29", 4), (8, "2.29", 2), (10, "2.29", 1),
    # 2.20-2.28, no halving: max(1 NIC per GPU, 2 halved while 2 * P > 4 * 16)
    (2, "2.28", 2), (4, "2.28", 2), (8, "2.28", 1), (10, "2.28", 1), (4, "2.20", 2),
    # up to 2.19: NCCL_NCHANNELS_PER_NET_PEER's default, 2
    (2, "2.19", 2), (10, "2.19", 2),
])
def test_channels_per_net_peer_follow_the_nccl_version(nodes, version, per_peer):
    topo = build_topology("dgx-h100", nodes=nodes, gpus_per_node=8)
    with versions.use(version):
        p = _plan(topo)
    assert (p["p2p_channels"], p["cmax"]) == (16, per_peer)


def test_sendrecv_across_two_nodes_runs_two_channels_before_nccl_2_29():
    """2 x 8 H100: 2.29 drives 4 channels per network peer (the 400G NIC bounds), 2.28 two
    channels of 14 GB/s; the plan cached on the path table follows the version."""
    topo = build_topology("dgx-h100", nodes=2, nic="ib-ndr")
    new = predict("sendrecv", 1 << 30, topo, nccl_version="2.29")
    old = predict("sendrecv", 1 << 30, topo, nccl_version="2.28")
    assert old.busbw_GBps <= 2 * 14.0 < new.busbw_GBps
    assert predict("sendrecv", 1 << 30, topo, nccl_version="2.29").time_s == new.time_s


def test_one_nvswitch_node_op_channels_double_with_size():
    p = _plan(build_topology("dgx-h100"))
    # 32 p2p channels, 8 ranks: nChannelsMin 4; parts of at most 32 x 512 KiB = 16 MiB
    assert (p["p2p_channels"], p["cmax"], p["cmin"], p["chunk"]) == (32, 32, 4, 512 * 1024)
    got = [p2p.op_channels(s << 20, p) for s in (1, 32, 64, 128, 256, 512, 1024)]
    assert got == [4, 4, 4, 8, 16, 32, 32]


def test_sendrecv_one_node_is_channel_bound_at_mid_sizes():
    """32 MiB on 4 channels of SM90_NVLINK_BW (20.6 GB/s) each: 82.4 GB/s, not the link; plus
    the fill: the receiver's copy of one 512 KiB NVLink chunk at 20.6 GB/s and one NVLink hop."""
    topo = build_topology("dgx-h100")
    size = 32 << 20
    res = predict("sendrecv", size, topo, protocol="simple")
    fill = (512 << 10) / (20.6 * GB) + K.HOP_LATENCY_S["simple"]["nvlink"]
    expect = K.BASE_LATENCY_S["simple"] + size / (4 * 20.6 * GB) + fill
    assert res.time_s == pytest.approx(expect, rel=1e-9)
    assert res.nccl_channels == 4
    big = predict("sendrecv", 1 << 30, topo, protocol="simple")  # 32 channels: the link bounds
    assert big.busbw_GBps > 4 * 82.4


def test_sendrecv_across_ten_nodes_one_channel_of_14_gbps():
    topo = build_topology("dgx-h100", nodes=10, nic="ib-ndr")
    size = 1 << 30
    res = predict("sendrecv", size, topo)
    assert res.protocol == "simple"
    # fill: a 128 KiB chunk copied into the send FIFO and out of the receive FIFO at 14 GB/s,
    # and one network hop
    fill = 2 * (128 << 10) / (14 * GB) + K.HOP_LATENCY_S["simple"]["net"]
    expect = K.BASE_LATENCY_S["simple"] + size / (14 * GB) + fill
    assert res.time_s == pytest.approx(expect, rel=1e-9)
    two = predict("sendrecv", size, build_topology("dgx-h100", nodes=2, nic="ib-ndr"))
    assert two.busbw_GBps > 2.5 * res.busbw_GBps  # 4 channels per peer: the NIC bounds


def test_p2p_protocols_are_ll_or_simple_only():
    topo = build_topology("dgx-h100", nodes=2, nic="ib-ndr")
    res = predict("sendrecv", 1 << 30, topo)
    assert {c[1] for c in res.candidates} == {"simple"}  # LL only up to channels x 16 KiB
    small = predict("sendrecv", 4096, topo)
    assert {c[1] for c in small.candidates} == {"ll", "simple"}
    with pytest.raises(Exception, match="no algorithm"):
        predict("sendrecv", 1 << 30, topo, protocol="ll128")


def test_all_to_all_not_capped_by_per_peer_channels():
    """Many peers in flight at once: the per-peer cap does not bind, the NIC does."""
    topo = build_topology("dgx-h100", nodes=2, nic="ib-ndr")
    res = predict("all_to_all", 4 << 30, topo)
    assert res.note == "" or "p2p" not in res.note
    assert res.busbw_GBps > 80


def test_no_p2p_pcie_box_goes_through_host_memory_on_two_channels(monkeypatch):
    """RTX 4090s without P2P (NCCL's SHM transport): a PCIe peer gets 2 channels, 128 KiB
    chunks; the data is written to host memory and read back, so both GPUs' writes share the
    switch's uplink: 2 S over 32 GB/s x 0.85 -> 13.6 GB/s per GPU (hand formula). The links'
    model alone: SHM's receive ceiling (simulate/shm.py, tests/test_sim_shm.py) is lifted."""
    from gpucomm.simulate import shm
    monkeypatch.setattr(shm, "SHM_RECV_GBPS", float("inf"))
    topo = build_topology("pcie", gpus_per_node=2, gpu="rtx4090", pcie_gen=4, p2p=False)
    p = _plan(topo)
    assert (p["p2p_channels"], p["cmax"], p["chunk"]) == (4, 2, 128 * 1024)
    res = predict("sendrecv", 1 << 30, topo)
    assert res.busbw_GBps == pytest.approx(32 * 0.85 / 2, rel=0.01)
    assert res.nccl_channels == 2


# --- the pipeline fill of p2p batches (constants.py P2P_FILL_STAGES) -------------------------

def test_network_chunk_shrinks_for_small_operations():
    """enqueue.cc addP2pToPlan: over the network a quarter chunk below one chunk, half below 8."""
    p = _plan(build_topology("dgx-h100", nodes=10, gpus_per_node=8))
    kib = 1 << 10
    assert [p2p.op_chunk(s, p, net=True) for s in (100 * kib, 419 * kib, 1023 * kib, 1 << 20)] \
        == [32 * kib, 64 * kib, 64 * kib, 128 * kib]
    assert p2p.op_chunk(100 * kib, p, net=False) == 128 * kib  # NVLink/PCIe peers: no cut


def test_round_peers_follow_ncclp2pschedule():
    """init.cc's own example: 16 ranks, groups of 1 (one GPU per node)."""
    peers, group = p2p.round_peers(np.arange(16))
    assert group == 1
    assert peers.tolist() == [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    peers, group = p2p.round_peers(np.repeat(np.arange(10), 4))  # groups are the nodes
    assert group == 4 and peers[:8].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert sorted(peers.tolist()) == list(range(40))


def test_channel_batches_one_group_of_eight_rounds_per_batch():
    # 10 nodes x 8: one channel per operation, each group of 8 rounds on its own channel
    chans = p2p.channel_batches(10, 8, 80, 1, 16)
    assert sorted(len(b[0]) for b in chans if b) == [8] * 10
    assert all(len(b) <= 1 for b in chans)
    # 10 nodes x 4: 2 channels per operation; channels 1, 2, 9, 10 also take the second part
    # of a group of another 8 rounds, so they run two batches of 4 one after the other
    chans = p2p.channel_batches(10, 4, 40, 2, 16)
    assert {c for c, b in enumerate(chans) if len(b) == 2} == {1, 2, 9, 10}
    assert all(len(x) == 4 for b in chans for x in b)


def _fill(nodes, gpn, per_op):
    topo = build_topology("dgx-h100", nodes=nodes, gpus_per_node=gpn, nic="ib-ndr")
    placement = np.arange(topo.nranks)
    paths = path_table(topo, placement)
    info = p2p.plan(topo, placement, paths)
    n = p2p.op_channels(per_op, info)
    node = np.asarray(topo.router.rank_node)[placement]
    return p2p.fill_s(per_op, n, info, paths, node), n


def test_fill_grows_by_one_batch_per_extra_group_of_eight_rounds_on_a_channel():
    """8 operations of a batch share the block: 8 chunks copied in and 8 out at 14 GB/s, and a
    network hop. 16 nodes: every group of 8 rounds on its own channel (one batch); 20 nodes:
    groups g and g + 16 share channel bitrev(g), two batches one after the other."""
    per_op = 419 << 10  # below 8 chunks: 64 KiB chunks
    net_batch = 8 * 2 * (64 << 10) / (14 * GB) + K.HOP_LATENCY_S["simple"]["net"]
    (one, first), n = _fill(16, 8, per_op)
    assert n == 1
    assert one == pytest.approx(net_batch, rel=1e-12)
    assert first == K.HOP_LATENCY_S["simple"]["net"]
    (two, _), _ = _fill(20, 8, per_op)
    assert two == pytest.approx(2 * net_batch, rel=1e-12)


def test_all_to_all_pays_the_fill_on_top_of_its_bandwidth(monkeypatch):
    """The fill adds to the flow bound less the hop that bound already counts."""
    size = 32 << 20
    one = build_topology("dgx-h100")
    ten = build_topology("dgx-h100", nodes=10, nic="ib-ndr")
    with_fill = [predict("all_to_all", size, t, protocol="simple").time_s for t in (one, ten)]
    monkeypatch.setattr(p2p, "fill_s", lambda *a: (0.0, 0.0))
    without = [predict("all_to_all", size, t, protocol="simple").time_s for t in (one, ten)]
    # one node: 4 channels per operation, one operation per channel: one 512 KiB chunk out of
    # the receive FIFO at 20.6 GB/s
    assert with_fill[0] - without[0] == pytest.approx((512 << 10) / (20.6 * GB), rel=1e-9)
    # 10 x 8: 419 KB per peer on one channel, 8 per batch: 8 x 2 x 64 KiB at 14 GB/s
    assert with_fill[1] - without[1] == pytest.approx(8 * 2 * (64 << 10) / (14 * GB), rel=1e-9)


def test_fill_is_a_mid_size_effect():
    """The fill is a fixed cost per batch: it shrinks relative to the bandwidth term."""
    topo = build_topology("dgx-h100", nodes=10, nic="ib-ndr")
    small, big = (predict("all_to_all", s, topo, protocol="simple") for s in (32 << 20, 8 << 30))
    assert big.busbw_GBps > 1.1 * small.busbw_GBps


@pytest.mark.parametrize("nodes", [2, 4])
def test_small_all_to_all_across_nodes_is_paced_by_the_proxy(nodes):
    """Sophia-like (DGX A100 x nodes, NCCL 2.22): every rank off the node is a send and a receive
    the one proxy thread takes in turn, 0 bytes included (constants.P2P_PROXY_OP_S); the last
    one's own LL chain (base + network hop) follows the others."""
    topo = build_topology("dgx-a100", nodes=nodes)
    res = predict("all_to_all", 0, topo, nccl_version="2.22")
    ops = 2 * 8 * (nodes - 1)  # one channel part per operation at this size
    want = K.BASE_LATENCY_S["ll"] + K.HOP_LATENCY_S["ll"]["net"] + (ops - 1) * K.P2P_PROXY_OP_S
    assert res.protocol == "ll"
    assert res.time_s == pytest.approx(want, rel=1e-9)
    assert f"{ops} network operations" in res.note
    assert res.timed is not None and res.timed.time_s == pytest.approx(want, rel=1e-9)


def test_proxy_bound_leaves_one_node_and_large_all_to_all_alone(monkeypatch):
    one = build_topology("dgx-a100")
    two = build_topology("dgx-a100", nodes=2)
    cases = [(one, 64 << 10), (two, 64 << 20)]
    with_proxy = [predict("all_to_all", s, t).time_s for t, s in cases]
    monkeypatch.setattr(p2p, "proxy_ops", lambda *a: 0)
    assert [predict("all_to_all", s, t).time_s for t, s in cases] == with_proxy


def test_proxy_ops_of_sendrecv_count_network_neighbours():
    """sendrecv: rank r sends to r+1 and receives from r-1; with one GPU a node both cross the
    network, with 8 a node only the node's edge ranks have one network operation."""
    for gpn, want in ((1, 2), (8, 1)):
        topo = build_topology("dgx-h100", nodes=4, gpus_per_node=gpn)
        placement = np.arange(topo.nranks)
        paths = path_table(topo, placement)
        _, cls, _ = paths.properties(paths.routes(*p2p.pairs("sendrecv", topo.nranks), 0))
        assert p2p.proxy_ops("sendrecv", topo, placement, cls, 1) == want
        assert p2p.proxy_ops("all_to_all", topo, placement, cls, 2) == 2 * 2 * 3 * gpn
