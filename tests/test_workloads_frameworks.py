"""fp8 as a mechanism, framework profiles as data, MoE memory savers and EP overlap (issue 26)."""
import sys
from pathlib import Path

import pytest
import yaml
from gpucomm.errors import ConfigError
from gpucomm.hardware import get_gpu
from gpucomm.workloads import Layout, get_model, memory_per_gpu, training_comms
from gpucomm.workloads import steptime as stm
from gpucomm.workloads.compute import fp8_operand_elements, gemm_rate, layer_times
from gpucomm.workloads.frameworks import (FP8_RECIPES, OVERLAP_KEYS, fp8_recipe, get_framework,
                                          get_recipe, list_frameworks)
from gpucomm.workloads.layout import stage_layers
from gpucomm.workloads.request import PlanRequest

H100 = get_gpu("h100")
DATA = Path(__file__).resolve().parents[1] / "src" / "gpucomm" / "data" / "frameworks"


def test_every_profile_number_has_its_source_beside_it():
    assert {"megatron", "torchtitan", "torchtitan-compile", "deepspeed"} <= set(list_frameworks())
    for name in list_frameworks():
        raw = yaml.safe_load((DATA / f"{name}.yaml").read_text())
        assert all(v["source"] for v in raw["kernels"].values())
        assert all(raw["overlaps"][k]["source"] for k in OVERLAP_KEYS)
        fw = get_framework(name)
        assert fw.kernels_for(H100).gemm > 0 and set(fw.overlaps) == set(OVERLAP_KEYS)
    for name in FP8_RECIPES:
        assert get_recipe(name).source


def test_fp8_runs_only_the_projection_and_mlp_gemms_in_fp8():
    m = get_model("llama3-70b")
    lay = Layout(tp=8, seq=4096)
    bf16 = layer_times(m, lay, H100, 1, 4096)
    fp8 = layer_times(m, lay.with_(precision="tensorwise"), H100, 1, 4096)
    assert fp8.attention_s == bf16.attention_s  # softmax core stays bf16
    assert fp8.elementwise_s == bf16.elementwise_s  # norms, activations stay bf16
    k = get_framework("megatron").kernels_for(H100)
    assert fp8.gemm_s == pytest.approx(bf16.gemm_s * k.gemm * H100.bf16_flops
                                       / (k.gemm_fp8 * H100.fp8_flops))
    # quantization: 6 bytes per element of every fp8 operand, forward and backward
    fwd, bwd = fp8_operand_elements(m, 8)
    hbm = H100.hbm_bandwidth_Bps * stm.HBM_EFFICIENCY
    assert fp8.cast_fwd_s == pytest.approx(6 * fwd * 4096 / hbm)
    assert fp8.cast_bwd_s == pytest.approx(6 * bwd * 4096 / hbm)
    # the measured fp8 step speed-up is far below 2x: GEMMs at 1.67x, casts, bf16 parts
    assert 1.2 < bf16.microbatch_s("none") / fp8.microbatch_s("none") < 1.7


def test_recipes_differ_where_the_kernels_do():
    lay = Layout(tp=8, seq=4096)
    tensorwise = gemm_rate(H100, lay.with_(precision="tensorwise"))
    assert gemm_rate(H100, lay.with_(precision="rowwise")) < tensorwise
    assert gemm_rate(H100, lay.with_(precision="fp8")) == tensorwise  # megatron's default
    with pytest.raises(ConfigError, match="mxfp8 recipe.*recipes for it: tensorwise"):
        fp8_recipe("mxfp8", "megatron", H100)
    assert fp8_recipe("mxfp8", "megatron", get_gpu("b200")).name == "mxfp8"
    with pytest.raises(ConfigError, match="no fp8"):
        fp8_recipe("fp8", "megatron", get_gpu("a100"))


def test_framework_sets_the_overlap_defaults_and_flags_override_them():
    req = PlanRequest("llama3-8b", layout=(("framework", "torchtitan"), ("cp", 2),
                                           ("seq", 8192)))
    lay = req.resolve()
    assert lay.cp_overlap is False and lay.dp_overlap is True  # torchtitan all-gathers K,V
    lay = PlanRequest("llama3-8b", layout=(("framework", "torchtitan"),
                                           ("cp_overlap", True))).resolve()
    assert lay.cp_overlap is True
    with pytest.raises(ConfigError, match="unknown framework 'jax'.*megatron"):
        Layout(framework="jax")


