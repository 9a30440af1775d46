"""Planner formulas: model sizes, collective sizes and counts, FLOPs, memory, placement, errors."""

import pytest
from hypothesis import given, settings, strategies as st

from gpucomm.errors import ConfigError
from gpucomm.workloads import (Layout, get_model, group_ranks, list_models, memory_per_gpu,
                               step_comms, training_flops, validate)
from gpucomm.workloads.comms import dp_bucket_bytes, totals
from gpucomm.workloads.compute import activation_bytes_per_token
from gpucomm.workloads.layout import coords
from gpucomm.workloads.models import load_model


# -- model configs -------------------------------------------------------------------------
@pytest.mark.parametrize("name, total, active", [
    ("llama3-8b", 8.03e9, 8.03e9),        # Llama 3 paper / HF model cards
    ("llama3-70b", 70.6e9, 70.6e9),
    ("llama3-405b", 405.9e9, 405.9e9),
    ("mixtral-8x7b", 46.7e9, 12.9e9),     # Mixtral paper: 47B total, 13B active
    ("mixtral-8x22b", 140.6e9, 39.2e9),   # Mistral: 141B total, 39B active
    ("megatron-gpt-146b", 145.6e9, 145.6e9),  # Narayanan et al. 2021, Table 1
    ("megatron-gpt-1t", 1008.0e9, 1008.0e9),
    ("qwen3-235b-a22b", 235e9, 22e9),     # Qwen3 model card: 235B total, 22B activated
    ("nemotron4-340b", 341.0e9, 341.0e9),  # report: 9.4B embedding + 331.6B non-embedding
    ("nemotron4-15b", 15.7e9, 15.7e9),    # report: 3.2B embedding + 12.5B non-embedding
])
def test_shipped_model_sizes_match_published(name, total, active):
    m = get_model(name)
    assert m.params == pytest.approx(total, rel=0.01)
    assert m.active_params == pytest.approx(active, rel=0.01)
    assert m.source


def test_qwen3_30b_matches_its_model_card():
    # "30.5B in total, 29.9B non-embedding, 3.3B activated" (one decimal); the activated
    # count (3.35B with both embedding tables) sits at the card's rounding edge
    m = get_model("qwen3-30b-a3b")
    assert m.params == pytest.approx(30.5e9, abs=0.05e9)
    assert m.params - 2 * m.vocab * m.hidden == pytest.approx(29.9e9, abs=0.05e9)
    assert m.active_params == pytest.approx(3.3e9, rel=0.02)


def test_every_shipped_model_has_a_source():
    assert {"llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b",
            "mixtral-8x22b"} <= set(list_models())
    for name in list_models():
        assert get_model(name).source


def test_gqa_and_moe_fields():
    m = get_model("mixtral-8x7b")
    assert (m.kv_heads, m.head_dim, m.experts, m.top_k, m.moe) == (8, 128, 8, 2, True)
    assert get_model("llama3-70b").kv_dim == 8 * 128


