"""NCCL's algorithms by NCCL_ALGO's names: what auto may choose, what is refused and why, and
the closed forms against hand-computed traffic (simulate/nccl.py)."""
import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.errors import ConfigError
from gpucomm.execute import execute
from gpucomm.simulate import predict
from gpucomm.simulate import constants as K
from gpucomm.topology import build_topology
from gpucomm.verify import verify


@pytest.fixture(scope="module")
def h100x4():
    return build_topology("dgx-h100", nodes=4)


def test_auto_chooses_among_nccls_algorithms_only(h100x4):
    one = predict("all_reduce", 1 << 30, build_topology("dgx-h100"))
    assert {a for a, _, _ in one.candidates} == {"ring", "tree", "nvls"}
    many = predict("all_reduce", 1 << 30, h100x4)
    assert {a for a, _, _ in many.candidates} == {"ring", "tree", "nvls_tree"}
    a100 = predict("all_reduce", 1 << 30, build_topology("dgx-a100", nodes=2))
    assert {a for a, _, _ in a100.candidates} == {"ring", "tree"}  # no NVLS before Hopper
    assert {a for a, _, _ in predict("all_gather", 1 << 20, h100x4).candidates} == {"ring"}
    pat = predict("all_gather", 1 << 20, build_topology("dgx-h100", nodes=4, gpus_per_node=1))
    assert {a for a, _, _ in pat.candidates} == {"ring", "pat"}  # 1 GPU per node only
    assert predict("all_to_all", 1 << 20, h100x4).algorithm == "grouped"


@pytest.mark.parametrize("name,topo,match", [
    ("nvls", dict(system="dgx-h100", nodes=2), "nvls_tree"),
    ("nvls_tree", dict(system="dgx-h100"), "2 or more nodes"),
    ("collnet_direct", dict(system="dgx-h100", nodes=2), "in-network reduction"),
    ("collnet_chain", dict(system="dgx-h100", nodes=2), "SHARP"),
    ("nvls", dict(system="dgx-a100"), "NVSwitch that reduces"),
])
def test_refused_where_nccl_would_not_run_them(name, topo, match):
    with pytest.raises(ConfigError, match=match):
        predict("all_reduce", 1 << 20, build_topology(**topo), algorithm=name)


def test_tree_refuses_other_collectives(h100x4):
    with pytest.raises(ConfigError, match="all_reduce only"):
        predict("all_gather", 1 << 20, h100x4, algorithm="tree")


def test_tree_bandwidth_is_twice_the_buffer_over_the_nics(h100x4):
    """At 1 GiB the tree's time is 2S over the node's NIC payload rate (or 2S over a GPU's
    NVLink port, the chain's, where that is slower), with no correction (NCCL's is for
    messages below 512 MiB), plus its latency and its pipeline's fill: a 512 KiB Simple chunk
    per channel up and down 7 chain hops and 2 network hops, all but one hop adding a chunk's
    time."""
    size = 1 << 30
    r = predict("all_reduce", size, h100x4, algorithm="tree", protocol="simple")
    nic = 8 * 50e9 * 0.96  # 8 NDR NICs per node at the catalog's efficiency
    corr = 1.0  # tuning.cc: treeCorrectionFactor for logSize < 23 only
    bw_term = 2 * size / nic / corr
    fill = (2 * 7 + 2 * 2 - 1) * (512 * 1024 * 16 / size) * bw_term * corr
    assert bw_term + 0.9 * fill < r.time_s < 1.1 * (bw_term + fill)
    assert r.reason.startswith("tree/simple 16ch")


def test_tree_latency_follows_chain_and_tree_depth():
    """An 8-byte tree all-reduce: base + 2((ppn-1) NVLink hops + log2(nodes) network hops)."""
    small = {n: predict("all_reduce", 8, build_topology("dgx-h100", nodes=n), algorithm="tree",
                        protocol="ll").time_s for n in (2, 4, 16)}
    net_hop = K.TREE_HOP_LATENCY_S["ll"][2]
    # each doubling of the node count adds 2 network hops (plus their links' latency)
    assert small[4] - small[2] == pytest.approx(2 * net_hop, rel=0.5)
    assert small[16] - small[4] == pytest.approx(2 * (small[4] - small[2]), rel=0.05)


def test_nvls_tree_beats_ring_bound_on_two_nodes():
    """NVLSTree on 2 nodes moves S per direction over the NICs, a ring 2(n-1)/n S: measured
    busbw above the ring's NIC bound (NVIDIA/nccl-tests#309) needs that mechanism."""
    t = build_topology("dgx-h100", nodes=2)
    nt = predict("all_reduce", 8 << 30, t, algorithm="nvls_tree")
    ring = predict("all_reduce", 8 << 30, t, algorithm="ring", protocol="simple")
    assert nt.algorithm == "nvls_tree" and nt.busbw_GBps > 400 > ring.busbw_GBps


def test_grouped_all_to_all_is_one_step_and_correct():
    for p in (2, 3, 8):
        s = verify(build("all_to_all", "grouped", p))
        assert len(list(s.steps())) == 1
        ins = [np.arange(p * 4, dtype=np.float32) + 100 * r for r in range(p)]
        outs = execute(s, ins)
        for r in range(p):
            expect = np.concatenate([ins[q][r * 4:(r + 1) * 4] for q in range(p)])
            got = outs[r][p * 4:] if outs[r].size == 2 * p * 4 else outs[r]
            assert np.array_equal(got[-p * 4:], expect)


def test_grouped_all_to_all_reaches_the_rail_bound_across_nodes():
    """2 x 8 H100: each GPU's inter-node half leaves over its own 400G rail, so busbw is
    (n-1)/n x S / (S/2 / NIC) = 1.875 x NIC payload rate (xxrjun measured 92 GB/s)."""
    t = build_topology("dgx-h100", nodes=2)
    r = predict("all_to_all", 4 << 30, t)
    bound = 15 / 16 * 2 * 50 * 0.96
    assert r.busbw_GBps == pytest.approx(bound, rel=0.03)


def test_reason_names_the_runner_up(h100x4):
    r = predict("all_reduce", 1 << 30, h100x4)
    assert r.reason.startswith(f"{r.algorithm}/{r.protocol} ")
    assert "(" in r.reason and "%)" in r.reason