def test_torchtitan_gathers_fp8_weights_under_fsdp():
    m = get_model("llama3-8b")
    lay = Layout(dp=8, zero=3, seq=8192, global_batch=8, framework="torchtitan")

    def gather(lay):
        return [c.nbytes for c in training_comms(m, lay) if c.collective == "all_gather"][0]
    assert gather(lay.with_(precision="fp8")) * 2 == pytest.approx(gather(lay), rel=1e-6)
    assert gather(lay.with_(precision="rowwise")) == gather(lay)  # not for rowwise
    assert gather(lay.with_(framework="megatron", precision="fp8")) == gather(lay)


def test_tp_overlap_hides_what_the_framework_hides():
    lay = Layout(tp=8, dp=1, seq=8192, global_batch=4, tp_overlap=True, recompute="full")
    mega = stm.plan("llama3-70b", "dgx-h100", 1, lay, check_fit=False)
    titan = stm.plan("llama3-70b", "dgx-h100", 1, lay.with_(framework="torchtitan-compile"),
                     check_fit=False)
    assert mega.exposed_by_kind["TP"] < titan.exposed_by_kind["TP"] < titan.comm_time_s["TP"]


def test_ep_overlap_hides_all_to_alls_and_reports_the_exposed_share():
    lay = Layout(pp=16, dp=128, ep=64, seq=4096, global_batch=2048, precision="blockwise",
                 recompute_modules=("layernorm", "mla_up_proj", "moe_act"),
                 fp8_activations=True)
    plain = stm.plan("deepseek-v3", "hgx-h800", 256, lay)
    over = stm.plan("deepseek-v3", "hgx-h800", 256, lay.with_(ep_overlap=True))
    assert plain.ep_exposed_share == pytest.approx(1.0)
    assert over.ep_exposed_share < 0.5 and over.step_time_s < plain.step_time_s
    assert over.to_dict()["ep_exposed_share"] == over.ep_exposed_share


def test_moe_memory_savers_each_reduce_activations():
    m = get_model("deepseek-v3")
    lay = Layout(pp=16, dp=128, ep=64, seq=4096, global_batch=15360, precision="blockwise")
    base = memory_per_gpu(m, lay).activations
    for kw in (dict(recompute_modules=("mla_up_proj",)), dict(recompute_modules=("moe_act",)),
               dict(recompute_modules=("layernorm",)), dict(offload_activations=True)):
        assert memory_per_gpu(m, lay.with_(**kw)).activations < base, kw
    # fp8 activation caching: what Transformer Engine already does for an fp8 recipe
    bf16 = lay.with_(precision="bf16")
    assert memory_per_gpu(m, bf16.with_(fp8_activations=True)).activations \
        < memory_per_gpu(m, bf16).activations
    assert memory_per_gpu(m, lay.with_(fp8_activations=True)).activations == base
    assert memory_per_gpu(m, lay.with_(offload_optimizer=True)).optimizer == 0
    with pytest.raises(ConfigError, match="recompute module.*core.*allowed are layernorm"):
        Layout(recompute_modules=("core",))
    # recomputing costs time
    a = layer_times(m, lay, H100, 1, 4096)
    b = layer_times(m, lay.with_(recompute_modules=("mla_up_proj", "moe_act")), H100, 1, 4096)
    assert b.recompute_s("none") > a.recompute_s("none") == 0


def test_mtp_module_sits_on_the_last_stage():
    m = get_model("deepseek-v3")
    layers = stage_layers(m, Layout(pp=16, dp=1))
    assert sum(layers) == m.layers + m.mtp_layers == 62 and layers[-1] == 4


def test_gradient_width_is_the_frameworks_or_the_flag():
    m = get_model("llama3-70b")
    lay = Layout(tp=8, pp=4, dp=4, seq=4096, global_batch=16)
    bf16 = memory_per_gpu(m, lay)
    fp32 = memory_per_gpu(m, lay.with_(grad_bytes=4))
    assert fp32.gradients == pytest.approx(2 * bf16.gradients)
    assert bf16.optimizer == pytest.approx(fp32.optimizer * 16 / 12)  # fp32 copy of the shard

    def dp_bytes(lay):
        return sum(c.nbytes * c.count for c in training_comms(m, lay)
                   if c.kind == "DP" and c.collective == "reduce_scatter")
    assert dp_bytes(lay.with_(grad_bytes=4)) == pytest.approx(2 * dp_bytes(lay), rel=1e-6)


