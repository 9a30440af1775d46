"""NCCL's SHM transport (simulate/shm.py): rings between GPUs without P2P, checked against
hand closed forms built from the catalog's link figures and NCCL's search constants."""
import numpy as np
import pytest

from gpucomm.simulate import predict, shm
from gpucomm.simulate.core import path_table
from gpucomm.topology import build_topology

GEN4 = 32.0 * 0.85  # achievable GB/s per direction of an x16 Gen4 link (catalog pcie4)
UPI_SPR = 128.0 * 0.172  # the pcie preset's inter-socket link (catalog upi-spr)


def _plan(topo, ranks):
    ranks = np.asarray(ranks)
    return shm.plan(topo, ranks, path_table(topo, ranks))


def test_pair_under_one_switch_shares_the_uplink_at_intel_overhead():
    """2 RTX 4090s on one PCIe switch, P2P off: both hops of the ring cross the switch's
    uplink each way and turn around in an Intel root complex (6/5 charged on PCIe links), so
    the links allow 27.2 / (2 x 1.2) GB/s; NCCL runs 2 channels of 256 threads."""
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=2)
    p = _plan(topo, [0, 1])
    assert p.link_GBps == pytest.approx(GEN4 / (2 * 1.2), rel=1e-9)
    assert (p.bw_intra, p.rings, p.channels, p.threads, p.intel) == (10.0, 1, 2, 256, True)


def test_ring_runs_at_what_a_gpu_receives_through_host_memory():
    """Closed form: busbw = min(links, SHM_RECV_GBPS x wire efficiency) = 2.29 GB/s (Simple),
    half that for LL (16 B lines carry 8 B), at every large size; NCCL's 2 channels reported."""
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=2)
    for size in (64 << 20, 1 << 30):
        res = predict("all_reduce", size, topo, gpus_per_thread=2)
        assert res.busbw_GBps == pytest.approx(shm.SHM_RECV_GBPS, rel=0.01)
        assert res.nccl_channels == 2 and "shm" in res.note
    ll = predict("all_reduce", 1 << 30, topo, protocol="ll")
    assert ll.busbw_GBps == pytest.approx(shm.SHM_RECV_GBPS * 0.5, rel=0.01)


def test_links_bound_when_they_are_slower(monkeypatch):
    """With no receive ceiling the links' closed form is what the ring gets."""
    monkeypatch.setattr(shm, "SHM_RECV_GBPS", 1e6)
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=2)
    res = predict("all_reduce", 1 << 30, topo, gpus_per_thread=2)
    assert res.busbw_GBps == pytest.approx(GEN4 / 2.4, rel=0.01)


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_four_gpus_on_two_switches(coll):
    """A 4-GPU ring over two switches: each uplink carries two hops each way (hand count);
    every GPU still receives at the SHM ceiling, so that bounds every ring collective."""
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=4)
    assert _plan(topo, range(4)).link_GBps == pytest.approx(GEN4 / 2.4, rel=1e-9)
    res = predict(coll, 1 << 30, topo)
    assert res.busbw_GBps == pytest.approx(shm.SHM_RECV_GBPS, rel=0.02)


def test_pair_across_sockets_is_not_charged_and_the_socket_link_bounds():
    """GPUs under different sockets: the path is PATH_SYS (through two CPUs), NCCL charges no
    Intel overhead, and the inter-socket link bounds; NCCL's search keeps 1 ring at 20 GB/s,
    above PCI_BW, so Simple gets 512 threads."""
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False)
    p = _plan(topo, [0, 4])
    assert p.link_GBps == pytest.approx(min(GEN4, UPI_SPR), rel=1e-9)
    assert (p.bw_intra, p.rings, p.channels, p.threads) == (20.0, 1, 2, 512)
    res = predict("all_reduce", 1 << 30, topo, ranks=[0, 4])
    assert res.busbw_GBps == pytest.approx(shm.SHM_RECV_GBPS, rel=0.01)


def test_fast_links_are_duplicated_as_nccl_does():
    """Gen6 x16 under one switch: NCCL's search finds one ring at 40 GB/s (96 / 2.4), which
    ncclTopoDupChannels splits into 2 rings at 20 (>= 25 GB/s), connect.cc doubles: 4 channels."""
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=6, p2p=False, gpus_per_node=2)
    p = _plan(topo, [0, 1])
    assert (p.bw_intra, p.rings, p.channels, p.threads) == (20.0, 2, 4, 512)


def test_search_keeps_the_fastest_ring_that_fits():
    """search.cc speedArrayIntra: the highest speed a ring fits; more rings at a lower speed
    only if rings x speed grows; nothing fits at 3 GB/s: one ring at the bound."""
    assert shm.search({0: 12.0}, {0: 2.4}) == (5.0, 1)  # Gen3 uplink shared by two hops
    assert shm.search({0: 24.0}, {0: 1.0}) == (12.0, 2)  # 20 fits once; 2 x 12 = 24 > 20
    assert shm.search({0: 24.0, 1: 24.0}, {0: 1.0, 1: 2.0}) == (12.0, 1)
    assert shm.search({0: 1.0}, {0: 1.0}) == (1.0, 1)
    assert shm.search({0: 100.0}, {0: 1.0}, sm90=True) == (50.0, 2)


def test_p2p_on_has_no_shm_plan():
    on = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=True, gpus_per_node=2)
    assert _plan(on, [0, 1]) is None
    assert "shm" not in predict("all_reduce", 1 << 30, on).note


@pytest.mark.parametrize("coll", ["sendrecv", "all_to_all"])
def test_point_to_point_inside_a_node_meets_the_same_ceiling(coll):
    """send/recv and all-to-all through SHM: each GPU receives busbw per second (nccl-tests'
    factors), so the same 2.29 GB/s bounds them; their channels stay p2p.py's."""
    off = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=4)
    res = predict(coll, 1 << 30, off)
    assert res.busbw_GBps == pytest.approx(shm.SHM_RECV_GBPS, rel=0.01)
    assert "shm" in res.note


def test_across_nodes_point_to_point_is_left_to_the_network():
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=2,
                          nodes=2)
    assert "shm" not in predict("sendrecv", 1 << 30, topo).note


def test_cpu_vendor_from_the_socket_link_and_amd_is_not_charged():
    """qpi/upi: Intel (6/5 charged on PCIe links of a one-CPU path); epyc-xgmi: AMD (never)."""
    assert shm.cpu_vendor(build_topology("pcie")) == "intel"
    assert shm.cpu_vendor(build_topology("dgx-h100")) == "intel"
    a100 = build_topology("dgx-a100", p2p=False, gpus_per_node=2)
    assert shm.cpu_vendor(a100) == "amd"
    p = _plan(a100, [0, 1])
    assert p is not None and p.intel is False
    hops = shm._hops(a100, np.arange(2), path_table(a100, np.arange(2)))
    assert all(float(v).is_integer() for v in shm._loads(a100, hops, p.intel).values())


def test_tree_gets_the_same_ceiling_and_auto_keeps_the_ring():
    """A tree's chain receives through host memory too, so it gets the same ceiling (no
    algorithm escapes SHM), and auto still runs the ring, as NCCL's tuner does on PCIe."""
    topo = build_topology("pcie", gpu="rtx4090", pcie_gen=4, p2p=False, gpus_per_node=2)
    tree = predict("all_reduce", 1 << 30, topo, algorithm="tree", protocol="simple")
    assert tree.busbw_GBps <= shm.SHM_RECV_GBPS * 1.001
    assert predict("all_reduce", 1 << 30, topo).algorithm == "ring"
