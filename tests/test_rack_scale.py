"""GB200 NVL72 racks and AMD MI300X nodes: catalog, presets, builders and the simulator on
them, checked against closed forms."""
import json

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.hardware import get_gpu, get_link_tech
from gpucomm.simulate import closed_form as cf
from gpucomm.simulate import ideal_protocol, predict, simulate
from gpucomm.simulate.protocol import generation_of
from gpucomm.simulate.rings import ring_orders
from gpucomm.topology import bisection_bandwidth, build_topology

NVL5 = get_link_tech("nvlink5")
XGMI = get_link_tech("xgmi")


@pytest.fixture(scope="module")
def nvl72():
    return build_topology("gb200-nvl72")


@pytest.fixture(scope="module")
def mi300x():
    return build_topology("mi300x")


def techs(topo, path):
    return [topo.links[i].tech for i in path]


# ---- catalog ---------------------------------------------------------------------------------
def test_catalog_figures_are_the_published_ones():
    assert NVL5.bidirectional_Bps == 1.8e12                      # 1.8 TB/s per Blackwell GPU
    assert (XGMI.links, XGMI.unit_Bps) == (7, 64e9)              # x16 at 32 Gbps per peer
    assert XGMI.bidirectional_Bps == 896e9                       # 7 x 128 GB/s
    assert XGMI.achievable_Bps == pytest.approx(7 * 48e9)        # RCCL GFX94X_XGMI_WIDTH 48
    assert get_link_tech("nvlink-c2c").bidirectional_Bps == 900e9
    gb, mi = get_gpu("gb200"), get_gpu("mi300x")
    assert (gb.hbm_bytes, gb.hbm_bandwidth_Bps, gb.bf16_flops) == (186e9, 8e12, 2.5e15)
    assert 72 * gb.hbm_bytes == pytest.approx(13.4e12, rel=0.001)  # NVL72: 13.4 TB HBM3e
    assert (mi.hbm_bytes, mi.hbm_bandwidth_Bps, mi.nvlink, mi.sm) == (192e9, 5.3e12, "xgmi",
                                                                     "gfx942")
    for name in ("xgmi", "nvlink-c2c", "epyc-xgmi3", "lpddr5x-grace", "ddr5-4800-12ch"):
        assert get_link_tech(name).source
    assert generation_of(build_topology("dgx-b200")) == "blackwell"


