"""The planner's memory model, overlap switches, precision, MoE split and search."""
from types import SimpleNamespace

import pytest

from gpucomm.errors import ConfigError
from gpucomm.hardware import get_gpu
from gpucomm.workloads import (Layout, get_model, memory_per_gpu, step_comms, training_comms,
                               validate)
from gpucomm.workloads import steptime as stm
from gpucomm.workloads.comms import ep_split
from gpucomm.workloads.compute import (activation_bytes_per_token, inflight_microbatches,
                                       layer_times, training_flops)
from gpucomm.workloads.layout import stage_layers
from gpucomm.workloads.request import PlanRequest, answer

H100 = get_gpu("h100")
LLAMA3_8K = Layout(tp=8, pp=16, dp=64, seq=8192, global_batch=2048, zero=2, vpp=8,
                   balanced_ends=True)


def run(model, lay, times=None, gpu=H100):
    """The step with every collective taking times[kind] seconds per call (default 0)."""
    model = get_model(model)
    cl = stm.Cluster("fake", lay.world // 8, None, 8, gpu)
    lay = validate(model, lay, cl.gpus)
    timed = []
    for c in step_comms(model, lay):
        t = (times or {}).get(c.kind, 0.0)
        mult = lay.microbatches if c.per == "microbatch" else 1
        timed.append(stm.CommTime(c, (0, 1), t, t * c.count * mult, "x", "simple"))
    return stm._training_step(model, lay, cl, memory_per_gpu(model, lay), tuple(timed))


# -- memory --------------------------------------------------------------------------------
def test_balanced_ends_give_the_first_and_last_stage_one_layer_fewer():
    layers = stage_layers(get_model("llama3-405b"), LLAMA3_8K)
    assert layers == [7] + [8] * 14 + [7] and sum(layers) == 126


def test_inflight_microbatches_follow_1f1b_and_interleaving():
    lay = Layout(pp=8, dp=1, global_batch=64)
    assert [inflight_microbatches(lay, i) for i in range(8)] == [8, 7, 6, 5, 4, 3, 2, 1]
    inter = lay.with_(vpp=4)
    assert inflight_microbatches(inter) == pytest.approx(8 * (1 + 7 / 32))  # Korthikanti
    assert inflight_microbatches(lay.with_(global_batch=4)) == 4  # never beyond m


def test_selective_recompute_drops_the_score_matrix_and_reruns_attention():
    m = get_model("megatron-gpt-18b")
    lay = Layout(tp=8, seq=2048, flash=False, sp=True)
    none = activation_bytes_per_token(m, lay)
    sel = activation_bytes_per_token(m, lay.with_(recompute="selective"))
    assert none - sel == pytest.approx(5 * m.heads / 8 * 2048)  # 5as/t bytes per token
    assert sel == pytest.approx(m.hidden * 32 / 8)  # Korthikanti's 34sbh/t less 2 masks
    # with FlashAttention there is no score matrix: selective saves nothing
    assert activation_bytes_per_token(m, lay.with_(flash=True)) == pytest.approx(sel)
    _, hw_none = training_flops(m, 1, 2048)
    _, hw_sel = training_flops(m, 1, 2048, "selective")
    _, hw_full = training_flops(m, 1, 2048, "full")
    assert hw_none < hw_sel < hw_full


def test_distributed_optimizer_bytes_per_parameter():
    m = get_model("llama3-8b")
    lay = Layout(dp=8, seq=2048, global_batch=8, zero=1)
    mem = memory_per_gpu(m, lay.with_(grad_bytes=4))
    # Megatron's distributed optimizer docs: 2 (bf16) + 4 (fp32 grads) + 12/d per parameter
    assert (mem.weights + mem.gradients + mem.optimizer) == pytest.approx(
        m.params * (2 + 4 + 12 / 8))
    # and with Megatron-core's default bf16 gradient buffers: 2 + 2 + 16/d
    mem = memory_per_gpu(m, lay)
    assert (mem.weights + mem.gradients + mem.optimizer) == pytest.approx(
        m.params * (2 + 2 + 16 / 8))


def test_llama3_published_layout_is_accepted():
    m = get_model("llama3-405b")
    for lay, gpus in ((LLAMA3_8K, 8192), (LLAMA3_8K.with_(dp=128, global_batch=2048), 16384)):
        lay = validate(m, lay, gpus)
        mem = memory_per_gpu(m, lay)
        warnings = stm.check_memory(m, lay, mem, H100)
        assert mem.total <= H100.hbm_bytes * (1 + stm.MEMORY_TOLERANCE)
        assert all("over the 80.0 GB" in w for w in warnings)


def test_near_hbm_warns_with_how_much_and_clearly_over_refuses_with_a_fix():
    m = get_model("llama3-405b")
    lay = validate(m, LLAMA3_8K, 8192)
    mem = memory_per_gpu(m, lay)
    small = SimpleNamespace(name="h100", hbm_bytes=mem.total / 1.03)
    (w,) = stm.check_memory(m, lay, mem, small)
    assert "3.0%" in w and "over" in w
    tiny = SimpleNamespace(name="h100", hbm_bytes=mem.total / 1.5)
    with pytest.raises(ConfigError, match=r"does not fit.*50% over.*would fit"):
        stm.check_memory(m, lay, mem, tiny)


# -- overlap, precision --------------------------------------------------------------------
def test_overlap_switches_change_what_is_exposed():
    lay = Layout(tp=8, pp=4, dp=4, seq=4096, global_batch=64, zero=1)
    times = {"TP": 1e-4, "PP": 1e-3, "DP": 1e-2}
    base = run("llama3-70b", lay, times)
    assert base.exposed_by_kind["DP"] < base.comm_time_s["DP"]  # buckets behind backward
    assert base.exposed_by_kind["PP"] == pytest.approx(2 * 3 * 1e-3)  # warm-up chain only
    off = run("llama3-70b", lay.with_(dp_overlap=False, pp_overlap=False), times)
    assert off.exposed_by_kind["DP"] == pytest.approx(off.comm_time_s["DP"])
    assert off.exposed_by_kind["PP"] == pytest.approx(off.comm_time_s["PP"])
    tp = run("llama3-70b", lay.with_(tp_overlap=True), times)
    assert tp.exposed_by_kind["TP"] == pytest.approx(base.exposed_by_kind["TP"] / 8)
    assert {o["switch"] for o in base.overlaps()} == set(stm.OVERLAPS)
    assert all(o["source"] for o in base.overlaps())


def test_fp8_speeds_gemms_and_mfu_is_against_the_fp8_peak():
    lay = Layout(tp=8, dp=1, seq=4096, global_batch=8)
    bf16 = run("llama3-70b", lay)
    fp8 = run("llama3-70b", lay.with_(precision="fp8"))
    assert fp8.step_time_s < 0.9 * bf16.step_time_s
    # MFU of an fp8 run is its model FLOP/s over the fp8 peak, so never above 100%
    assert fp8.mfu * H100.fp8_flops / (bf16.mfu * H100.bf16_flops) == pytest.approx(
        bf16.step_time_s / fp8.step_time_s)
    assert 0 < fp8.mfu < bf16.mfu < 1
    assert H100.fp8_flops == pytest.approx(2 * H100.bf16_flops, rel=1e-3)
    with pytest.raises(ConfigError, match="no fp8"):
        run("llama3-70b", lay.with_(precision="fp8"), gpu=get_gpu("a100"))


# -- MoE -----------------------------------------------------------------------------------
def test_deepseek_v3_from_its_config():
    m = get_model("deepseek-v3")
    assert m.params / 1e9 == pytest.approx(671, rel=0.005)
    assert m.active_params / 1e9 == pytest.approx(37, rel=0.02)
    assert m.mla and m.moe_layers == 58


def test_ep_all_to_all_splits_across_and_inside_nodes():
    m = get_model("deepseek-v3")
    lay = Layout(tp=1, pp=16, dp=128, ep=64, seq=4096, global_batch=1536)
    local, nodes, remote = ep_split(m, lay, 8)
    assert (local, nodes) == (8, 8)
    assert 3 < remote <= 4 * 7 / 8  # node-limited routing: at most 4 nodes per token
    parts = {c.group for c in step_comms(m, lay) if c.kind == "EP"}
    assert parts == {"ep_intra", "ep_inter"}
    even = {c.group: c.nbytes for c in step_comms(m, lay) if c.kind == "EP"}
    skew = {c.group: c.nbytes for c in step_comms(m, lay.with_(moe_imbalance=1.5))
            if c.kind == "EP"}
    assert all(skew[g] == pytest.approx(1.5 * even[g], rel=1e-6) for g in even)


def test_routing_imbalance_slows_the_busiest_experts():
    m = get_model("mixtral-8x22b")
    lay = Layout(tp=2, dp=8, ep=8, seq=4096, global_batch=8)
    even = layer_times(m, lay, H100, 1, 4096)
    skew = layer_times(m, lay.with_(moe_imbalance=2.0), H100, 1, 4096)
    assert skew.gemm_s > 1.3 * even.gemm_s


# -- request and search ----------------------------------------------------------------------
def test_request_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="layout field 'tpp' is unknown"):
        PlanRequest("llama3-8b", layout=(("tpp", 2),))
    with pytest.raises(ConfigError, match="--search and --compare"):
        PlanRequest("llama3-8b", search=True, compare=(("tp", (1, 2)),))