def test_catalog_has_the_hopper_variants_of_the_published_runs():
    assert get_gpu("h800").nvlink_links == 8 and get_gpu("h800").fp8_flops == H100.fp8_flops
    assert get_gpu("h20").bf16_flops == 148e12 and get_gpu("h20").hbm_bytes == 96e9
    h96 = get_gpu("h100-96gb")
    assert h96.hbm_bytes == 96e9 and H100.bf16_flops * 0.85 < h96.bf16_flops < H100.bf16_flops
    assert get_gpu("gb200").fp8_flops == 2 * get_gpu("gb200").bf16_flops


def test_published_runs_table_names_source_layout_and_metric():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv
    runs = list(pv.cases())
    assert len(runs) >= 60 and sum(r[6] for r in runs) >= 40  # most are held out
    for source, model, metric, margs, args, pub, _ in runs:
        assert source and model in margs and pub > 0 and "--global-batch" in args + margs
        assert metric in ("hw_tflops_per_gpu", "causal_tflops_per_gpu", "mfu",
                          "tokens_per_gpu")
    assert pv._suggestion("x does not fit ...; --recompute full would fit") == \
        "--recompute full"
    assert pv._suggestion("...; no layout of these 8 GPUs fits; --nodes 4 --tp 8 would fit") \
        is None


def test_fourth_pass_runs_are_every_published_row_and_held_out():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv
    runs = list(pv.cases())
    dgxc = [r for r in runs if r[0] == pv.DGXC]
    # 8B 5, 70B 6, GPT-3 175B 5, Nemotron-4 340B 5, 15B 8 GPU counts, the 405B's 3 full-model
    # counts, each in bf16 and fp8
    assert len(dgxc) == 2 * (5 + 6 + 5 + 5 + 8 + 3)
    fourth = [r for r in runs if r[0] == pv.FOURTH]
    assert len(fourth) == 7 and all(pv._is_moe(r[1]) for r in fourth)
    dense = [r for r in runs if r[0] == pv.FOURTH_DENSE]
    assert len(dense) == 2 and not any(pv._is_moe(r[1]) for r in dense)
    # v25.05.04: 405B on 3 GB200 counts and 512 H100, Nemotron-4 15B and 340B on H100, 340B on
    # 3 GB200 counts weak- and strong-scaled, each in bf16 and fp8; DeepSeek-V3 bf16 at 5 counts
    later = [r for r in runs if r[0] == pv.DGXC5]
    assert len(later) == 2 * (3 + 1 + 2 + 6) + 5
    assert all(r[6] for r in dgxc + fourth + dense + later)
    assert {r[0] for r in dgxc + fourth + dense + later} == set(pv.ADDED4)


def test_the_dgx_cloud_2504_rows_are_every_full_model_row_held_out():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv
    runs = [r for r in pv.cases() if r[0] == pv.DGXC4]
    # 8B 5, 70B 6, 405B 3 full-model counts, Nemotron-4 15B 8, 340B 4; bf16 and fp8 each
    assert len(runs) == 2 * (5 + 6 + 3 + 8 + 4) and all(r[6] for r in runs)
    assert set(pv.ADDED5) == {pv.DGXC4, pv.MLM_DSV3} and pv.DGXC4 in pv.DGX_CLOUD
    # 70B: the fp8 rows run PP 8 without CP, the bf16 rows PP 4 with CP 2 (the README's tables)
    fp8 = [r[4] for r in runs if r[1] == "llama3-70b" and "fp8" in r[4]]
    assert all(a[a.index("--pp") + 1] == "8" and a[a.index("--cp") + 1] == "1" for a in fp8)


def test_the_megatron_lm_deepseek_log_rows_are_its_alltoall_rows_held_out():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv
    runs = [r for r in pv.cases() if r[0] == pv.MLM_DSV3]
    assert len(runs) == 3 and all(r[6] for r in runs)
    # 494.46 TFLOP/s at Megatron's 1,003 TFLOP/s = 4,018 tokens/s for this model and sequence
    assert runs[0][5] == pytest.approx(494.46 / 1003 * 4018)
    assert all("--gpus-per-node" in r[4] and "32" == r[4][r[4].index("--ep") + 1] for r in runs)


