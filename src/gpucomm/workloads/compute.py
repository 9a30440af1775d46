"""FLOPs, kernel time and memory of a transformer under a layout, per GPU.

FLOP counting (all in multiply-add = 2 FLOPs):
- matmuls: 2 FLOPs per weight per token, for the weights a token touches (attention projections,
  top_k routed and the shared experts' MLP, the router);
- attention: QK^T and AV, 2 * heads * (qk_head_dim + v_head_dim) FLOPs per (query, key) pair,
  counted over the full s x s square (not halved for causality), as Megatron-LM's formula
  counts it (Narayanan et al. 2021, sec. 5.1: 96*B*s*l*h^2*(1 + s/6h + V/16lh) with
  recomputation) and as PaLM's MFU does;
- logits: 2 * h * V per token; the backward pass costs twice the forward; full activation
  recomputation runs every layer's forward once more (the logits are not recomputed).
"Model FLOPs" (for MFU, as PaLM and Llama 3 report it) exclude recomputation; "hardware FLOPs"
include it (what Megatron-LM's Table 1 reports as achieved teraFLOP/s).

Kernel time (`layer_times`) has three parts, each at a rate chosen once per GPU class and
framework (`data/frameworks/*.yaml`): GEMMs at a fraction of the bf16 (or fp8) peak;
attention either as FlashAttention (causal: half the square executed, backward 2.5x the
forward as it recomputes the scores) or
as the score-matrix BMMs plus their softmax/dropout passes through HBM (Megatron-LM 2021);
and the memory-bound elementwise kernels (norms, residual adds, activation functions) at
HBM_EFFICIENCY of the HBM bandwidth.

Memory per GPU (mixed precision with Adam), Megatron-LM's distributed-optimizer accounting
(docs "Distributed Optimizer": bf16 weights 2 bytes, gradients 4 bytes in fp32 or 2 in bf16
(then the optimizer keeps an fp32 copy of its shard, 4 more), fp32 main weights and Adam
moments 12 bytes per parameter; the gradient width is the framework's or --fp32-grads):
ZeRO-1 (the distributed optimizer) shards the 12, ZeRO-2 also the gradients, ZeRO-3/FSDP
everything over the data-parallel group
(expert weights over the expert-data-parallel group). Activations follow Korthikanti et al.
2022 ("Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198,
sec. 4), generalised to GQA/MLA, gated MLPs and MoE, with no dropout masks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .frameworks import Kernels, fp8_recipe, get_framework
from .layout import Layout, layers_per_stage, stage_layers
from .models import ModelConfig

BF16 = 2
WEIGHT_BYTES = 2  # bf16 weights used by the forward and backward passes
GRAD_BYTES = 4  # fp32 main gradients
COMM_GRAD_BYTES = 2  # bytes per gradient element the DP collectives move (bf16 reduction)


def grad_bytes(lay: Layout) -> int:
    """Bytes per gradient element kept and reduced: the layout's (--fp32-grads) or its
    framework's (Megatron-core: bf16 buffers; FSDP2 and DeepSpeed: fp32)."""
    return lay.grad_bytes or get_framework(lay.framework).grad_bytes
OPTIMIZER_BYTES = 12  # fp32 master copy + Adam m and v
HBM_EFFICIENCY = 0.85  # STREAM-like kernels on A100/H100 reach 80-90% of the data-sheet figure


def fsdp_unsharded_over_step(lay: Layout) -> bool:
    """ZeRO-3 under a pipeline whose framework keeps each stage's weights gathered and its
    gradients unsharded from the first microbatch to the last (torchtitan with PP)."""
    return lay.mode == "train" and lay.zero == 3 and lay.pp > 1 \
        and get_framework(lay.framework).pp_fsdp_unsharded


def kernels(gpu, framework: str = "megatron") -> Kernels:
    """The kernel rates of `gpu`'s class under `framework` (data/frameworks/*.yaml)."""
    return get_framework(framework).kernels_for(gpu)