def test_search_ranks_by_tokens_and_says_why_losers_lost():
    req = PlanRequest("llama3-8b", "dgx-h100", 2, layout=(("seq", 4096), ("global_batch", 32)),
                      search=True, top=5)
    res = answer(req)
    plans = [r.plan for r in res.ranked]
    assert [p.tokens_per_s for p in plans] == sorted((p.tokens_per_s for p in plans),
                                                    reverse=True)
    assert res.ranked[0].why == "" and all(r.why for r in res.ranked[1:])
    assert all(p.memory.total <= p.hbm_bytes for p in plans)
    assert res.structures > len(plans) and res.timed >= len(plans)
    # the best beats the plain data-parallel layout the user might have started from
    given = answer(PlanRequest("llama3-8b", "dgx-h100", 2, layout=(
        ("seq", 4096), ("global_batch", 32), ("tp", 1), ("zero", 3))))
    assert plans[0].tokens_per_s >= given.tokens_per_s


# -- issue 26 bugs ---------------------------------------------------------------------------
def test_pipeline_inside_one_node_times_disjoint_sends():
    # tp=2 pp=4 on one DGX: the stage-boundary sends of one boundary are (0,2), (1,3) only
    p = stm.plan("llama3-8b", "dgx-h100", 1, Layout(tp=2, pp=4, dp=1, seq=4096,
                                                    global_batch=4))
    assert p.comm_time_s["PP"] > 0
    lay = Layout(tp=2, pp=4, dp=1)
    assert stm.peer_groups(lay, "pp", (0, 2), 8) == [(1, 3)]