def test_every_source_is_in_one_family_and_the_leave_one_out_median_is_computed():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv
    sources = {r[0] for r in pv.cases()}
    members = [s for fam in pv.FAMILIES.values() for s in fam]
    assert len(members) == len(set(members)) and set(members) == sources

    def row(source, error):
        return {"source": source, "error": error}
    held = [row(pv.DGXC, 0.01), row(pv.DGXC, -0.02), row(pv.DGXC, 0.03),
            row(pv.BRIDGE, 0.2), row(pv.TITAN, -0.4)]
    fam = pv._by_family(held)
    dgxc = fam["DGX Cloud Benchmarking v25.03"]
    assert dgxc["runs"] == 3 and dgxc["median_abs_error"] == pytest.approx(0.02)
    assert dgxc["held_out_median_without"] == pytest.approx(0.3) and dgxc["runs_without"] == 2
    assert fam["torchtitan benchmarks"]["held_out_median_without"] == pytest.approx(0.025)
    assert fam["DGX Cloud Benchmarking v25.05.04"]["median_abs_error"] is None


def test_plan_on_a_topology_file_matches_the_preset_it_was_written_from(tmp_path):
    from gpucomm.topology import build_topology
    from gpucomm.workloads.request import answer
    path = tmp_path / "node.yaml"
    build_topology("dgx-h100").save(path)
    lay = (("tp", 8), ("seq", 4096))
    mine = answer(PlanRequest("llama3-8b", system=str(path), nodes=2, layout=lay))
    preset = answer(PlanRequest("llama3-8b", system="dgx-h100", nodes=2, layout=lay))
    assert mine.step_time_s == pytest.approx(preset.step_time_s) and mine.gpus == 16
    two = tmp_path / "two.yaml"
    build_topology("dgx-h100", nodes=2).save(two)
    with pytest.raises(ConfigError, match="one node's description"):
        answer(PlanRequest("llama3-8b", system=str(two), layout=lay))


def test_expert_tp_separate_from_attention_tp():
    from gpucomm.workloads.layout import group_ranks, validate
    m = get_model("mixtral-8x7b")
    lay = Layout(tp=4, dp=2, ep=8, etp=1, seq=4096, global_batch=2)
    validate(m, lay, 8)  # ep=8 > dp=2: EP takes the attention-TP ranks too (etp=1)
    assert group_ranks(lay, "ep", 0) == tuple(range(8)) and lay.expert_dp == 1
    with pytest.raises(ConfigError, match="valid ep are"):
        validate(m, lay.with_(etp=4), 8)  # etp = tp: experts split over dp=2 only
    with pytest.raises(ConfigError, match="etp must divide tp=4"):
        Layout(tp=4, etp=3)
    # experts: all 8 of them / ep=8, unsplit (etp=1), the MoE MLP leaves attention's TP group
    from gpucomm.workloads.compute import layer_params_per_gpu
    _, experts = layer_params_per_gpu(m, lay)
    assert experts == pytest.approx(m.expert_params)
    tp_calls = sum(c.count for c in training_comms(m, lay) if c.kind == "TP")
    same = Layout(tp=4, dp=2, ep=2, seq=4096, global_batch=2)
    assert tp_calls * 2 == sum(c.count for c in training_comms(m, same) if c.kind == "TP")
    # default etp = tp keeps Megatron's "ep inside dp" placement
    assert group_ranks(same, "ep", 0) == (0, 4) and group_ranks(same, "edp", 0) == (0,)


def test_moe_token_copies_cost_hbm_time_forward_and_backward():
    from gpucomm.workloads.compute import moe_permute_elements
    m, h = get_model("deepseek-v3"), get_model("deepseek-v3").hidden
    one = Layout(ep=256, dp=256, seq=4096)  # one expert per rank: no local sort
    many = one.with_(ep=8)  # 32 experts per rank: received chunks sorted and unsorted
    assert moe_permute_elements(m, one) == 2 * h + 2 * 8 * h
    assert moe_permute_elements(m, many) == 2 * h + 6 * 8 * h
    assert moe_permute_elements(get_model("llama3-8b"), one) == 0
    t = layer_times(m, many, H100, 1, 4096)
    hbm = H100.hbm_bandwidth_Bps * 0.85
    assert t.permute_s == pytest.approx(moe_permute_elements(m, many) * 2 * 4096 / hbm)
    # counted once in forward and once in backward (the gradients take the reverse trip)
    assert t.forward_s == pytest.approx(t.gemm_s + t.attention_s + t.elementwise_s
                                        + t.cast_fwd_s + t.permute_s + t.expert_host_s)
    assert t.backward_s() == pytest.approx(2 * t.gemm_s + t.attention_bwd_factor
                                           * t.attention_s + 2 * t.elementwise_s
                                           + t.cast_bwd_s + t.permute_s
                                           + 2 * t.expert_host_s)
    assert layer_times(m, one, H100, 1, 4096).permute_s < t.permute_s


