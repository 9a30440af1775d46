"""auto's choice by NCCL's own tuning model (simulate/nccl_tuning.py, predict(select="nccl")):
the pair NCCL's model ranks fastest, timed by gpucomm's model."""
import json
from pathlib import Path

import pytest

from gpucomm.errors import ConfigError
from gpucomm.simulate import nccl_tuning, predict
from gpucomm.topology import build_topology

MIB = 1 << 20
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


@pytest.fixture(scope="module")
def a100x2():
    return build_topology("dgx-a100", nodes=2)


def test_nccl_selection_runs_nccls_pick_where_gpucomms_timing_prefers_another(a100x2):
    # 2 x DGX-A100 all-reduce at 1 GiB: gpucomm times tree/simple fastest (each byte crosses
    # the network once each way), NCCL's model (tree bandwidth .92 x capped per search
    # channel, ring's at 2 nodes the intra figure) ring/simple
    fastest = predict("all_reduce", 1 << 30, a100x2)
    nccl = predict("all_reduce", 1 << 30, a100x2, select="nccl")
    assert (fastest.algorithm, fastest.protocol) == ("tree", "simple")
    assert (nccl.algorithm, nccl.protocol) == ("ring", "simple")
    times = {(a, p): t for a, p, t in nccl.candidates}
    assert nccl.time_s == pytest.approx(times["ring", "simple"])  # timed by gpucomm's model
    assert fastest.time_s < nccl.time_s
    est = nccl_tuning.estimates("all_reduce", 1 << 30, a100x2, nccl.nccl_channels,
                                protocols={p for _, p in times})
    assert est[0][1:] == ("ring", "simple")
    assert est[0][0] < next(t for t, a, p in est if (a, p) == ("tree", "simple"))


def test_nccl_selection_keeps_the_candidates_it_may_choose_from(a100x2):
    res = predict("all_reduce", 16 * MIB, a100x2, select="nccl", protocol="simple",
                  exclude=["ring"])
    assert (res.algorithm, res.protocol) == ("tree", "simple")
    assert nccl_tuning.ranked("all_reduce", 16 * MIB, a100x2, 16, 16, 2,
                              {("tree", "simple")}) == [("tree", "simple")]
    assert nccl_tuning.ranked("all_to_all", MIB, a100x2, 16, 16, 2,
                              {("grouped", "simple")}) == []


def test_nccl_selection_ranks_fp8_rings_over_eight_ranks_1024x_slower(a100x2):
    pairs = {("ring", "simple"), ("tree", "simple")}
    assert nccl_tuning.ranked("all_reduce", 1 << 30, a100x2, 16, 16, 2, pairs)[0] == \
        ("ring", "simple")
    assert nccl_tuning.ranked("all_reduce", 1 << 30, a100x2, 16, 16, 2, pairs, fp8=True) == \
        [("tree", "simple"), ("ring", "simple")]


def test_nccl_selection_falls_back_to_the_fastest_where_nccls_model_has_none(a100x2):
    nccl = predict("all_to_all", MIB, a100x2, select="nccl")
    fastest = predict("all_to_all", MIB, a100x2)
    assert (nccl.algorithm, nccl.time_s) == (fastest.algorithm, fastest.time_s)


def test_a_bad_selection_is_one_line_naming_the_allowed(a100x2):
    with pytest.raises(ConfigError, match="select 'ncc' not allowed: choose from fastest, nccl"):
        predict("all_reduce", MIB, a100x2, select="ncc")


