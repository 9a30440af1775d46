"""NCCL's graphs across nodes as its tuning reads them (simulate/nccl_tuning.py net_graph): a
channel per NIC at a speed of search.cc's speed array, the ring graph's bwIntra equal to its
bwInter, the tree graph's bwIntra raised to twice it, which tuning.cc reads on <= 2 nodes."""
import pytest

from gpucomm.simulate import nccl_tuning
from gpucomm.topology import build_topology

GIB = 1 << 30
RING_TREE = {"algorithms": {"ring", "tree"}, "protocols": {"simple"}}


@pytest.mark.parametrize("args, graph", [
    # 4 x A100 and 2 x Slingshot (Polaris): PCIe Gen4's 24 is the GPU->NIC path; below 25 GB/s
    # ncclTopoDupChannels keeps the channels; the tree's bwIntra climbs 28, 30, 48
    (("sm80", 2, 24.0, 240.0), (2, 24.0, 48.0)),
    # 4 x H100 and 4 x 200G: 25 GB/s NICs, the sm90 array's 24
    (("sm90", 4, 25.0, 370.8), (4, 24.0, 48.0)),
    # 8 x H100 and 8 x NDR: the array's top, 48; from sm86, no duplication below 50 GB/s on
    # more than 4 channels, and no faster speed for the tree
    (("sm90", 8, 48.0, 370.8), (8, 48.0, 48.0)),
    # 8 x H100 and 4 x NDR: 4 channels at 48 are doubled to 8 at 24 (not more than 4); the
    # tree's bwIntra stops at 45, as 8 chains at 48 would need more than a GPU's 370.8 GB/s
    (("sm90", 4, 48.0, 370.8), (8, 24.0, 45.0)),
    # one GPU a node: nothing inside the node limits the tree's bwIntra
    (("sm90", 1, 25.0, None), (1, 24.0, 48.0)),
    # sm70 duplicates from 25 GB/s whatever the channel count (one GPU a node)
    (("sm70", 4, 30.0, None), (8, 15.0, 30.0)),
])
def test_the_search_across_nodes(args, graph):
    assert nccl_tuning.net_graph(*args) == graph


def test_on_two_nodes_the_ring_is_timed_at_its_network_speed():
    # Polaris, 2 nodes, 1 GiB: busBw = 2 channels x 24 GB/s (the ring graph's bwIntra is its
    # bwInter), algBw = busBw x 8 / 14; before, the ring was timed at NVLink's 240 GB/s
    topo = build_topology(system="polaris", nodes=2)
    t, algo, proto = nccl_tuning.estimates("all_reduce", GIB, topo, 16, **RING_TREE)[0]
    assert (algo, proto) == ("ring", "simple")
    alg_bw = 2 * 24.0 * 8 / 14
    assert GIB / (1000 * alg_bw) < t < GIB / (1000 * alg_bw) + 200


@pytest.mark.parametrize("system, kw, first", [
    # A100: the tree's cap of 23.6 GB/s per search channel holds it below the ring (Polaris
    # measures 36.6 GB/s busbw at 1 GiB, all_gather's ring figure, on 2 x 25 GB/s NICs)
    ("polaris", {}, "ring"),
    ("dgx-a100", {}, "ring"),
    # H100 / GH200 on 4 x 25 GB/s: the tree (CSCS Alps measures 158 GB/s busbw at 4 GiB,
    # Snellius 156 at 8 GiB, beyond a ring's 100)
    ("cray-ex254n", {}, "tree"),
    ("dgx-h100", {"gpus_per_node": 4, "nic": "ib-hdr", "nics_per_node": 4}, "tree"),
    # 8 x NDR at the array's top: the tree's bwIntra cannot be raised, the ring is first
    ("dgx-h100", {"nic": "ib-ndr", "nics_per_node": 8}, "ring"),
])
def test_nccls_pick_on_two_nodes_at_large_sizes(system, kw, first):
    topo = build_topology(system=system, nodes=2, **kw)
    assert nccl_tuning.estimates("all_reduce", 4 * GIB, topo, 16, **RING_TREE)[0][1] == first


def test_one_gpu_a_node_searches_the_tree_pattern():
    # search.cc: with one GPU a node the tree graph's pattern is TREE, which tuning.cc times
    # at .85 of its busBw; 4 nodes, so bwInter is what both read
    topo = build_topology(system="dgx-h100", nodes=4, gpus_per_node=1)
    on = {"algorithms": {"tree"}, "protocols": {"simple"}}
    t = nccl_tuning.estimates("all_reduce", 4 * GIB, topo, 16, **on)[0][0]
    n, bw, _ = nccl_tuning.net_graph("sm90", 1, 48.0, None)
    bus = min(n * bw * .92, n * 36.0) * .85  # perChMaxTreeBws Hopper N4
    assert t == pytest.approx(4 * GIB / (1000 * bus * .5), rel=0.01)
