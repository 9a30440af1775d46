"""NCCL version as a model input (simulate/versions.py), and the tree's chain on shared links."""
import json
from pathlib import Path

import numpy as np
import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.simulate import constants as K
from gpucomm.simulate import predict
from gpucomm.simulate.core import path_table
from gpucomm.simulate.nccl import _shape, chain_link_load
from gpucomm.simulate.protocol import get_protocol
from gpucomm.simulate.versions import HISTORY, NEWEST, OLDEST, parse_version, use, value
from gpucomm.topology import build_topology

US = 1e-6


def test_newest_entry_of_every_history_is_todays_constant():
    for name, history in HISTORY.items():
        assert value(name, NEWEST) == getattr(K, name), name
        since = [v for v, _, _ in history]
        assert since == sorted(since), name


@pytest.mark.parametrize("text, want", [
    ("2.18", (2, 18)), ("2.18.5-1", (2, 18)), ("~2.19 (pytorch:24.01)", (2, 19)),
    ("from pytorch:24.01 container (~2.19)", (2, 19)), ("2.29.2 (22902)", (2, 29)),
    ("2.17.1+cuda11.8", (2, 17)), ("not printed (2025)", None), ("", None), (None, None),
    ("2.99", NEWEST), ("2.4.8+cuda10.0", OLDEST), ("2.3", OLDEST)])
def test_parse_version_is_lenient(text, want):
    assert parse_version(text) == want


@pytest.mark.parametrize("text", ["abc", "3.1", "2.3", "two"])
def test_parse_version_strict_names_the_field(text):
    with pytest.raises(ConfigError, match="nccl version"):
        parse_version(text, strict=True)


def test_constants_follow_the_version():
    # tuning.cc hwLat[NET][Ring][Simple]: 9.6 us (2.7), 28 (2.12), 9.6 (2.14), 14 (2.18)
    for version, us in (("2.7", 9.6), ("2.12", 28.0), ("2.14", 9.6), ("2.18", 14.0)):
        with use(version):
            assert get_protocol("simple").hop_latency_s[2] == pytest.approx(us * US)
    # llMaxBws arrived in 2.8: no LL cap before
    with use("2.7"):
        assert get_protocol("ll", "ampere", 1).total_cap_Bps == float("inf")
    with use("2.8"):
        assert get_protocol("ll", "ampere", 1).total_cap_Bps == pytest.approx(87.7e9)
    assert get_protocol("ll", "hopper", 1).total_cap_Bps == pytest.approx(141.0e9)


def test_tree_latency_difference_between_2_22_and_2_23_is_natural():
    """2.23 cut a Simple tree step from 28 us to 4 us and gave Simple trees an 8.4 us base:
    on one 8-GPU node (a chain of 7 NVLink hops, up and down) the difference at one size is
    2·7·(28 - 4) - 8.4 us, the bandwidth and fill terms being the same in both."""
    t = build_topology("dgx-h100")
    old = predict("all_reduce", 1 << 20, t, algorithm="tree", protocol="simple",
                  nccl_version="2.22")
    new = predict("all_reduce", 1 << 20, t, algorithm="tree", protocol="simple",
                  nccl_version="2.23")
    assert (old.time_s - new.time_s) * 1e6 == pytest.approx(2 * 7 * (28 - 4) - 8.4, rel=1e-9)


def test_algorithms_arrive_with_their_version():
    t = build_topology("dgx-h100")
    with pytest.raises(ConfigError, match="arrived in NCCL 2.17"):
        predict("all_reduce", 1 << 30, t, algorithm="nvls", nccl_version="2.16")
    old = predict("all_reduce", 1 << 30, t, nccl_version="2.16")
    assert all(a != "nvls" for a, _, _ in old.candidates)
    assert predict("all_reduce", 1 << 30, t, nccl_version="2.18").algorithm == "nvls"
    assert predict("all_reduce", 1 << 30, t).algorithm == "nvls"


def test_nccls_ring_ll_rating_follows_the_version():
    """tuning.cc rated ring/LL at 1/4 of the ring graph's busBw across nodes (1/3 for one-node
    all-gather, reduce-scatter, broadcast) until v2.20.5-1, at .5 from v2.21.5-1: NCCL 2.18's
    model ranks ring/LL128 before ring/LL for a 16 MiB all-gather on 128 Polaris nodes, today's
    the other way round."""
    from gpucomm.simulate import nccl_tuning
    assert value("RING_LL_BUSBW_SHARE", (2, 20)) == (0.25, 1 / 3)
    assert value("RING_LL_BUSBW_SHARE", (2, 21)) == (0.5, 0.5)
    t = build_topology("polaris", nodes=128)
    for version, first in (("2.18", "ll128"), ("2.21", "ll")):
        with use(version):
            assert nccl_tuning.estimates("all_gather", 16 << 20, t, 16)[0][1:] == ("ring", first)