def test_per_expert_gemm_launches_cost_time_only_where_they_outrun_the_gpu():
    from gpucomm.workloads.compute import expert_host_s
    meg = get_framework("megatron")
    raw = yaml.safe_load((DATA / "megatron.yaml").read_text())
    assert meg.expert_gemm_host_s == pytest.approx(33.4e-6)  # TE PR #3134: 0.267 ms / 8
    assert "3134" in raw["expert_gemm_host_source"]
    assert get_framework("torchtitan").expert_gemm_host_s == 0.0
    b200 = get_gpu("b200")
    m = get_model("qwen3-30b-a3b")
    lay = Layout(ep=8, dp=8, seq=4096, precision="mxfp8")
    small, big = (layer_times(m, lay, b200, b, 4096) for b in (1, 64))
    # 16 local experts x 33.4 us per call against one sequence's expert GEMMs: launch-bound
    assert small.expert_host_s > 0.5 * 2 * 16 * meg.expert_gemm_host_s
    assert big.expert_host_s == 0.0  # 64 sequences: the GEMMs outlast their launches
    assert layer_times(get_model("llama3-8b"), Layout(seq=4096), b200, 1, 4096
                       ).expert_host_s == 0.0
    # fewer local experts, fewer launches
    assert layer_times(m, lay.with_(ep=128 // 2), b200, 1, 4096).expert_host_s \
        < small.expert_host_s
    assert expert_host_s(m, lay, 1e-6, 0.0) == 0.0
    # recomputing the experts re-issues their forward launches
    redo = layer_times(m, lay.with_(recompute_modules=("moe",)), b200, 1, 4096)
    assert redo.modules_s > small.expert_host_s > 0


def test_a_full_iteration_cuda_graph_issues_no_per_expert_launches():
    b200 = get_gpu("b200")
    m = get_model("qwen3-30b-a3b")
    lay = Layout(ep=8, dp=8, seq=4096, precision="mxfp8", recompute_modules=("moe",))
    eager, graphed = (layer_times(m, lay.with_(full_cuda_graph=g), b200, 1, 4096)
                      for g in (False, True))
    assert eager.expert_host_s > 0 and graphed.expert_host_s == 0.0
    # the recomputed experts re-run from the graph too; the GPU work is the same
    assert graphed.modules_s == pytest.approx(eager.modules_s - eager.expert_host_s)
    assert graphed.gemm_s == eager.gemm_s and graphed.permute_s == eager.permute_s
    dense = get_model("llama3-8b")
    assert layer_times(dense, Layout(seq=4096, full_cuda_graph=True), b200, 1, 4096) == \
        layer_times(dense, Layout(seq=4096), b200, 1, 4096)


def test_a_host_cost_without_its_source_is_refused():
    from gpucomm.workloads.frameworks import _framework
    raw = yaml.safe_load((DATA / "megatron.yaml").read_text())
    del raw["expert_gemm_host_source"]
    with pytest.raises(ConfigError, match="expert_gemm_host_s needs"):
        _framework(raw, "frameworks/x.yaml")


def test_torchtitan_pipeline_runs_as_many_microbatches_as_stages():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv
    # Table 5: local batch 32 over 8 pipeline ranks -> 8 microbatches of 4 sequences
    t5 = [c for c in pv.cases() if c[0] == pv.TITAN and c[1] == "llama3-405b"][0][4]
    assert t5[t5.index("--micro-batch") + 1] == "4" and t5[t5.index("--pp") + 1] == "8"
    assert t5[t5.index("--global-batch") + 1] == "256"
    # the added runs are held out and named as such
    added = [c for c in pv.cases() if c[0] in pv.ADDED]
    assert len(added) >= 16 and all(c[6] for c in added)


def test_torchtitan_keeps_fsdp_weights_gathered_over_a_pipelined_step():
    from gpucomm.workloads.compute import fsdp_unsharded_over_step
    m = get_model("llama3-405b")
    lay = Layout(tp=8, pp=8, dp=8, zero=3, seq=8192, micro_batch=4, global_batch=256,
                 recompute="full", framework="torchtitan-compile")
    mega = lay.with_(framework="megatron")
    assert fsdp_unsharded_over_step(lay) and not fsdp_unsharded_over_step(mega)
    assert not fsdp_unsharded_over_step(lay.with_(pp=1, dp=64))
    ours, theirs = memory_per_gpu(m, lay), memory_per_gpu(m, mega)
    # the whole stage's bf16 weights and fp32 gradients, not one FSDP unit and a shard
    assert ours.weights > 4 * theirs.weights and ours.gradients > 4 * theirs.gradients
    gathers = [c for c in training_comms(m, lay) if c.kind == "DP" and
               c.collective == "all_gather"]
    assert gathers and all(c.per == "step" and c.phase == "fwd" for c in gathers)
    assert {c.per for c in training_comms(m, mega) if c.collective == "all_gather"
            and c.kind == "DP"} == {"microbatch"}


def test_torchtitan_context_parallelism_moves_kv_repeated_to_the_query_heads():
    m = get_model("llama3-405b")  # 128 query heads, 8 KV heads
    lay = Layout(tp=8, cp=4, dp=2, seq=131072, global_batch=8, recompute="full",
                 framework="torchtitan-compile")
    sizes = {}
    for fw in ("torchtitan-compile", "megatron"):
        sizes[fw] = {c.nbytes for c in training_comms(m, lay.with_(framework=fw))
                     if c.kind == "CP"}
    assert len(sizes["megatron"]) == 1 and len(sizes["torchtitan-compile"]) == 1
    # after TP 8: 16 query heads against 1 KV head per GPU
    assert sizes["torchtitan-compile"].pop() == 16 * sizes["megatron"].pop()


def test_per_op_sac_re_runs_the_sequence_parallel_all_gathers():
    m = get_model("llama3-8b")
    lay = Layout(tp=8, dp=8, zero=3, seq=8192, micro_batch=12, global_batch=96,
                 recompute="selective", framework="torchtitan-compile")

    def gathers(layout):
        return sum(c.count for c in training_comms(m, layout)
                   if c.kind == "TP" and c.collective == "all_gather" and c.phase == "bwd")
    # two per layer in backward, two more re-run by the SAC policy; Megatron's selective
    # recompute (attention core only) re-runs no collective
    assert gathers(lay) == 2 * gathers(lay.with_(framework="megatron")) == 4 * 32
    assert gathers(lay.with_(recompute="full")) == 4 * 32


def test_transformer_engine_keeps_fp8_linear_inputs_torchao_keeps_bf16():
    from gpucomm.workloads.compute import activation_bytes_per_token
    m = get_model("llama3-70b")
    h, t, ffn = m.hidden, 4, m.ffn
    lay = Layout(tp=t, pp=4, dp=2, seq=8192, global_batch=64)
    bf16 = activation_bytes_per_token(m, lay)
    fp8 = activation_bytes_per_token(m, lay.with_(precision="fp8"))
    # norm outputs (2h, split over tp by SP), attention output and the down projection's
    # input each lose one of their two bytes under Transformer Engine
    assert bf16 - fp8 == pytest.approx((2 * h + m.heads * m.head_dim + ffn) / t)
    assert activation_bytes_per_token(m, lay.with_(precision="fp8", framework="torchtitan")) \
        == activation_bytes_per_token(m, lay.with_(framework="torchtitan"))
    assert get_framework("megatron").fp8_saves_inputs
    assert not get_framework("torchtitan-compile").fp8_saves_inputs


def test_validation_median_bar_is_over_the_held_out_runs():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import planner_validation as pv

    def row(err, held_out):
        return {"accepted": True, "error": err, "fp8": False, "held_out": held_out,
                "source": "x", "mfu": 0.4, "gpu": "h100"}
    # held-in rows at 0% would pull the all-runs median under 8%; the bar must not count them
    rows = [row(0.0, False)] * 5 + [row(0.09, True), row(-0.10, True), row(0.12, True)]
    s = pv._summary(rows)
    assert s["median_abs_error_all"] < pv.MEDIAN_WITHIN
    assert s["median_abs_error_held_out"] == pytest.approx(0.10)
    assert s["bar_held_out_median_within_8pct"] is False
    s = pv._summary([row(0.3, False)] * 5 + [row(0.05, True)])
    assert s["bar_held_out_median_within_8pct"] is True
    # held-out MoE and dense rows are summarised apart (the model's config says which)
    assert pv._is_moe("qwen3-30b-a3b") and not pv._is_moe("llama3-8b")
    s = pv._summary([row(0.02, True), {**row(0.3, True), "moe": True}])
    assert s["median_abs_error_held_out_moe"] == pytest.approx(0.3)
    assert s["median_abs_error_held_out_dense"] == pytest.approx(0.02)
    assert (s["held_out_moe_runs"], s["held_out_dense_runs"]) == (1, 1)