def test_hw_compare_nvlink5_xgmi(capsys):
    assert main(["hw", "compare", "nvlink5", "xgmi", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ratio"] == pytest.approx(900 / 448)
    assert out["achievable_ratio"] == pytest.approx(721.8 / 336)
    assert main(["hw", "compare", "nvlink5", "xgmi"]) == 0
    text = capsys.readouterr().out
    assert "64 GB/s per link" in text and "to one peer" in text


# ---- GB200 NVL72 -----------------------------------------------------------------------------
def test_nvl72_rack_is_one_72_gpu_nvlink_domain(nvl72):
    assert (nvl72.nranks, nvl72.nodes, nvl72.gpus_per_node) == (72, 1, 72)
    assert nvl72.in_switch_reduction and generation_of(nvl72) == "blackwell"
    # any two GPUs: GPU -> NVLink switch -> GPU, the GPU's whole NVLink5 both ways
    for a, b in ((0, 1), (0, 71), (35, 36)):
        assert techs(nvl72, nvl72.route(a, b)) == ["nvlink5", "nvlink5"]
        assert nvl72.path_bandwidth(a, b) == pytest.approx(NVL5.achievable_Bps)
    # half the GPUs to the other half: 36 x 900 GB/s (130 TB/s = 72 x 1.8 TB/s bidirectional)
    assert bisection_bandwidth(nvl72) == pytest.approx(36 * 900e9)


def test_nvl72_gpu_reaches_its_nic_through_grace(nvl72):
    two = build_topology("gb200-nvl72", nodes=2)
    path = two.route(5, 72 + 5)
    assert techs(two, path)[:3] == ["nvlink-c2c", "pcie5", "ib-ndr"]
    assert two.links[path[0]].dst == "n0.grace2"                 # GPU 5 is on superchip 2
    assert two.nic_affinity[5] == "n0.nic5"                      # a NIC per GPU
    assert two.path_bandwidth(5, 77) == pytest.approx(get_link_tech("ib-ndr").achievable_Bps)


def test_nvl72_racks_and_gpus_per_node():
    t = build_topology("gb200-nvl72", nodes=3, gpus_per_node=16)
    assert (t.nranks, t.nodes, t.gpus_per_node) == (48, 3, 16)
    assert t.nic_affinity[16:18] == ("n1.nic0", "n1.nic1")      # each GPU its own NIC


def test_nvlink_partitions_split_the_domain():
    t = build_topology("gb200-nvl72", nvlink_partition=36)
    assert (t.nodes, t.gpus_per_node, t.nranks) == (2, 36, 72)
    assert sum(d.kind == "nvswitch" for d in t.devices) == 2
    assert techs(t, t.route(0, 35)) == ["nvlink5", "nvlink5"]    # inside a partition
    assert "ib-ndr" in techs(t, t.route(0, 36))                  # across: through the NICs
    # partitions per rack x racks
    t = build_topology("gb200-nvl72", nodes=2, nvlink_partition=24)
    assert (t.nodes, t.gpus_per_node) == (6, 24)
    assert t.cache.replica                              # partitions are replicas


def test_nvlink_partition_errors_name_what_is_allowed():
    with pytest.raises(ConfigError, match="nvlink_partition 16 not allowed.*allowed: 2, 4, 6, "
                                          "8, 12, 18, 24, 36, 72"):
        build_topology("gb200-nvl72", nvlink_partition=16)
    with pytest.raises(ConfigError, match="no NVSwitch"):
        build_topology("mi300x", nvlink_partition=4)
    with pytest.raises(ConfigError, match="allowed: 8"):      # a DGX is one host
        build_topology("dgx-h100", nvlink_partition=4)
    with pytest.raises(ConfigError, match="nvlink_partition"):
        build_topology("gb200-nvl72", nvlink_partition=0)


def test_nvl72_ring_all_reduce_matches_the_closed_form(nvl72):
    n = 72 * 4 << 18                      # whole float32 blocks per rank, as the formula has
    res = simulate(build("all_reduce", "ring", 72), nvl72, n, protocol=ideal_protocol())
    alpha = 2 * NVL5.latency_s                                   # GPU -> switch -> GPU
    assert res.time_s == pytest.approx(cf.ring_all_reduce(72, alpha, 1 / NVL5.achievable_Bps,
                                                          n), rel=1e-9)


def test_nvls_in_the_rack_and_nvls_tree_across_racks(nvl72):
    n = 64 << 30
    r8 = predict("all_reduce", n, nvl72, algorithm="nvls", ranks=range(8))
    r72 = predict("all_reduce", n, nvl72, algorithm="nvls")
    # in-switch reduction: per-GPU traffic S(1 + 1/g), busbw = B.2(g-1)/(g+1)
    assert r72.busbw_GBps / r8.busbw_GBps == pytest.approx((2 * 71 / 73) / (2 * 7 / 9),
                                                           rel=0.01)
    assert predict("all_reduce", 1 << 30, nvl72).algorithm == "nvls"
    two = build_topology("gb200-nvl72", nodes=2, gpus_per_node=8)
    assert predict("all_reduce", 1 << 30, two, algorithm="nvls_tree").algorithm == "nvls_tree"


# ---- AMD MI300X ------------------------------------------------------------------------------
def test_mi300x_is_a_switchless_xgmi_mesh(mi300x):
    assert (mi300x.nranks, mi300x.in_switch_reduction) == (8, False)
    assert generation_of(mi300x) == "cdna3"
    assert not any(d.kind == "nvswitch" for d in mi300x.devices)
    for a in range(8):
        for b in range(8):
            if a != b:   # one direct x16 link per pair, no hop through a third GPU or a switch
                path = mi300x.route(a, b)
                assert techs(mi300x, path) == ["xgmi"]
                assert mi300x.links[path[0]].bandwidth_Bps == 64e9
    # the halves: 4 x 4 xGMI links, plus the host path (each socket's 2 PCIe uplinks)
    assert bisection_bandwidth(mi300x) == pytest.approx(16 * 64e9 + 2 * 64e9)


def test_mi300x_direct_all_to_all_and_ring_match_closed_forms(mi300x):
    n = 1 << 24
    alpha, beta = XGMI.latency_s, 1 / (XGMI.unit_Bps * XGMI.efficiency)   # one hop, one link
    for model in ("analytic", "flow"):
        a2a = simulate(build("all_to_all", "direct", 8), mi300x, n, model=model,
                       protocol=ideal_protocol())
        assert a2a.time_s == pytest.approx(cf.pairwise_all_to_all(8, alpha, beta, a2a.size),
                                           rel=1e-9)
        ring = simulate(build("all_reduce", "ring", 8), mi300x, n, model=model,
                        protocol=ideal_protocol())
        assert ring.time_s == pytest.approx(cf.ring_all_reduce(8, alpha, beta, n), rel=1e-9)


def test_mi300x_rings_cover_the_mesh_and_there_is_no_nvls(mi300x):
    rings = ring_orders(mi300x, list(range(8)))
    assert rings is not None and len(rings) >= 6   # one ring would use 1 of 7 links per GPU
    used = [(int(r[k]), int(r[(k + 1) % 8])) for r in rings for k in range(8)]
    assert len(used) == len(set(used))             # link-disjoint rings
    big = predict("all_reduce", 1 << 30, mi300x)
    assert big.algorithm == "ring"
    assert big.busbw_GBps == pytest.approx(len(rings) * 48, rel=0.05)
    assert all(p != "ll128" for _, p, _ in big.candidates)   # RCCL: LL128 off by default
    assert all(a != "nvls" for a, _, _ in big.candidates)
    with pytest.raises(ConfigError, match="nvls needs an NVSwitch"):
        predict("all_reduce", 1 << 20, mi300x, algorithm="nvls")


# ---- the command line ------------------------------------------------------------------------
def test_topo_show_and_sim_on_the_new_presets(capsys, tmp_path):
    assert main(["topo", "show", "-s", "gb200-nvl72", "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ranks"] == 72 and info["bisection_GBps"] == 32400.0
    assert info["per_gpu_GBps"][0]["to_host"] == 450.0            # Grace over NVLink-C2C
    assert main(["topo", "show", "-s", "gb200-nvl72", "--nvlink-partition", "16"]) == 2
    assert "allowed: 2, 4, 6, 8, 12, 18, 24, 36, 72" in capsys.readouterr().err
    assert main(["topo", "show", "-s", "mi300x", "--plot", str(tmp_path / "m.png")]) == 0
    assert (tmp_path / "m.png").stat().st_size > 0
    capsys.readouterr()
    assert main(["sim", "-s", "mi300x", "--collective", "all_to_all", "-b", "1M", "-e", "1M",
                 "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["algorithm"] == "grouped" and row["busbw"] > 0 and np.isfinite(row["time_us"])