def test_ll128_default_follows_the_version():
    # LL128 on by default on Volta only until 2.7 added Ampere
    t = build_topology("dgx-a100")
    old = predict("all_reduce", 1 << 20, t, nccl_version="2.6")
    assert all(p != "ll128" for _, p, _ in old.candidates)
    assert any(p == "ll128" for _, p, _ in predict("all_reduce", 1 << 20, t).candidates)


def test_cli_nccl_version(capsys):
    argv = ["sim", "--system", "dgx-h100", "-b", "1M", "-e", "1M"]
    with pytest.raises(SystemExit) as bad:  # argparse's one line, as doctor's
        main(argv + ["--nccl-version", "latest"])
    assert bad.value.code == 2
    err = capsys.readouterr().err
    assert "nccl version 'latest'" in err and len(err.strip().splitlines()) == 1
    assert main(argv + ["--nccl-version", "2.16", "--format", "json"]) == 0
    old = json.loads(capsys.readouterr().out)
    assert old["rows"][0]["algorithm"] != "nvls"
    assert main(argv + ["--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["algorithm"] == "nvls"


# --- a tree's chain over links its two directions share ---------------------------------------

def _pcie(p2p):
    return build_topology(system="pcie", gpu="rtx4090", nodes=1, gpus_per_node=2, pcie_gen=4,
                          p2p=p2p)


def test_chain_counts_both_directions_on_the_host_uplink():
    """Without P2P both directions of the 2-GPU chain run through host memory, so the PCIe
    switch's uplink carries both; with P2P the switch turns them around and no link is
    shared."""
    for p2p, want in ((False, 2), (True, 1)):
        t = _pcie(p2p)
        paths = path_table(t, np.arange(2))
        fwd = paths.routes(np.array([0]), np.array([1]), 0)
        back = paths.routes(np.array([1]), np.array([0]), 0)
        links, count, share = chain_link_load(paths, fwd, back)
        assert count.max() == want
        assert share == pytest.approx(float(paths.capacity[links].min()) / want)


def test_tree_on_pcie_without_p2p_matches_hand_formula(monkeypatch):
    """Tree all-reduce, 2 GPUs under one PCIe Gen4 x16 switch, no P2P, 1 GiB, Simple:
    t = base + 2·(hop_pcie + route latency) + S / (C/2) + fill (no tree correction from
    512 MiB: tuning.cc reads treeCorrectionFactor for logSize < 23 only), C the x16 link's
    payload rate (32 GB/s x 0.85), the fill one 512 KiB chunk per channel at the chain's rate.
    The links' model alone: the SHM transport's own ceilings (simulate/shm.py: what a GPU
    receives through host memory, the Intel root-complex charge) are lifted here."""
    from gpucomm.simulate import shm
    monkeypatch.setattr(shm, "SHM_RECV_GBPS", float("inf"))
    monkeypatch.setattr(shm, "INTEL_P2P_OVERHEAD", 1.0)
    t = _pcie(False)
    size = 1 << 30
    res = predict("all_reduce", size, t, algorithm="tree", protocol="simple")
    c = 32e9 * 0.85
    shape = _shape(path_table(t, np.arange(2)), t, np.arange(2))
    lat_route = shape["chain"][3]
    t_bw = size / (c / 2)
    want = (K.TREE_BASE_LATENCY_S["simple"] + 2 * (K.TREE_HOP_LATENCY_S["simple"][1] + lat_route)
            + t_bw + t_bw * 512 * 1024 * 16 / size)
    assert res.time_s == pytest.approx(want, rel=1e-9)
    # and the ring on the same links is faster, so auto runs the ring, as NCCL's tuner does
    # (its one-node tree bandwidth is at most 0.92 x 0.85 of the ring's, tuning.cc)
    assert predict("all_reduce", size, t).algorithm == "ring"
    # with P2P the tree's chain shares nothing: twice the bandwidth term
    p2p = predict("all_reduce", size, _pcie(True), algorithm="tree", protocol="simple")
    assert p2p.busbw_GBps > 1.8 * res.busbw_GBps


def test_point_to_point_keeps_todays_costs():
    """tuning.cc's constants are those of NCCL's collectives; send/recv and all-to-all run as
    grouped p2p and take none of them from the version."""
    t = build_topology("dgx-a100")
    for coll in ("sendrecv", "all_to_all"):
        old = predict(coll, 1024, t, nccl_version="2.7")
        assert old.time_s == predict(coll, 1024, t).time_s


def test_ll128_per_channel_caps_follow_the_tags():
    """tuning.cc's LL128 caps per channel (GB/s; N1, N2, N4) as each tag has them: Hopper's
    36.7 from v2.17.1-1 (ll128MaxBwPerCh[compCapIndex]), the tree's own N4 29.0 from v2.18.3-1
    (perChMaxTreeLL128Bws), Blackwell on Hopper's row until its own in v2.25.1-1 (2 x 36.7),
    then v2.28.9-1's N2 34.6 and v2.29.7-1's 40.0."""
    ring = {v: value("LL128_PER_CHANNEL_BW", v) for v in ((2, 16), (2, 17), (2, 18), (2, 24),
                                                          (2, 25), (2, 28), (2, 29))}
    assert ring[(2, 16)]["hopper"] == (20.0,) * 3
    assert ring[(2, 17)]["hopper"] == ring[(2, 24)]["blackwell"] == (36.7,) * 3
    assert ring[(2, 25)]["blackwell"] == (2 * 36.7,) * 3
    assert ring[(2, 28)]["blackwell"] == (2 * 36.7, 34.6, 2 * 36.7)
    assert ring[(2, 29)]["blackwell"] == (40.0,) * 3
    tree = {v: value("TREE_LL128_PER_CHANNEL_BW", v) for v in ((2, 17), (2, 18), (2, 25),
                                                              (2, 28))}
    assert tree[(2, 17)]["hopper"] == (36.7,) * 3  # the ring's, shared
    assert tree[(2, 18)]["hopper"] == tree[(2, 18)]["blackwell"] == (36.7, 36.7, 29.0)
    assert tree[(2, 25)]["blackwell"] == (2 * 36.7, 2 * 36.7, 2 * 29.0)
    assert tree[(2, 28)]["blackwell"] == (55.6, 31.67, 20.0)
    assert value("TREE_PER_CHANNEL_BW", (2, 24))["blackwell"] == (38.7, 41.4, 36.0)


def test_ll128_across_nodes_over_c2c_arrives_in_2_27():
    """A GH200 reaches its NIC through its Grace (C2C, then the Grace's PCIe): NCCL typed that
    path PHB and kept LL128 off across nodes (tuning.cc typeInter <= PATH_PXB, or PXN on
    Hopper, v2.23.4-1) until v2.27.3-1's NCCL_LL128_C2C admitted PATH_P2C. One topology asked
    under both versions (its memo keeps them apart); one node keeps LL128 on NVLink."""
    t = build_topology("cray-ex254n", nodes=32)
    protos = {}
    for version in ("2.23", "2.27", "2.23"):
        res = predict("all_reduce", 256 << 20, t, nccl_version=version)
        protos[version] = {p for _, p, _ in res.candidates}
    assert "ll128" not in protos["2.23"] and "ll128" in protos["2.27"]
    assert value("LL128_C2C", (2, 26)) is False and value("LL128_C2C", (2, 27)) is True
    one = predict("all_reduce", 1 << 20, build_topology("cray-ex254n"), nccl_version="2.23")
    assert "ll128" in {p for _, p, _ in one.candidates}


def test_empty_collective_moves_nothing_and_launches_nothing_from_2_20():
    """nccl-tests prints 0-byte rows where a size is below one element per rank. From v2.20.3-1
    NCCL returns before enqueueing a 0-element collective (enqueue.cc:1865); v2.18 still
    launched its kernel, with no proxy operation (enqueue.cc:336). Measured in the corpus:
    0.23-0.26 us on NCCL 2.21 and 2.22, 8.4-8.8 us on 2.18, where 511 ring steps were once
    predicted as 1.25 ms. A 0-byte all-to-all is point-to-point, still a proxy operation per
    peer, and still timed."""
    t = build_topology("polaris", nodes=128)
    new = predict("all_gather", 0, t)
    old = predict("all_gather", 0, t, nccl_version="2.18")
    assert new.time_s == 0 and new.algorithm == "none" and new.reason == "none (0 bytes)"
    assert old.time_s == get_protocol("ll", "ampere", 128).base_latency_s
    assert 5e-6 <= old.time_s <= 9e-6 and "enqueue.cc" in old.note and "2.20" in new.note
    assert predict("all_gather", 512 * 4, t, nccl_version="2.18").time_s > 1e-3  # steps again
    assert predict("all_to_all", 0, build_topology("dgx-a100", nodes=2)).time_s > 20e-6


def test_doctor_predicts_a_logs_empty_rows_as_their_nccl_ran_them(capsys):
    """Polaris' 128-node all_gather on NCCL 2.18 and its 2-node one on 2.21 (data/logs, raw)."""
    logs = Path(__file__).resolve().parents[1] / "data" / "logs"
    for name, version, lo, hi in (("polaris-nccl218-128n-all_gather.log", "2.18", 5, 9),
                                  ("polaris-nccl221-2n-all_gather.log", "2.21", 0, 0)):
        assert main(["doctor", str(logs / name), "--nccl-version", version,
                     "--format", "json"]) == 0
        rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["size"] == 0]
        assert rows and all(lo <= r["predicted_time_us"] <= hi and 0 < r["time_us"] < 9
                            for r in rows)