def test_model_from_yaml_file(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text("name: tiny\nlayers: 2\nhidden: 64\nffn: 256\nheads: 4\nvocab: 100\n"
                 "mlp: gelu\n")
    m = get_model(str(p))
    assert m.params == 2 * (4 * 64 * 64 + 2 * 64 * 256) + 2 * 100 * 64
    p.write_text("name: bad\nlayers: 2\n")
    with pytest.raises(ConfigError, match="missing field"):
        load_model(p)
    p.write_text("name: bad\nlayers: 2\nhidden: 64\nffn: 1\nheads: 4\nvocab: 1\nfoo: 1\n")
    with pytest.raises(ConfigError, match="unknown field"):
        load_model(p)


def test_unknown_model_lists_allowed():
    with pytest.raises(ConfigError, match="llama3-70b"):
        get_model("gpt-5")


# -- FLOPs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["megatron-gpt-1.7b", "megatron-gpt-1t"])
def test_training_flops_match_megatron_formula(name):
    """Narayanan et al. 2021: 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) with recomputation."""
    m = get_model(name)
    B, s, L, h, V = 512, 2048, m.layers, m.hidden, m.vocab
    expected = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    model_flops, hw = training_flops(m, B, s, recompute="full")
    assert hw == pytest.approx(expected, rel=1e-12)
    assert model_flops == pytest.approx(expected - 24 * B * s * L * h * h * (1 + s / (6 * h)),
                                        rel=1e-12)


def test_training_flops_close_to_6nd():
    m = get_model("llama3-70b")
    model_flops, _ = training_flops(m, 1, 2048)
    assert model_flops / (6 * m.params * 2048) == pytest.approx(1.0, abs=0.06)


# -- the collectives of a step, against textbook formulas -----------------------------------
def _by(comms, kind, phase=None, coll=None):
    return [c for c in comms if c.kind == kind and (phase is None or c.phase == phase)
            and (coll is None or c.collective == coll)]


def test_tp_two_all_reduces_of_bsh_per_layer_per_pass():
    m = get_model("llama3-70b")
    b, s = 2, 4096
    lay = Layout(tp=8, pp=4, dp=1, seq=s, global_batch=8, micro_batch=b, sp=False)
    comms = step_comms(m, lay)
    n = m.layers // 4
    for phase in ("fwd", "bwd"):
        (ar,) = _by(comms, "TP", phase)
        assert ar.collective == "all_reduce"
        assert ar.nbytes == 2 * b * s * m.hidden  # b*s*h bf16 elements
        assert ar.count == 2 * n
    assert totals(comms, lay)["TP"]["calls"] == 4 * n * lay.microbatches


def test_recompute_repeats_forward_tp_collectives():
    m = get_model("llama3-8b")
    lay = Layout(tp=4, seq=2048, sp=False, recompute="full")
    (bwd,) = _by(step_comms(m, lay), "TP", "bwd")
    assert bwd.count == 4 * m.layers


def test_sequence_parallel_turns_all_reduce_into_rs_plus_ag():
    m = get_model("llama3-8b")
    lay = Layout(tp=4, seq=2048, micro_batch=1, sp=True)
    comms = step_comms(m, lay)
    assert not _by(comms, "TP", coll="all_reduce")
    for phase in ("fwd", "bwd"):
        for coll in ("all_gather", "reduce_scatter"):
            (c,) = _by(comms, "TP", phase, coll)
            assert (c.nbytes, c.count) == (2 * 2048 * m.hidden, 2 * m.layers)


def test_pp_sends_one_activation_each_way_per_microbatch():
    m = get_model("llama3-70b")
    lay = Layout(tp=8, pp=8, dp=2, seq=4096, global_batch=64, micro_batch=2, sp=True, vpp=2)
    pp = _by(step_comms(m, lay), "PP")
    assert {c.phase for c in pp} == {"fwd", "bwd"}
    for c in pp:
        assert c.collective == "sendrecv" and c.count == 2  # once per virtual stage
        assert c.nbytes == 2 * 2 * 4096 * m.hidden // 8  # scatter/gather: 1/tp crosses
    assert lay.microbatches == 16


def test_dp_all_reduce_moves_every_gradient_once_in_buckets():
    m = get_model("llama3-8b")
    lay = Layout(tp=1, dp=8, seq=2048, global_batch=8, zero=0)
    dp = _by(step_comms(m, lay), "DP")
    assert {c.collective for c in dp} == {"all_reduce"}
    assert sum(c.nbytes * c.count for c in dp) == 2 * m.params  # bf16 gradients
    assert max(c.nbytes for c in dp) == dp_bucket_bytes(8) == 80_000_000


def test_zero1_reduce_scatter_plus_all_gather_and_zero3_gathers_per_microbatch():
    m = get_model("llama3-8b")
    z1 = _by(step_comms(m, Layout(dp=8, seq=2048, global_batch=16, zero=1)), "DP")
    rs = sum(c.nbytes * c.count for c in z1 if c.collective == "reduce_scatter")
    ag = sum(c.nbytes * c.count for c in z1 if c.collective == "all_gather")
    assert rs == ag == 2 * m.params
    lay3 = Layout(dp=8, seq=2048, global_batch=16, zero=3)
    z3 = _by(step_comms(m, lay3), "DP")
    gathers = [c for c in z3 if c.collective == "all_gather"]
    assert {c.phase for c in gathers} == {"fwd", "bwd"}
    assert all(c.per == "microbatch" and c.count == m.layers for c in gathers)
    assert sum(c.nbytes * c.count for c in z3 if c.collective == "reduce_scatter") \
        == pytest.approx(2 * m.params, rel=1e-6)


def test_ep_all_to_all_dispatch_and_combine_per_moe_layer():
    m = get_model("mixtral-8x7b")
    lay = Layout(tp=1, dp=8, ep=8, seq=4096, global_batch=8, sp=True)  # EP inside one node
    comms = step_comms(m, lay)
    for phase in ("fwd", "bwd"):
        (a2a,) = _by(comms, "EP", phase)
        assert a2a.collective == "all_to_all" and a2a.count == 2 * m.layers
        assert a2a.group == "ep_intra"
        # each token's top_k copies; the 7/8 that leave the GPU are S * 7/8 of the buffer
        assert a2a.nbytes == pytest.approx(2 * 4096 * m.top_k * m.hidden, rel=1e-6)
    # expert gradients reduce over the expert-data-parallel group (dp/ep = 1 here: none)
    assert all(c.group == "dp_cp" for c in _by(comms, "DP"))


def test_cp_exchanges_kv_of_the_whole_sequence():
    m = get_model("llama3-405b")
    lay = Layout(tp=8, cp=16, dp=1, seq=131072, global_batch=1)
    cp = _by(step_comms(m, lay), "CP")
    kv = 2 * 2 * (8 // 8) * 128 * 131072  # K and V, one KV head per TP rank, bf16
    assert {(c.collective, c.phase) for c in cp} == {("all_gather", "fwd"),
                                                     ("all_gather", "bwd"),
                                                     ("reduce_scatter", "bwd")}
    assert all(c.nbytes == kv for c in cp)


def test_decode_two_small_all_reduces_per_layer():
    m = get_model("llama3-70b")
    lay = validate(m, Layout(tp=8, seq=4096, global_batch=1, mode="decode"), 8)
    (ar,) = step_comms(m, lay)
    assert (ar.collective, ar.nbytes, ar.count) == ("all_reduce", 2 * m.hidden, 2 * m.layers)


# -- memory --------------------------------------------------------------------------------
def test_activations_match_korthikanti_without_dropout_masks():
    """GPT with MHA: sbh*(10 + 24/t) bytes per layer (Korthikanti et al. 2022, eq. 2) minus
    the 2 dropout masks (2sbh) and with flash attention (no 5as^2b score term)."""
    m = get_model("megatron-gpt-18b")
    h, t = m.hidden, 8
    no_sp = activation_bytes_per_token(m, Layout(tp=t, sp=False))
    sp = activation_bytes_per_token(m, Layout(tp=t, sp=True))
    assert no_sp == pytest.approx(h * (8 + 24 / t))
    assert sp == pytest.approx(h * 32 / t)


def test_zero_stages_shrink_memory_in_order():
    m = get_model("llama3-8b")
    mems = [memory_per_gpu(m, Layout(dp=8, seq=2048, global_batch=8, zero=z, grad_bytes=4))
            for z in range(4)]
    assert mems[0].optimizer == pytest.approx(12 * m.params)
    assert mems[1].optimizer == pytest.approx(12 * m.params / 8)
    assert mems[1].gradients == pytest.approx(4 * m.params)  # fp32 main gradients
    assert mems[2].gradients == pytest.approx(4 * m.params / 8)
    assert mems[3].weights < mems[2].weights
    assert [x.total for x in mems] == sorted((x.total for x in mems), reverse=True)


def test_decode_kv_cache_size():
    m = get_model("llama3-70b")
    mem = memory_per_gpu(m, Layout(tp=8, seq=4096, global_batch=4, mode="decode"))
    # 2 (K,V) * layers * kv_dim * tokens * 2 bytes, split over 8 TP ranks
    assert mem.kv_cache == pytest.approx(2 * 80 * 1024 * 4 * 4096 * 2 / 8)
    assert mem.weights == pytest.approx(2 * m.params / 8, rel=0.01)


def test_full_recompute_keeps_only_layer_inputs():
    m = get_model("llama3-70b")
    lay = Layout(tp=8, pp=8, dp=1, seq=4096, global_batch=16, sp=True)
    assert memory_per_gpu(m, lay.with_(recompute="full")).activations \
        < memory_per_gpu(m, lay).activations / 5


# -- placement -----------------------------------------------------------------------------
def test_megatron_rank_order():
    lay = Layout(tp=8, cp=2, pp=4, dp=4)
    assert group_ranks(lay, "tp") == tuple(range(8))
    assert group_ranks(lay, "cp") == (0, 8)
    assert group_ranks(lay, "dp") == (0, 16, 32, 48)
    assert group_ranks(lay, "pp") == (0, 64, 128, 192)
    # gradients reduce over dp x cp: the CP ranks hold the same weights
    assert group_ranks(lay, "dp_cp") == (0, 8, 16, 24, 32, 40, 48, 56)
    assert coords(lay, 64 + 16 + 8 + 3) == {"tp": 3, "cp": 1, "dp": 1, "ep": 0, "pp": 1}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]))