def gemm_peak(gpu, precision: str) -> float:
    """Dense FLOP/s of the GEMMs in `precision` (any fp8 recipe: the fp8 peak)."""
    if precision != "bf16":
        fp8 = getattr(gpu, "fp8_flops", 0.0)
        if not fp8:
            raise ConfigError(f"precision {precision}: {gpu.name} has no fp8 tensor cores in "
                              "the catalog; use --precision bf16")
        return fp8
    return gpu.bf16_flops


def gemm_rate(gpu, lay: Layout) -> float:
    """FLOP/s the fp8-capable GEMMs (attention projections, MLP, experts) run at."""
    k = kernels(gpu, lay.framework)
    if not lay.fp8:
        return gpu.bf16_flops * k.gemm
    recipe = fp8_recipe(lay.precision, lay.framework, gpu)
    assert recipe is not None
    eff = k.gemm_fp8 or k.gemm / 2  # no published fp8 rate: no faster than bf16
    return gemm_peak(gpu, lay.precision) * eff * recipe.gemm


# -- FLOPs ---------------------------------------------------------------------------------
def layer_weights_touched(model: ModelConfig) -> float:
    """Weights one token multiplies in one (MoE) layer."""
    return model.attn_params + (model.top_k + model.shared_experts) * model.expert_params \
        + model.router_params if model.moe else model.attn_params + model.expert_params


def layer_matmul_flops(model: ModelConfig, tokens: float) -> float:
    """Forward matmul FLOPs of one layer for `tokens` tokens."""
    return 2.0 * layer_weights_touched(model) * tokens


def attention_flops(model: ModelConfig, queries: float, keys: float) -> float:
    """Forward QK^T and AV FLOPs of one layer: `queries` tokens each against `keys` keys."""
    return 2.0 * model.heads * (model.qk_head_dim + model.v_head_dim) * queries * keys


def layer_forward_flops(model: ModelConfig, batch: float, seq: int, ctx: int | None = None
                        ) -> float:
    """One layer's forward FLOPs for `batch` sequences of `seq` new tokens over `ctx` keys."""
    ctx = seq if ctx is None else ctx
    return layer_matmul_flops(model, batch * seq) + attention_flops(model, batch * seq, ctx)


def logits_flops(model: ModelConfig, tokens: float) -> float:
    return 2.0 * model.hidden * model.vocab * tokens


def model_layer_flops(model: ModelConfig, tokens_batch: float, seq: int,
                      causal: bool = False) -> float:
    """Forward FLOPs of all layers (dense leading layers counted with their own MLP); with
    `causal` the attention core counts only the unmasked half of the score square."""
    moe = layer_forward_flops(model, tokens_batch, seq)
    if causal:
        moe -= attention_flops(model, tokens_batch * seq, seq) / 2
    if not model.dense_layers:
        return model.layers * moe
    dense = moe + 2.0 * tokens_batch * seq * (
        model.dense_mlp_params - (model.top_k + model.shared_experts) * model.expert_params
        - model.router_params)
    return model.dense_layers * dense + (model.layers - model.dense_layers) * moe


