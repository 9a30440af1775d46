"""NVLSTree across nodes is held to NCCL's per-channel cap (tuning.cc perChMaxNVLSTreeBws) over
its head channels, one per GPU of the node (constants.NVLSTREE_PER_CHANNEL_BW)."""
import pytest

from gpucomm.simulate import constants as K
from gpucomm.simulate import predict
from gpucomm.topology import build_topology


def _nvls_tree(nodes: int, gpus: int, nbytes: int):
    topo = build_topology("dgx-h100", nodes=nodes, gpus_per_node=gpus, nic="ib-ndr",
                          nics_per_node=gpus)
    return predict("all_reduce", nbytes, topo, algorithm="nvls_tree", protocol="simple")


@pytest.mark.parametrize("nodes, column", [(2, 1), (4, 2), (8, 2), (10, 2)])
def test_h100_nvls_tree_reaches_its_heads_times_the_per_channel_cap(nodes, column):
    cap = 8 * K.NVLSTREE_PER_CHANNEL_BW["hopper"][column]  # 462 GB/s on 2 nodes, 364 beyond
    busbw = _nvls_tree(nodes, 8, 16 << 30).busbw_GBps
    assert busbw <= cap
    assert busbw > 0.97 * cap  # at 16 GiB the cap binds, not the NICs (8 x 48 GB/s) or NVLink


def test_fewer_gpus_per_node_are_fewer_heads():
    four = _nvls_tree(8, 4, 16 << 30).busbw_GBps
    assert four <= 4 * K.NVLSTREE_PER_CHANNEL_BW["hopper"][2]


def test_a_head_is_a_gpu_next_to_a_nic():
    topo = build_topology("dgx-h100", nodes=4, nic="ib-ndr", nics_per_node=4)
    res = predict("all_reduce", 16 << 30, topo, algorithm="nvls_tree", protocol="simple")
    assert res.busbw_GBps <= 4 * K.NVLSTREE_PER_CHANNEL_BW["hopper"][2]


def test_one_node_nvls_has_no_such_cap():
    topo = build_topology("dgx-h100")
    res = predict("all_reduce", 16 << 30, topo, algorithm="nvls", protocol="simple")
    assert res.busbw_GBps > 8 * K.NVLSTREE_PER_CHANNEL_BW["hopper"][2]