def test_groups_partition_the_ranks(tp, pp, dp, cp, ep):
    if dp % ep:
        return
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    for kind, size in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep),
                       ("edp", cp * dp // ep), ("dp_cp", dp * cp)):
        groups = {group_ranks(lay, kind, r) for r in range(lay.world)}
        assert all(len(g) == size for g in groups)
        assert sorted(r for g in groups for r in g) == list(range(lay.world))


# -- bad input -----------------------------------------------------------------------------
def test_tp_must_divide_heads():
    with pytest.raises(ConfigError, match=r"tp=3 does not divide the 64 attention heads.*valid tp"):
        validate(get_model("llama3-70b"), Layout(tp=3), 3)


def test_product_must_equal_gpu_count():
    with pytest.raises(ConfigError, match=r"16384 GPUs.*use dp=128"):
        validate(get_model("llama3-405b"), Layout(tp=8, pp=16, dp=64), 16384)


def test_ep_needs_moe_and_divisibility():
    with pytest.raises(ConfigError, match="dense"):
        validate(get_model("llama3-8b"), Layout(dp=2, ep=2), 2)
    with pytest.raises(ConfigError, match="valid ep are 1, 2"):
        validate(get_model("mixtral-8x7b"), Layout(dp=6, ep=3, global_batch=6), 6)


def test_batch_must_split_over_dp_and_microbatches():
    with pytest.raises(ConfigError, match="not a multiple of dp"):
        validate(get_model("llama3-8b"), Layout(dp=8, global_batch=12), 8)
    with pytest.raises(ConfigError, match="micro-batch"):
        validate(get_model("llama3-8b"), Layout(dp=2, global_batch=6, micro_batch=2), 2)


def test_layout_field_checks():
    with pytest.raises(ConfigError, match="zero"):
        Layout(zero=4)
    with pytest.raises(ConfigError, match="mode"):
        Layout(mode="serve")
    with pytest.raises(ConfigError, match="tp must be"):
        Layout(tp=0)