def training_flops(model: ModelConfig, tokens_batch: float, seq: int, recompute: str = "none",
                   causal: bool = False) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one training step over `tokens_batch` sequences.

    Selective recomputation re-runs the attention core (QK^T, softmax, AV) once more. With
    `causal` the attention core counts the unmasked half of the square only.

    >>> m = ModelConfig("gpt", layers=1, hidden=4, ffn=16, heads=1, vocab=8, mlp="gelu")
    >>> training_flops(m, 1, 2)[0] == 3 * (2 * 2 * 12 * 16 + 4 * 2 * 4 * 2 + 2 * 2 * 4 * 8)
    True
    """
    fwd_layers = model_layer_flops(model, tokens_batch, seq, causal)
    fwd_logits = logits_flops(model, tokens_batch * seq)
    model_flops = 3.0 * (fwd_layers + fwd_logits)
    redo = {"full": fwd_layers, "selective": model.layers * attention_flops(
        model, tokens_batch * seq, seq) / (2 if causal else 1)}
    return model_flops, model_flops + redo.get(recompute, 0.0)


# -- kernel time ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerTimes:
    """Seconds one GPU spends on one layer for one microbatch, forward, by kernel kind."""
    gemm_s: float
    attention_s: float  # attention core (forward), FlashAttention or BMMs + softmax passes
    elementwise_s: float
    attention_bwd_factor: float  # backward attention time over forward
    cast_fwd_s: float = 0.0  # fp8: quantizing the GEMM inputs (amax, cast, transposed copy)
    cast_bwd_s: float = 0.0  # fp8: quantizing the output gradients
    selective_s: float = -1.0  # what --recompute selective re-runs (-1: the attention core)
    modules_s: float = 0.0  # what recompute_modules re-run in backward
    permute_s: float = 0.0  # MoE: routed token copies into and out of expert order
    expert_host_s: float = 0.0  # MoE: what issuing the expert GEMMs one call per local expert
    # adds beyond their GPU time, per pass (forward; backward makes dgrad and wgrad passes)

    @property
    def forward_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.cast_fwd_s \
            + self.permute_s + self.expert_host_s

    def backward_s(self) -> float:
        return 2 * self.gemm_s + self.attention_bwd_factor * self.attention_s \
            + 2 * self.elementwise_s + self.cast_bwd_s + self.permute_s \
            + 2 * self.expert_host_s

    def recompute_s(self, recompute: str) -> float:
        selective = self.attention_s if self.selective_s < 0 else self.selective_s
        return {"full": self.forward_s, "selective": selective + self.modules_s,
                "none": self.modules_s}[recompute]

    def microbatch_s(self, recompute: str) -> float:
        return self.forward_s + self.backward_s() + self.recompute_s(recompute)


def fp8_operand_elements(model: ModelConfig, tp: int) -> tuple[float, float]:
    """(forward, backward) elements per token of one layer that fp8 GEMMs quantize on one GPU:
    the inputs of the QKV, output, up/gate and down projections in forward, their output
    gradients in backward (routed copies for MoE)."""
    h = model.hidden
    n = model.top_k + model.shared_experts if model.moe else 1
    up = (2 if model.mlp == "swiglu" else 1) * model.ffn
    qkv = model.heads * model.qk_head_dim + 2 * kv_heads_per_gpu(model, tp) * tp \
        * model.head_dim
    out_in = model.heads * model.v_head_dim
    fwd = h + out_in / tp + n * (h + model.ffn / tp)
    bwd = qkv / tp + h + n * (up / tp + h)
    return fwd, bwd


def layer_times(model: ModelConfig, lay: Layout, gpu, batch: float, seq: int,
                ctx: int | None = None) -> LayerTimes:
    """Forward kernel time of one (MoE) layer on one GPU for `batch` sequences of `seq` new
    tokens over `ctx` keys, the sequence split over cp and the layer over tp.

    With an fp8 precision the projections and MLP/expert GEMMs run at the recipe's fp8 rate
    and pay its quantization passes; the router, attention core and elementwise kernels stay
    in bf16 (Transformer Engine, torchao float8 and DeepSeek-V3 keep them there)."""
    ctx = seq if ctx is None else ctx
    fw = get_framework(lay.framework)
    k = fw.kernels_for(gpu)
    t, cp = lay.tp, lay.cp
    tokens = batch * seq / cp  # this GPU's queries
    expert_share = 0.0
    if model.moe:  # the busiest EP rank multiplies imbalance x its share of routed tokens
        expert_share = 2.0 * model.top_k * model.expert_params * tokens \
            * (lay.moe_imbalance - 1.0)
    router = 2.0 * model.router_params * tokens
    bf16_rate = gpu.bf16_flops * k.gemm
    gemm_s = ((layer_matmul_flops(model, tokens) - router + expert_share) / gemm_rate(gpu, lay)
              + router / bf16_rate) / t
    keys = ctx  # ring attention: every query meets every key over the cp steps
    square = attention_flops(model, tokens, keys) / t
    hbm = gpu.hbm_bandwidth_Bps * HBM_EFFICIENCY
    if lay.flash:
        causal = 0.5 if seq == ctx else 1.0  # prefill/training skip the masked half
        attn_s = square * causal / (gpu.bf16_flops * k.attention)
        bwd = 2.5  # dS, dQ, dK, dV, and the scores recomputed
        scores = 0.0
    else:  # score matrix in HBM: BMMs at GEMM rate, scale-mask-softmax and dropout passes
        attn_s = square / (gpu.bf16_flops * k.gemm)
        scores = 4.5 * model.heads / t * keys  # elements per query: softmax r/w, dropout r/w/mask
        bwd = 2.0
    h = model.hidden
    sp = t if lay.sequence_parallel else 1
    mlp = (3 if model.mlp == "swiglu" else 2) * model.ffn * (
        model.top_k + model.shared_experts if model.moe else 1) / t
    # norms (2 x read+write h), residual adds (2 x 3h), the activation function: bf16 elements,
    # times the framework's passes over a fused implementation
    elem_s = (10 * h / sp + mlp) * BF16 * tokens / hbm * fw.elementwise_passes
    attn_s += BF16 * scores * tokens / hbm  # the score passes belong to the attention core
    cast_f = cast_b = 0.0
    if lay.fp8:
        recipe = fp8_recipe(lay.precision, lay.framework, gpu)
        assert recipe is not None
        fwd_el, bwd_el = fp8_operand_elements(model, t)
        cast_f = recipe.cast_bytes * fwd_el * tokens / hbm
        cast_b = recipe.cast_bytes * bwd_el * tokens / hbm
    # per-op SAC re-runs the elementwise kernels and every other matmul
    selective = elem_s + 0.5 * gemm_s + cast_f if fw.selective == "op" else -1.0
    per_elem = BF16 * tokens / hbm * fw.elementwise_passes
    rate = gemm_rate(gpu, lay)
    n_routed = model.top_k * lay.moe_imbalance
    expert_gemm_s = 2 * tokens * n_routed * model.expert_params / t / rate  # routed experts
    module_s = {
        "layernorm": 4 * h / sp * per_elem,
        "mlp_act": mlp * per_elem,
        "moe_act": mlp * per_elem,
        "mla_up_proj": 2 * tokens * (model.q_lora_rank * model.heads * model.qk_head_dim
                                     + model.kv_lora_rank * model.heads
                                     * (model.head_dim + model.v_head_dim)) / t / rate,
        "shared_experts": 2 * tokens * model.shared_experts * model.expert_params / t / rate,
        "moe": expert_gemm_s + mlp * per_elem if model.moe else 0.0}
    host = 0.0 if lay.full_cuda_graph else expert_host_s(model, lay, expert_gemm_s,
                                                         fw.expert_gemm_host_s)
    module_s["moe"] += host
    modules = sum(module_s[m] for m in set(lay.recompute_modules))
    permute = moe_permute_elements(model, lay) * BF16 * tokens / hbm
    return LayerTimes(gemm_s, attn_s, elem_s, bwd, cast_f, cast_b, selective, modules, permute,
                      host)


def expert_host_s(model: ModelConfig, lay: Layout, expert_gpu_s: float, per_call_s: float
                  ) -> float:
    """Seconds one pass over a dropless MoE layer's experts (fc1 then fc2) takes beyond the GPU
    time of their GEMMs (`expert_gpu_s`) when the framework issues one GEMM call per local
    expert at `per_call_s` of host time each: Megatron-core syncs the token counts to the host
    before the experts, so the GPU waits on the launches, and each grouped GEMM of n local
    experts takes max(n x per_call_s, its GPU time).

    >>> m = ModelConfig("moe", layers=1, hidden=4, ffn=8, heads=1, vocab=8, experts=8, top_k=2)
    >>> lay = Layout(ep=2)
    >>> # 4 local experts: 40 us of launches against fc1's 20 us and fc2's 10 us of GPU time
    >>> round(expert_host_s(m, lay, 30e-6, 10e-6) * 1e6, 3)
    50.0
    >>> expert_host_s(m, lay, 300e-6, 10e-6)  # GPU-bound: the launches hide behind the GEMMs
    0.0
    """
    if not model.moe or per_call_s <= 0.0:
        return 0.0
    host = model.experts / lay.ep * per_call_s
    fc1 = 2.0 / 3.0 if model.mlp == "swiglu" else 0.5  # the up/gate share of expert weights
    return max(0.0, host - fc1 * expert_gpu_s) + max(0.0, host - (1 - fc1) * expert_gpu_s)


def moe_permute_elements(model: ModelConfig, lay: Layout) -> float:
    """bf16 elements per token one MoE layer moves through HBM to put its routed copies in
    expert order and back (forward; the backward moves their gradients the same way), as
    Megatron-core's all-to-all token dispatcher does (transformer/moe/token_dispatcher.py,
    MoEAlltoAllTokenDispatcher): `permute` reads each token and writes its top_k copies
    before the dispatch all-to-all, `unpermute` reads the copies and writes their
    probability-weighted sum after the combine, and a rank holding several experts sorts the
    received chunks into local-expert order and back (`sort_chunks_by_idxs`, a read and a
    write of every copy each way). Fused kernels (moe_permute_fusion) still make these
    passes; what they save is the index bookkeeping."""
    if not model.moe:
        return 0.0
    copies = model.top_k * lay.moe_imbalance * model.hidden
    local_experts = model.experts / lay.ep
    return 2 * model.hidden + 2 * copies + (4 * copies if local_experts > 1 else 0.0)


# -- parameters per GPU --------------------------------------------------------------------
def kv_heads_per_gpu(model: ModelConfig, tp: int) -> float:
    """KV heads a TP rank holds: split when tp divides them, else replicated (one per rank)."""
    return max(model.kv_heads / tp, 1.0)


def layer_params_per_gpu(model: ModelConfig, lay: Layout) -> tuple[float, float]:
    """(dense params, expert params) of one (MoE) layer on one GPU."""
    if model.mla:
        attn = model.attn_params / lay.tp
    else:
        kv = kv_heads_per_gpu(model, lay.tp) * model.head_dim
        attn = model.hidden * (2 * model.q_dim / lay.tp + 2 * kv)
    if not model.moe:
        return attn + model.expert_params / lay.tp, 0.0
    dense = attn + model.router_params + model.shared_experts * model.expert_params / lay.tp
    experts = (model.experts / lay.ep) * model.expert_params / lay.expert_tp
    return dense, experts


def stage_params_per_gpu(model: ModelConfig, lay: Layout) -> tuple[float, float]:
    """(dense, expert) params on one GPU of the most loaded stage (layers + its embedding)."""
    d, e = layer_params_per_gpu(model, lay)
    layers = stage_layers(model, lay)
    emb = model.vocab * model.hidden / lay.tp  # the first stage's input or last stage's output
    if lay.pp == 1 and not model.tied_embeddings:
        emb *= 2
    ends = max(layers[0], layers[-1])
    n = max(layers)
    return max(n * d, ends * d + emb), n * e


# -- memory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float  # activations (train/prefill) and KV cache (prefill/decode)
    kv_cache: float = 0.0
    logits: float = 0.0  # the last stage's logits and loss buffers

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations \
            + self.kv_cache + self.logits

    def to_dict(self) -> dict:
        return {"weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations,
                "kv_cache": self.kv_cache, "logits": self.logits, "total": self.total}


def activation_bytes_per_token(model: ModelConfig, lay: Layout) -> float:
    """Bytes one layer keeps per token for its backward pass, on one GPU, without full
    recomputation (Korthikanti et al. 2022, Table 2, generalised).

    Outside the TP region (split over tp only with sequence parallelism): the two norm inputs,
    the QKV input and the MLP input. Inside (split over tp): Q, K, V, the attention output,
    the MLP's inner activations (gate and up outputs and their product for SwiGLU; the GeLU
    input and output otherwise), and for MoE the routed token copies. Without FlashAttention
    and without selective recomputation the softmax output, dropout mask and dropout output
    (5 bytes per score) are kept too. The imbalance of routing inflates the expert part.
    Linear-layer inputs (norm outputs, attention output, the down projection's input, the
    routed copies) take one byte each when they are cached in fp8.
    """
    h, t = model.hidden, lay.tp
    redo = set(lay.recompute_modules)
    if lay.recompute == "selective" and get_framework(lay.framework).selective == "op":
        return _op_sac_bytes_per_token(model, lay)
    # linear-layer inputs cached in fp8: asked for (DeepSeek-V3), or the framework's fp8
    # linear layers keep the quantized input for the weight gradient (Transformer Engine)
    fp8_inputs = lay.fp8_activations or (
        lay.fp8 and get_framework(lay.framework).fp8_saves_inputs)
    act = 1 if fp8_inputs else BF16
    kvh = kv_heads_per_gpu(model, t)
    qkv = model.heads / t * model.qk_head_dim + kvh * (model.qk_head_dim + model.v_head_dim)
    attn = BF16 * qkv + act * model.heads / t * model.v_head_dim
    if model.mla:  # the compressed latents feeding the up-projections (not split over tp)
        latents = model.q_lora_rank + model.kv_lora_rank + model.rope_head_dim
        attn += act * latents
        if "mla_up_proj" in redo:  # Q, K, V re-made from the latents in backward
            attn -= BF16 * qkv
    if not lay.flash and lay.recompute == "none":
        attn += 5 * model.heads / t * lay.seq
    gated = model.mlp == "swiglu"
    # per MLP: the inputs of the activation (gate and up, or the GeLU input) and its output
    # (the down projection's input, cached in fp8 with fp8_activations)
    acts_in, acts_out = (2 if gated else 1) * model.ffn * BF16 / t, model.ffn * act / t
    if model.moe:
        routed = model.top_k * lay.moe_imbalance
        per_expert = acts_in + (0 if "moe_act" in redo else acts_out)
        shared = model.shared_experts * (0 if "shared_experts" in redo else acts_in + acts_out)
        experts = 0 if "moe" in redo else per_expert * routed
        mlp = experts + shared + act * h * routed / t  # the routed copies (expert inputs)
    else:
        mlp = acts_in + (0 if "mlp_act" in redo else acts_out)
    # the two norm inputs (bf16) and outputs (the QKV and MLP inputs, re-made in backward
    # when the norms are recomputed)
    outside = (BF16 * 2 + (0 if "layernorm" in redo else 2 * act)) * h
    return attn + mlp + (outside / t if lay.sequence_parallel else outside)


def _op_sac_bytes_per_token(model: ModelConfig, lay: Layout) -> float:
    """torchtitan's per-op selective checkpointing: the layer input, the attention output and
    every other matmul output are saved; everything else is recomputed (torchtitan
    activation_checkpoint.py, _save_list and "recompute every other mm")."""
    h, t = model.hidden, lay.tp
    n = model.top_k + model.shared_experts if model.moe else 1
    qkv = model.heads * model.qk_head_dim + 2 * kv_heads_per_gpu(model, t) * t * model.head_dim
    up = (2 if model.mlp == "swiglu" else 1) * model.ffn
    mm_out = qkv / t + h + n * (up / t + h)
    sp = t if lay.sequence_parallel else 1
    return BF16 * (h / sp + model.heads * model.v_head_dim / t + mm_out / 2)


def inflight_microbatches(lay: Layout, stage: int = 0) -> float:
    """Microbatches whose activations pipeline stage `stage` holds at its peak (train).

    1F1B: stage i runs pp - i forwards before its first backward. Interleaved 1F1B with v
    chunks: 2(pp-i-1) + (v-1)pp + 1 chunk-forwards (Megatron-LM's warm-up count), each of 1/v
    of the stage's layers: for the first stage pp * (1 + (pp-1)/(pp*v)) microbatches'
    worth (Korthikanti et al. 2022, sec. 4.2.3). Never more than the microbatches of a step.
    """
    if lay.mode != "train":
        return 1.0
    p, v = lay.pp, lay.vpp
    n = (p - stage) if v == 1 else (2 * (p - stage - 1) + (v - 1) * p + 1) / v
    return float(min(n, lay.microbatches))


def _shard(lay: Layout, dense: float, expert: float, level: int) -> float:
    if lay.zero < level:
        return dense + expert
    return dense / lay.shard_dp + expert / lay.expert_dp


def memory_per_gpu(model: ModelConfig, lay: Layout) -> Memory:
    """Peak memory of one GPU of the most loaded stage, by category (bytes)."""
    dense, expert = stage_params_per_gpu(model, lay)
    weights = WEIGHT_BYTES * (dense + expert)
    grads = opt = 0.0
    if lay.mode == "train":
        gbytes = grad_bytes(lay)
        # bf16 gradient buffers: the optimizer makes an fp32 copy of its shard's gradients
        opt = (OPTIMIZER_BYTES + (GRAD_BYTES if gbytes < GRAD_BYTES else 0)) \
            * _shard(lay, dense, expert, 1)
        grads = gbytes * _shard(lay, dense, expert, 2)
        if fsdp_unsharded_over_step(lay):  # the stage's weights gathered all step, its
            # gradients accumulated unsharded (the sharded copies are in the optimizer's 12)
            grads = gbytes * (dense + expert)
        elif lay.zero == 3:  # weights sharded; one layer (FSDP unit) gathered, the next
            # prefetched
            d, e = layer_params_per_gpu(model, lay)
            weights = WEIGHT_BYTES * (_shard(lay, dense, expert, 3) + 2 * (d + e))
    tokens = lay.batch * lay.seq / lay.cp  # tokens one GPU's sequence shard holds
    layers = stage_layers(model, lay)
    per_token = activation_bytes_per_token(model, lay)
    if lay.mode == "train":
        if lay.offload_optimizer:  # fp32 master weights and moments live in host memory
            opt = 0.0
        sp = lay.tp if lay.sequence_parallel else 1
        working = per_token * tokens  # one layer's activations during its recompute/backward
        if lay.recompute == "full":  # keep each layer's input; re-run one layer at a time
            keep = BF16 * model.hidden / sp * tokens
        else:
            keep, working = per_token * tokens, 0.0
        inflight = [inflight_microbatches(lay, i) for i in range(lay.pp)]
        if lay.offload_activations:  # all but the running microbatch's wait in host memory
            # (and the next one's, prefetched)
            inflight = [min(x, 2.0) for x in inflight]
        stages = [layers[i] * keep * inflight[i] for i in range(lay.pp - 1)]
        # the last stage holds one microbatch, and its logits: the bf16 output of the head,
        # the fp32 copy the loss works on and the fp32 softmax kept for backward (twice with
        # multi-token prediction: its own head)
        logits = (BF16 + 4 + 4) * tokens * model.vocab / lay.tp * (1 + min(model.mtp_layers, 1))
        last = layers[-1] * keep + logits
        acts = max(stages + [last]) + working
        if last >= max(stages, default=0.0):
            return Memory(weights, grads, opt, acts - logits, 0.0, logits)
        return Memory(weights, grads, opt, acts)
    # inference: one layer's working set at a time, and the KV cache of every layer
    n = layers_per_stage(model, lay)
    kv_cache = n * kv_cache_bytes_per_token(model, lay) * lay.batch * lay.seq / lay.cp
    new_tokens = tokens if lay.mode == "prefill" else lay.batch
    acts = per_token * new_tokens
    return Memory(weights, 0.0, 0.0, acts, kv_cache, BF16 * new_tokens * model.vocab / lay.tp)


def kv_cache_bytes_per_token(model: ModelConfig, lay: Layout) -> float:
    """KV cache of one layer per token on one GPU (MLA caches its compressed latent)."""
    if model.mla:
        return BF16 * (model.kv_lora_rank + model.rope_head_dim)
    return 2 * BF16 * kv_heads_per_gpu(model, lay.tp) * model.head_dim
