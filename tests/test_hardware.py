"""The hardware catalog: the headline figures, units, sources, and `gpucomm hw`."""
import json

import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.hardware import (catalog, get_gpu, get_link_tech, get_nic, get_nvswitch, gpus,
                              link_techs, nic_names, nvswitches)


@pytest.mark.parametrize("name, bidir_GBps", [
    ("pcie3", 32), ("pcie4", 64), ("pcie5", 128), ("pcie6", 256),
    ("nvlink2", 300), ("nvlink3", 600), ("nvlink4", 900), ("nvlink5", 1800),
    ("ib-edr", 25), ("ib-hdr", 50), ("ib-ndr", 100), ("ib-xdr", 200),
    ("roce-100g", 25), ("roce-200g", 50), ("roce-400g", 100), ("roce-800g", 200),
    ("efa-100g", 25), ("tcp-10g", 2.5), ("tcp-25g", 6.25), ("tcp-100g", 25),
    ("slingshot-200g", 50)])
def test_headline_bidirectional_figures_are_exact(name, bidir_GBps):
    assert get_link_tech(name).bidirectional_Bps == bidir_GBps * 1e9


def test_contract_figures():
    assert get_link_tech("pcie5").bidirectional_Bps == 128e9
    assert get_link_tech("nvlink4").bidirectional_Bps == 900e9
    assert get_link_tech("ib-ndr").bandwidth_Bps == 400e9 / 8
    assert get_link_tech("nvlink4").bidirectional_Bps / get_link_tech("pcie5").bidirectional_Bps \
        == pytest.approx(7.03, abs=0.005)


def test_nvlink_is_links_times_per_link_rate():
    for name, links, per_link in (("nvlink2", 6, 25e9), ("nvlink3", 12, 25e9),
                                  ("nvlink4", 18, 25e9), ("nvlink5", 18, 50e9)):
        t = get_link_tech(name)
        assert (t.links, t.unit_Bps) == (links, per_link)
        assert t.bandwidth_Bps == links * per_link


def test_nominal_and_achievable_kept_apart_and_nccl_figures():
    for t in link_techs():
        assert 0 < t.efficiency <= 1
        assert t.achievable_Bps == pytest.approx(t.bandwidth_Bps * t.efficiency)
        assert t.source and t.latency_s > 0
    # NCCL's own model values (topo.h) are kept next to the nominal ones
    assert get_link_tech("pcie5").nccl_Bps == 48e9
    assert get_link_tech("ib-ndr").nccl_Bps == 50e9
    assert get_link_tech("nvlink4").nccl_Bps == pytest.approx(18 * 20.6e9)
    assert get_link_tech("nvlink4").achievable_Bps == pytest.approx(18 * 20.6e9)


def test_gpus():
    assert {g.name for g in gpus()} >= {"v100", "a100", "h100", "h200", "b200", "gb200",
                                        "mi300x", "mi355x", "t4", "l40s", "rtx4090", "h800",
                                        "h20", "h100-96gb"}
    h100 = get_gpu("H100")
    assert (h100.nvlink, h100.nvlink_links, h100.pcie, h100.sm) == ("nvlink4", 18, "pcie5", "sm90")
    assert h100.hbm_bandwidth_Bps == 3.35e12 and h100.hbm_bytes == 80e9
    assert h100.bf16_flops == pytest.approx(989.4e12)
    assert get_gpu("h200").hbm_bytes == 141e9
    assert get_gpu("rtx4090").nvlink is None and get_gpu("l40s").nvlink_links == 0
    for g in gpus():
        assert g.source
        if g.nvlink:
            assert get_link_tech(g.nvlink).links == g.nvlink_links


def test_nvswitch_generations():
    assert [s.reduces_in_switch for s in nvswitches()] == [False, False, True, True]
    assert get_nvswitch("nvswitch3").nvlink == "nvlink4"


def test_unknown_names_list_what_is_allowed():
    with pytest.raises(ConfigError, match="unknown link technology 'nvlink9'.*pcie5"):
        get_link_tech("nvlink9")
    with pytest.raises(ConfigError, match="unknown GPU 'h300'.*h100"):
        get_gpu("h300")
    with pytest.raises(ConfigError, match="unknown NVSwitch"):
        get_nvswitch("nvswitch9")
    with pytest.raises(ConfigError, match="unknown NIC 'pcie5'.*ib-ndr"):
        get_nic("pcie5")
    assert {"ib-ndr", "ib-hdr", "roce-100g", "roce-200g", "roce-400g", "efa-100g", "efa-400g",
            "slingshot-200g", "tcp-100g"} <= set(nic_names())


def test_catalog_is_cached_and_complete():
    assert catalog() is catalog()
    assert len(catalog()["links"]) >= 25


def test_cli_compare_prints_ratio(capsys):
    assert main(["hw", "compare", "nvlink4", "pcie5"]) == 0
    out = capsys.readouterr().out
    assert "7.03x" in out and "900 GB/s" in out and "128 GB/s" in out


def test_cli_compare_json_and_gpus(capsys):
    assert main(["hw", "compare", "nvlink4", "pcie5", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ratio"] == pytest.approx(900 / 128)
    assert main(["hw", "compare", "b200", "h100"]) == 0
    assert "2.39x" in capsys.readouterr().out   # 8 TB/s / 3.35 TB/s


def test_cli_list(capsys):
    assert main(["hw", "list"]) == 0
    out = capsys.readouterr().out
    for word in ("nvlink5", "ib-xdr", "rtx4090", "nvswitch4", "efa-400g"):
        assert word in out
    assert main(["hw", "list", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in data["gpus"]} >= {"h100", "b200"}
    assert all(r["source"] for r in data["links"])


def test_cli_bad_name_is_one_line_exit_2(capsys):
    assert main(["hw", "compare", "nvlink9", "pcie5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nvlink9" in err and "Traceback" not in err
