"""NCCL's point-to-point channel rules (simulate/p2p.py) against hand-worked NCCL arithmetic."""
import numpy as np
import pytest

from gpucomm.simulate import constants as K
from gpucomm.simulate import p2p, predict
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


def test_one_nvswitch_node_op_channels_double_with_size():
    p = _plan(build_topology("dgx-h100"))
    # 32 p2p channels, 8 ranks: nChannelsMin 4; parts of at most 32 x 512 KiB = 16 MiB
    assert (p["p2p_channels"], p["cmax"], p["cmin"], p["chunk"]) == (32, 32, 4, 512 * 1024)
    got = [p2p.op_channels(s << 20, p) for s in (1, 32, 64, 128, 256, 512, 1024)]
    assert got == [4, 4, 4, 8, 16, 32, 32]


def test_sendrecv_one_node_is_channel_bound_at_mid_sizes():
    """32 MiB on 4 channels of SM90_NVLINK_BW (20.6 GB/s) each: 82.4 GB/s, not the link."""
    topo = build_topology("dgx-h100")
    size = 32 << 20
    res = predict("sendrecv", size, topo, protocol="simple")
    expect = K.BASE_LATENCY_S["simple"] + size / (4 * 20.6 * GB)
    assert res.time_s == pytest.approx(expect, rel=1e-9)
    assert res.nccl_channels == 4
    big = predict("sendrecv", 1 << 30, topo, protocol="simple")  # 32 channels: the link bounds
    assert big.busbw_GBps > 4 * 82.4


def test_sendrecv_across_ten_nodes_one_channel_of_14_gbps():
    topo = build_topology("dgx-h100", nodes=10, nic="ib-ndr")
    size = 1 << 30
    res = predict("sendrecv", size, topo)
    assert res.protocol == "simple"
    assert res.time_s == pytest.approx(K.BASE_LATENCY_S["simple"] + size / (14 * GB), rel=1e-9)
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