def test_sim_doctor_and_calibrate_take_select(capsys, tmp_path):
    from gpucomm.cli import main
    args = ["sim", "--system", "dgx-a100", "--nodes", "2", "-b", "1G", "-e", "1G",
            "--format", "json"]
    picks = {}
    for select in ("fastest", "nccl"):
        assert main([*args, "--select", select]) == 0
        row = json.loads(capsys.readouterr().out)["rows"][-1]
        picks[select] = (row["algorithm"], row["protocol"])
    assert picks == {"fastest": ("tree", "simple"), "nccl": ("ring", "simple")}
    log = LOGS / "polaris-nccl218-2n-all_reduce.log"
    chosen = {}
    for select in ("fastest", "nccl"):
        assert main(["doctor", str(log), "--select", select, "--format", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        chosen[select] = {r["size"]: r["algorithm"] for r in rows}
    # Polaris at 1 GiB: gpucomm times the 2-node tree fastest (each byte crosses the network
    # once each way), NCCL's model ranks the ring first (A100's tree capped per search channel)
    assert chosen["fastest"][1 << 30] == "tree" and chosen["nccl"][1 << 30] == "ring"
    out = tmp_path / "p.yaml"
    assert main(["calibrate", str(log), "--select", "nccl", "--output", str(out)]) == 0
    assert out.is_file()
    with pytest.raises(SystemExit):
        main([*args, "--select", "ncc"])
    assert "invalid choice: 'ncc'" in capsys.readouterr().err


def test_nccl_selection_times_nvls_trees_over_the_nvls_graphs_heads():
    # 2 x DGX H100 with 4 NICs: NCCL's NVLS graph finds one head per NIC (search.cc), so its
    # model counts 4 channels for NVLSTree (tuning.cc busBw = graphs[a]->nChannels x bw), not
    # the ring graph's 16; at 1 GiB that ranks the tree first (on 2 nodes NCCL reads the tree
    # graph's bwIntra, which its search raises to twice bwInter: search.cc).
    from gpucomm.simulate import nccl
    topo = build_topology(system="dgx-h100", nodes=2, nic="ib-ndr", nics_per_node=4)
    size = 1 << 30
    on = {"algorithms": {"nvls_tree"}, "protocols": {"simple"}}
    at16 = nccl_tuning.estimates("all_reduce", size, topo, 16, **on)[0][0]
    at4 = nccl_tuning.estimates("all_reduce", size, topo, 16, nvls_channels=4, **on)[0][0]
    assert at4 > 1.5 * at16
    assert nccl.nvls_heads(8, 4, 2) == 4
    res = predict("all_reduce", size, topo, select="nccl")
    assert (res.algorithm, res.protocol) == ("tree", "simple")
    full = build_topology(system="dgx-h100", nodes=2, nic="ib-ndr", nics_per_node=8)
    assert predict("all_reduce", size, full, select="nccl").algorithm == "nvls_tree"


def test_nccls_model_rates_ll128_on_volta_as_nccl_enables_it_there():
    """tuning.cc enables LL128 on Volta over NVLink (v2.8.4-1: `minCompCap == 70 && maxCompCap
    == 70`; 5067397: `!(minCompCap < 70 || ...)`): on 2 x DGX-1 V100 NCCL's model ranks an
    LL128 pair first for a 1 MiB all-reduce, and select="nccl" runs it, under 2.8 and today."""
    from gpucomm.simulate import versions
    v100x2 = build_topology("dgx-v100", nodes=2)
    pairs = {(a, p) for a in ("ring", "tree") for p in ("ll", "ll128", "simple")}
    for version in ("2.8", None):
        with versions.use(version):
            first = nccl_tuning.ranked("all_reduce", MIB, v100x2, 16, 16, 2, pairs)[0]
            assert first[1] == "ll128"
            res = predict("all_reduce", MIB, v100x2, select="nccl")
            assert (res.algorithm, res.protocol) == first


@pytest.mark.parametrize("version, gpus_per_node, want_busbw", [
    # one GPU a node: its ring graph is the one NDR NIC's 48 GB/s split over 2 channels
    # (search.cc ncclTopoDupChannels), 2 x 24 GB/s; tuning.cc discounts it to 0.7 while ppn < 2
    # (v2.7.3-1 .. v2.22.3-1), to 0.92 from v2.23.4-1; perChMaxRingLL128Bws (2 x 36.7) above
    ("2.22", 1, 2 * 24.0 * 0.7), ("2.23", 1, 2 * 24.0 * 0.92), ("2.28", 1, 2 * 24.0 * 0.92),
    # eight GPUs a node, 8 x NDR: 8 channels at 48 GB/s, capped at 8 per-channel LL128 caps:
    # ll128MaxBwPerCh 20 for all (v2.16.2-1), Hopper's 36.7 from v2.17.1-1 (ll128MaxBwPerCh
    # [compCapIndex]) and in perChMaxRingLL128Bws (v2.18.3-1 on)
    ("2.16", 8, 8 * 20.0), ("2.17", 8, 8 * 36.7), ("2.22", 8, 8 * 36.7), ("2.28", 8, 8 * 36.7)])
def test_nccls_ring_ll128_busbw_follows_the_version(version, gpus_per_node, want_busbw):
    """tuning.cc: busBw = min(nChannels x bw x (ppn < 2 ? 0.7 : 0.92), nChannels x
    perChMaxRingLL128Bw) (v2.22.3-1 tuning.cc:179; v2.23.4-1:188 and v2.29.7-1:306 drop the
    ppn < 2 discount), read back from two sizes' estimates as NCCL's model times them."""
    from gpucomm.simulate import versions
    topo = build_topology("dgx-h100", nodes=2, gpus_per_node=gpus_per_node)
    nranks = 2 * gpus_per_node
    on = {"algorithms": {"ring"}, "protocols": {"ll128"}}
    with versions.use(version):
        t1, t2 = (nccl_tuning.estimates("all_reduce", s, topo, 16, **on)[0][0]
                  for s in (64 * MIB, 128 * MIB))
    algbw = 64 * MIB / (1000 * (t2 - t1))  # GB/s: estimates are in us
    assert algbw * 2 * (nranks - 1) / nranks == pytest.approx(want_busbw, rel=1e-9)