def test_context_parallel_ranks_reduce_gradients_and_share_zero_shards():
    m = get_model("llama3-8b")
    lay = Layout(tp=2, cp=4, dp=1, seq=16384, global_batch=1)
    dp = [c for c in training_comms(m, lay) if c.kind == "DP"]
    assert dp and all(c.group == "dp_cp" for c in dp)
    p = stm.plan("llama3-8b", "dgx-h100", 1, lay)
    assert p.comm_time_s["DP"] > 0  # dp = 1 < cp: the reduction over the 4 CP ranks is timed
    one = memory_per_gpu(m, lay.with_(cp=1, seq=4096))
    assert memory_per_gpu(m, lay).optimizer == pytest.approx(one.optimizer / 4)


def test_refusal_names_a_larger_cluster_that_fits():
    m = get_model("llama3-70b")
    lay = Layout(tp=8, dp=1, seq=4096, global_batch=1)
    with pytest.raises(ConfigError, match=r"no layout of these 8 GPUs fits; --nodes \d+ --tp 8"):
        stm.check_memory(m, lay, memory_per_gpu(m, lay), H100)
    hint = stm.larger_fitting(m, lay, H100, 8)
    nodes = int(hint.split()[1])
    pp = int(hint.split("--pp ")[1].split()[0])
    dp = nodes * 8 // (8 * pp)
    lay2 = Layout(tp=8, pp=pp, dp=dp, seq=4096, global_batch=dp,
                  zero=3 if "--zero 3" in hint else 1,
                  recompute="full" if "full" in hint else "none")
    assert memory_per_gpu(m, lay2).total <= H100.hbm_bytes
