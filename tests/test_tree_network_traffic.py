"""What NCCL's double binary tree puts on a node's NICs (simulate/nccl.py tree_net_factor), counted
by hand from the trees trees.cc builds, and the tree and NVLSTree times that follow from it."""
import pytest

from gpucomm.simulate import nccl_trees, predict
from gpucomm.topology import build_topology

GIB = 1 << 30

# NCCL's two trees over n nodes (trees.cc ncclGetDtree), written out by hand: each node's parent,
# -1 for the root; tree 1 is tree 0 mirrored (n even) or shifted by one (n odd)
TREES = {
    2: ([-1, 0], [1, -1]),
    3: ([-1, 2, 0], [1, -1, 0]),
    4: ([-1, 2, 0, 2], [1, 3, 1, -1]),
    5: ([-1, 2, 4, 2, 0], [1, -1, 3, 0, 3]),
    8: ([-1, 2, 4, 2, 0, 6, 4, 6], [1, 3, 1, 7, 5, 3, 5, -1]),
}
# halves of the buffer each node sends (and receives) over both trees: in each tree, one to its
# parent (reduce) and one to each child (broadcast); e.g. 3 nodes, node 0: root of tree 0 with
# child 2 (1), in tree 1 child of 1 with child 2 (2): 3 halves
HALVES = {
    2: [2, 2],
    3: [3, 2, 3],
    4: [2, 4, 4, 2],
    5: [3, 2, 4, 4, 3],
    8: [2, 4, 4, 4, 4, 4, 4, 2],
}


@pytest.mark.parametrize("n", sorted(TREES))
def test_the_busiest_node_carries_the_hand_counted_bytes(n):
    assert [p.tolist() for p in nccl_trees.dtree_parents(n)] == [list(t) for t in TREES[n]]
    assert nccl_trees.tree_net_factor(n) == max(HALVES[n]) / 2


def test_two_nodes_cross_the_network_once_each_way_four_and_more_twice():
    assert [nccl_trees.tree_net_factor(n) for n in (1, 2, 3, 4, 5, 8, 16, 64)] == \
        [0.0, 1.0, 1.5, 2.0, 2.0, 2.0, 2.0, 2.0]


def test_a_two_node_tree_beats_the_rings_network_ceiling():
    # 4 x GH200 nodes with 4 x 25 GB/s Slingshot each (CSCS Alps): a ring's busbw cannot exceed
    # the node's 100 GB/s of NICs; the tree's can on 2 nodes (Alps measured 158 GB/s at 4 GiB)
    # but not on 4, where a node sends twice the buffer each way
    two = predict("all_reduce", 4 * GIB, build_topology(system="cray-ex254n", nodes=2),
                  algorithm="tree")
    four = predict("all_reduce", 4 * GIB, build_topology(system="cray-ex254n", nodes=4),
                   algorithm="tree")
    assert two.busbw_GBps > 140
    assert four.busbw_GBps < 100
    assert two.time_s < 0.55 * four.time_s


def test_nvls_tree_takes_the_same_count_three_nodes_one_and_a_half():
    # one 200G NIC per 8-GPU node: the network is the NVLSTree's bound, so its time follows
    # what the busiest node sends: 1, 1.5 and 2 buffers on 2, 3 and 4 nodes
    times = [predict("all_reduce", 4 * GIB, build_topology(
        system="dgx-h100", nodes=n, nic="ib-hdr", nics_per_node=1),
        algorithm="nvls_tree").time_s for n in (2, 3, 4)]
    assert times[1] / times[2] == pytest.approx(0.75, rel=0.01)
    assert times[0] / times[2] == pytest.approx(0.5, rel=0.01)


def _btree_parent(r, n):
    """trees.cc ncclGetBtree's parent of rank r, its loop as NCCL writes it."""
    if r == 0:
        return -1
    bit = 1
    while bit < n and not bit & r:
        bit <<= 1
    up = (r ^ bit) | (bit << 1)
    return up if up < n else r ^ bit


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 33, 100, 255, 256, 257, 1000, 1023, 2049, 16384])
def test_dtree_parents_at_once_are_trees_cc_rank_by_rank(n):
    # nccl_trees computes every rank's parent at once (a tune of a 16,384-node cluster asks
    # it per timing); rank by rank, trees.cc's loop: tree 1 mirrored (n even) or shifted
    t0 = [_btree_parent(r, n) for r in range(n)]
    if n % 2:
        t1 = [-1 if (u := _btree_parent((r - 1) % n, n)) < 0 else (u + 1) % n for r in range(n)]
    else:
        t1 = [-1 if (u := _btree_parent(n - 1 - r, n)) < 0 else n - 1 - u for r in range(n)]
    assert [p.tolist() for p in nccl_trees.dtree_parents(n)] == [t0, t1]
