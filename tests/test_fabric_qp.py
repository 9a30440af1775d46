"""QP scaling on Meta's AI Zone (benchmarks/fabric_ecmp.py check 1): how much 4 queue pairs per
connection gain over 1 under ECMP depends on which all-reduce NCCL's auto runs there."""
import numpy as np

from gpucomm.simulate import predict
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network


def _gains(system, nic, nccl_version=None, seeds=range(5), baseline=("src", "dst", "qp"),
           algorithm="auto"):
    """(algorithms run, 4-QP over 1-QP speedups - 1 per seed) of a 4 GiB all-reduce on 8 packed
    nodes of the zone: 2 hosts per rack switch, 18 uplinks for its 16 NICs; `algorithm` auto
    runs the pair NCCL's tuning model picks. The 1-QP baseline's ECMP hashes `baseline`; 4 QPs
    are E-ECMP's (the destination QP hashed too)."""
    picked, gains = set(), []
    for seed in seeds:
        time = {}
        for q in (1, 4):
            fields = baseline if q == 1 else ("src", "dst", "qp")
            topo = build_topology(system, nodes=8, nic=nic, fabric="tor-2tier", leaf_ports=2,
                                  oversubscription=1 / 1.125, placement="packed",
                                  network=Network(routing="ecmp", qps_per_connection=q,
                                                  seed=seed, hash_inputs=fields))
            res = predict("all_reduce", 4 << 30, topo, algorithm=algorithm, select="nccl",
                          nccl_version=nccl_version)
            picked.add(res.algorithm)
            time[q] = res.time_s
        gains.append(time[1] / time[4] - 1)
    return picked, np.array(gains)


def test_qp_gain_on_metas_zone_depends_on_which_all_reduce_runs():
    # NCCL's auto at 4 GiB on these nodes (8 x H100, 8 x 400G NICs) is the ring: its search
    # graph, 8 channels at 48 GB/s (search.cc speedArrayInter, no duplication at sm90 with more
    # than 4 channels under 50 GB/s), rates busBw 384 against NVLSTree's 8 heads at 45.5 GB/s
    # (tuning.cc perChMaxNVLSTreeBws), 364. NVLSTree opens 8 connections per tree edge on each
    # head's NIC, so one QP per connection already spreads over the uplinks; ring and tree
    # open 1-2 per edge and NIC, and a hashed 1-QP pair of them collides
    picked, gain = _gains("dgx-h100", "roce-400g")
    assert picked == {"ring"} and np.median(gain) > 0.4
    nvls, nvls_gain = _gains("dgx-h100", "roce-400g", algorithm="nvls_tree")
    assert nvls == {"nvls_tree"}
    assert np.median(nvls_gain) < 0.2
    for system, nic, version in (("dgx-h100", "roce-400g", "2.17"),  # before NVLSTree
                                 ("dgx-a100", "roce-200g", None)):   # no NVLS on A100
        picked, gain = _gains(system, nic, version)
        assert picked <= {"ring", "tree"}
        assert np.median(gain) > 0.4 > np.median(nvls_gain)
    assert (nvls_gain >= 0).all()  # more queue pairs never hurt


def test_nvlstree_gains_from_e_ecmp_when_the_baseline_hashes_a_nic_pair_as_one_flow():
    # Meta: RoCE packets of different QPs kept one destination UDP port and sometimes one
    # source port, hence E-ECMP. Hashed on the NICs alone, NVLSTree's 16 connections per head
    # pair share one path, and 4 QPs under E-ECMP then gain as much as the tree's do
    picked, same_port = _gains("dgx-h100", "roce-400g", baseline=("src", "dst"),
                               algorithm="nvls_tree")
    assert picked == {"nvls_tree"}
    assert np.median(same_port) > 0.5
    assert (same_port > _gains("dgx-h100", "roce-400g", algorithm="nvls_tree")[1]).all()
