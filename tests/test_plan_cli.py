"""`gpucomm plan` end to end: the simulator times the collectives on the preset topologies."""
import json

import pytest

from gpucomm.cli import main


def run(capsys, *argv):
    rc = main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


DECODE = ["--model", "llama3-70b", "--mode", "decode", "--tp", "8", "--seq", "4096",
          "--global-batch", "1"]


def test_json_has_the_documented_fields(capsys):
    rc, out, _ = run(capsys, "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2",
                     "--tp", "4", "--pp", "2", "--seq", "4096", "--global-batch", "16",
                     "--format", "json")
    assert rc == 0
    d = json.loads(out)
    for key in ("step_time_s", "compute_time_s", "comm_time_s", "exposed_comm_s",
                "tokens_per_s", "tflops_per_gpu", "mfu", "memory_per_gpu_bytes"):
        assert key in d
    assert d["layout"]["dp"] == 2 and d["gpus"] == 16
    assert set(d["comm_time_s"]) == {"TP", "PP", "DP"}
    assert all(v > 0 for v in d["comm_time_s"].values())
    assert d["step_time_s"] == pytest.approx(d["compute_time_s"] + d["exposed_comm_s"]
                                             + d["bubble_s"] + d["optimizer_time_s"])
    assert d["mfu_basis"] == "model FLOPs / dense bf16 peak"
    assert {o["switch"] for o in d["overlaps"]} == {"dp_overlap", "tp_overlap", "cp_overlap",
                                                    "pp_overlap", "ep_overlap"}
    assert d["tokens_per_s"] == pytest.approx(16 * 4096 / d["step_time_s"])
    assert 0 < d["mfu"] < 1


def test_table_names_every_part_of_the_step(capsys):
    rc, out, _ = run(capsys, "--model", "mixtral-8x7b", "--nodes", "2", "--tp", "2",
                     "--ep", "8", "--seq", "4096", "--global-batch", "16", "--collectives")
    assert rc == 0
    for word in ("step time", "compute", "TP comm", "EP comm", "DP comm", "tokens/s", "MFU",
                 "memory per GPU", "all_to_all"):
        assert word in out


def test_tp_over_pcie_costs_more_than_over_nvswitch(capsys):
    rc, out, _ = run(capsys, *DECODE, "--gpu", "h100", "--pcie-gen", "5", "--format", "json",
                     "--compare", "system=dgx-h100,pcie")
    assert rc == 0
    nv, pcie = json.loads(out)
    assert nv["variant"] == "system=dgx-h100" and pcie["variant"] == "system=pcie"
    assert nv["compute_time_s"] == pytest.approx(pcie["compute_time_s"])  # same GPU
    assert pcie["comm_time_s"]["TP"] > 1.5 * nv["comm_time_s"]["TP"]


def test_dp_across_nodes_feels_the_nic(capsys):
    rc, out, _ = run(capsys, "--model", "llama3-8b", "--nodes", "2", "--tp", "8", "--seq",
                     "4096", "--global-batch", "8", "--format", "json",
                     "--compare", "nic=ib-ndr,roce-100g")
    assert rc == 0
    fast, slow = json.loads(out)
    assert slow["comm_time_s"]["DP"] > 2 * fast["comm_time_s"]["DP"]
    assert fast["comm_time_s"]["TP"] == pytest.approx(slow["comm_time_s"]["TP"])


def test_search_ranks_layouts_that_fit(capsys):
    rc, out, _ = run(capsys, "--model", "llama3-8b", "--nodes", "1", "--seq", "4096",
                     "--global-batch", "16", "--search", "--format", "json", "--top", "50")
    assert rc == 0
    rows = json.loads(out)["ranked"]
    times = [r["step_time_s"] for r in rows]
    assert times == sorted(times) and len(rows) >= 3
    assert all(r["memory_per_gpu_bytes"] <= r["hbm_bytes"] for r in rows)
    assert all(r["layout"]["tp"] * r["layout"]["pp"] * r["layout"]["dp"] * r["layout"]["cp"]
               == 8 for r in rows)


def test_ep_all_to_all_shows_its_parts_inside_and_across_nodes(capsys):
    rc, out, _ = run(capsys, "--model", "mixtral-8x22b", "--nodes", "8", "--tp", "2",
                     "--pp", "4", "--ep", "8", "--seq", "4096", "--global-batch", "32",
                     "--recompute", "full", "--moe-imbalance", "1.3")
    assert rc == 0
    assert "EP all-to-all inside nodes (NVLink)" in out
    assert "EP all-to-all across nodes (RDMA)" in out
    assert "moe-imbalance=1.3" in out and "overlap TP off" in out


def test_plot_writes_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "step.png"
    rc, _, _ = run(capsys, *DECODE, "--plot", str(path))
    assert rc == 0 and path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt-9"], "unknown model 'gpt-9': allowed are"),
    (["--model", "llama3-8b", "--system", "cray-1"], "cray-1"),
    (["--model", "llama3-70b", "--tp", "3", "--nodes", "1", "--dp", "1", "--pp", "1"],
     None),
    (["--model", "llama3-70b", "--tp", "8", "--nodes", "2", "--dp", "1"],
     "use dp=2"),
    (["--model", "llama3-70b", "--tp", "6", "--dp", "1", "--nodes", "1"], "valid tp are"),
    (["--model", "llama3-405b", "--tp", "8", "--seq", "8192"], "does not fit"),
    (["--model", "llama3-8b", "--compare", "colour=red"], "allowed are"),
    (["--model", "llama3-8b", "--precision", "mxfp8"], "recipes for it: tensorwise"),
    (["--model", "llama3-8b", "--recompute-modules", "foo"], "allowed are layernorm"),
    (["--model", "llama3-8b", "--tp", "4", "--etp", "3"], "etp must divide tp=4"),
    (["--model", "llama3-8b", "--topology", "/nonexistent.yaml"], "cannot read topology"),
    (["--model", "llama3-405b", "--nodes", "2048", "--nic", "roce-400g", "--tp", "8", "--pp",
      "16", "--vpp", "8", "--seq", "8192", "--global-batch", "2048", "--fp32-grads"],
     "--zero 2 would fit"),
    (["--model", "mixtral-8x7b", "--moe-imbalance", "0.5"], "moe_imbalance must be"),
    (["--model", "llama3-8b", "--system", "dgx-a100", "--precision", "fp8"], "no fp8"),
    (["--model", "llama3-8b", "--search"], "--search needs --global-batch"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpucomm plan: error: ")
    if message:
        assert message in err


def test_full_cuda_graph_drops_the_per_expert_launches_of_a_dropless_moe(capsys):
    argv = ["--model", "qwen3-30b-a3b", "--system", "dgx-b200", "--ep", "8", "--seq", "4096",
            "--global-batch", "64", "--precision", "mxfp8", "--format", "json"]
    rc, out, _ = run(capsys, *argv)
    rc2, out2, _ = run(capsys, *argv, "--full-cuda-graph")
    assert rc == rc2 == 0
    eager, graphed = json.loads(out), json.loads(out2)
    assert not eager["layout"]["full_cuda_graph"] and graphed["layout"]["full_cuda_graph"]
    assert graphed["step_time_s"] < eager["step_time_s"]
    assert graphed["comm_time_s"] == eager["comm_time_s"]
    rc, out, _ = run(capsys, *argv[:-2], "--full-cuda-graph")
    assert rc == 0 and "full-cuda-graph" in out
