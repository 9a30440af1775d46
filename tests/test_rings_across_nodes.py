"""Rings across nodes of a mesh (MI300X's xGMI, DGX-1's NVLink cube mesh): each channel follows
one of the node's searched rings inside every node, as NCCL's search builds an inter-node
ring's intra-node part, instead of every channel taking the same order (one link a hop)."""
import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.simulate import predict, simulate
from gpucomm.simulate.rings import ring_orders
from gpucomm.topology import build_topology


@pytest.mark.parametrize("system", ["mi300x", "dgx-v100"])
def test_each_channel_follows_a_searched_ring_in_every_node(system):
    topo = build_topology(system, nodes=2)
    rings = ring_orders(topo, np.arange(16))
    assert rings is not None and len(rings) > 1
    node = np.asarray(topo.router.rank_node)
    exits = set()
    for ring in rings:
        assert (node[ring[:8]] == node[0]).all() and (node[ring[8:]] != node[0]).all()
        for part in (ring[:8], ring[8:]):  # every in-node hop is one GPU-to-GPU link
            for a, b in zip(part[:-1], part[1:]):
                hops = topo.route(int(a), int(b))
                assert len(hops) == 1 and topo.links[hops[0]].tech.startswith(("nvlink", "xgmi"))
        assert [int(x) % 8 for x in ring[8:]] == [int(x) % 8 for x in ring[:8]]  # alike nodes
        exits.add(int(ring[7]))
    assert len(exits) == min(len(rings), 8)  # the channels leave by different GPUs (NICs)


@pytest.mark.parametrize("system", ["mi300x", "dgx-v100"])
def test_searched_rings_across_nodes_beat_one_order(system):
    """The 2-node MI300X log (data/logs/aac-mi300x-2n-rccl-all_reduce.log) measures 341 GB/s
    busbw at 1 GiB; one order for every channel gave 48 (one xGMI link a hop), the searched
    rings leaving by different NIC rails give 265."""
    topo = build_topology(system, nodes=2)
    flat = simulate(build("all_reduce", "ring", 16, channels=8), topo, 1 << 30, protocol="simple")
    searched = predict("all_reduce", 1 << 30, topo, algorithm="ring", protocol="simple")
    assert searched.busbw_GBps > 4 * flat.busbw_GBps
    if system == "mi300x":
        assert 341 / 1.35 < searched.busbw_GBps < 341


def test_switches_and_pcie_boxes_keep_any_order():
    assert ring_orders(build_topology("dgx-h100", nodes=2), np.arange(16)) is None
    pcie = build_topology("pcie", nodes=2)
    assert ring_orders(pcie, np.arange(2 * pcie.gpus_per_node)) is None  # rings via the host


def test_a_mesh_node_with_a_nic_per_gpu_runs_a_channel_out_of_every_nic():
    """4 x GH200 (cray-ex254n): the 4-GPU mesh has 2 distinct in-node rings but 4 NICs; NCCL's
    search starts channel c at NET c % 4 (search.cc ncclTopoSearchRecNet), so the rings run
    twice, leaving by all 4 NICs: 4 x 23.5 GB/s of Slingshot, where 2 rings would use 2.
    Polaris (4-GPU mesh, 2 NICs) stays bound by its 2 NICs."""
    topo = build_topology("cray-ex254n", nodes=2)
    rings = ring_orders(topo, np.arange(8))
    assert rings is not None and len(rings) == 4
    # channel k leaves from GPU r[3] by rail (r[3] + k) % 4 (paths.py's rail of channel k)
    assert {(int(r[3]) + k) % 4 for k, r in enumerate(rings)} == {0, 1, 2, 3}
    big = predict("all_reduce", 1 << 30, topo, algorithm="ring", protocol="simple")
    assert big.busbw_GBps > 3 * 23.5
    polaris = predict("all_reduce", 1 << 30, build_topology("polaris", nodes=2),
                      algorithm="ring", protocol="simple")
    assert polaris.busbw_GBps == pytest.approx(2 * 23.5, rel=0.01)  # its 2 NICs, as before


def test_a_four_gpu_full_mesh_runs_all_six_rings():
    """4 GPUs joined pairwise (GH200 node: 6 NVLink4 links a pair): the 6 directed rings
    use every directed link twice, 3 links' worth out of each GPU; a greedy search that breaks
    a tie by repeating its first ring stops at 2 (one link's worth each way). The DGX-1V cube
    mesh keeps the rings it had (the better of the two passes)."""
    topo = build_topology("cray-ex254n")
    rings = ring_orders(topo, np.arange(4))
    assert rings is not None and len({tuple(r) for r in rings}) == 6
    res = predict("all_reduce", 1 << 30, topo, algorithm="ring", protocol="simple")
    assert res.busbw_GBps > 2.5 * 123.6  # 6 x 123.6 / 2 at most
    v100 = predict("all_reduce", 1 << 30, build_topology("dgx-v100"), algorithm="ring",
                   protocol="simple")
    assert v100.busbw_GBps == pytest.approx(134.4, rel=0.01)
