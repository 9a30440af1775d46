"""FLOPs and memory of a transformer under a layout, per GPU.

FLOP counting (all in multiply-add = 2 FLOPs):
- matmuls: 2 FLOPs per weight per token, for the weights a token touches (attention projections,
  top_k experts' MLP, the router);
- attention: QK^T and AV, 2 * 2 * q_dim FLOPs per (query, key) pair, counted over the full
  s x s square (not halved for causality), as Megatron-LM's formula counts it
  (Narayanan et al. 2021, eq. in sec. 5.1: 96*B*s*l*h^2*(1 + s/6h + V/16lh) with recomputation);
- logits: 2 * h * V per token; the backward pass costs twice the forward; full activation
  recomputation runs every layer's forward once more (the logits are not recomputed).
"Model FLOPs" (for MFU, as PaLM and Llama 3 report it) exclude recomputation; "hardware FLOPs"
include it (what Megatron-LM's Table 1 reports as achieved teraFLOP/s).

Memory per GPU (mixed precision with Adam, the ZeRO paper's accounting, Rajbhandari et al. 2020):
2 bytes of bf16 weights + 2 bytes of bf16 gradients + 12 bytes of fp32 master weights and Adam
moments per parameter; ZeRO-1 shards the 12, ZeRO-2 also the gradients, ZeRO-3/FSDP everything
over the data-parallel group (expert weights over the expert-data-parallel group).
Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv:2205.05198, sec. 4) generalised to GQA and gated MLPs, with
flash attention (no s x s score matrix stored) and no dropout masks.
"""
from __future__ import annotations

from dataclasses import dataclass

from .layout import Layout, layers_per_stage
from .models import ModelConfig

BF16 = 2
GRAD_BYTES = 2  # bf16 gradients (ZeRO paper's 2 + 2 + 12 bytes per parameter)
OPTIMIZER_BYTES = 12  # fp32 master copy + Adam m and v


# -- FLOPs ---------------------------------------------------------------------------------
def layer_matmul_flops(model: ModelConfig, tokens: float) -> float:
    """Forward matmul FLOPs of one layer for `tokens` tokens (top_k experts per token)."""
    weights = model.attn_params + model.top_k * model.expert_params + model.router_params
    return 2.0 * weights * tokens


def attention_flops(model: ModelConfig, queries: float, keys: float) -> float:
    """Forward QK^T and AV FLOPs of one layer: `queries` tokens each against `keys` keys."""
    return 2.0 * 2.0 * model.q_dim * queries * keys


def layer_forward_flops(model: ModelConfig, batch: float, seq: int, ctx: int | None = None
                        ) -> float:
    """One layer's forward FLOPs for `batch` sequences of `seq` new tokens over `ctx` keys."""
    ctx = seq if ctx is None else ctx
    return layer_matmul_flops(model, batch * seq) + attention_flops(model, batch * seq, ctx)


def logits_flops(model: ModelConfig, tokens: float) -> float:
    return 2.0 * model.hidden * model.vocab * tokens


def training_flops(model: ModelConfig, tokens_batch: float, seq: int, recompute: str = "none"
                   ) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one training step over `tokens_batch` sequences.

    >>> m = ModelConfig("gpt", layers=1, hidden=4, ffn=16, heads=1, vocab=8, mlp="gelu")
    >>> training_flops(m, 1, 2)[0] == 3 * (2 * 2 * 12 * 16 + 4 * 2 * 4 * 2 + 2 * 2 * 4 * 8)
    True
    """
    fwd_layers = model.layers * layer_forward_flops(model, tokens_batch, seq)
    fwd_logits = logits_flops(model, tokens_batch * seq)
    model_flops = 3.0 * (fwd_layers + fwd_logits)
    hw = model_flops + (fwd_layers if recompute == "full" else 0.0)
    return model_flops, hw


# -- parameters per GPU --------------------------------------------------------------------
def kv_heads_per_gpu(model: ModelConfig, tp: int) -> float:
    """KV heads a TP rank holds: split when tp divides them, else replicated (one per rank)."""
    return max(model.kv_heads / tp, 1.0)


def layer_params_per_gpu(model: ModelConfig, lay: Layout) -> tuple[float, float]:
    """(dense params, expert params) of one layer on one GPU."""
    kv = kv_heads_per_gpu(model, lay.tp) * model.head_dim
    attn = model.hidden * (2 * model.q_dim / lay.tp + 2 * kv)
    dense = attn + model.router_params
    experts = (model.experts / lay.ep) * model.expert_params / lay.tp
    if not model.moe:
        dense, experts = dense + experts, 0.0
    return dense, experts


def stage_params_per_gpu(model: ModelConfig, lay: Layout) -> tuple[float, float]:
    """(dense, expert) params on one GPU of the most loaded stage (layers + its embedding)."""
    d, e = layer_params_per_gpu(model, lay)
    n = layers_per_stage(model, lay)
    emb = model.vocab * model.hidden / lay.tp  # the first stage's input or last stage's output
    if lay.pp == 1 and not model.tied_embeddings:
        emb *= 2
    return n * d + emb, n * e


# -- memory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float  # activations (train/prefill) and KV cache (prefill/decode)
    kv_cache: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache

    def to_dict(self) -> dict:
        return {"weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations,
                "kv_cache": self.kv_cache, "total": self.total}


def activation_bytes_per_token(model: ModelConfig, lay: Layout) -> float:
    """Bytes one layer keeps per token for its backward pass, on one GPU (no recomputation).

    Inside the TP region (split over tp): Q, K, V, the attention output and the MLP's inner
    activations; outside (split over tp only with sequence parallelism): the two norm inputs,
    the QKV input and the MLP input.
    """
    h, f, t = model.hidden, model.ffn, lay.tp
    kv = kv_heads_per_gpu(model, t) * model.head_dim
    mlp_inner = (3 if model.mlp == "swiglu" else 2) * f * model.top_k
    inside = BF16 * (2 * model.q_dim / t + 2 * kv + mlp_inner / t)
    dispatched = BF16 * h * (model.top_k if model.moe else 0)  # routed token copies
    outside = BF16 * 4 * h + dispatched
    return inside + (outside / t if lay.sequence_parallel else outside)


def inflight_microbatches(lay: Layout) -> float:
    """Microbatches whose activations the first stage holds at once under 1F1B.

    1F1B keeps at most pp in flight; interleaving with vpp chunks multiplies it by
    (1 + (pp-1)/(pp*vpp)) (Korthikanti et al. 2022, sec. 4.2.3).
    """
    if lay.mode != "train":
        return 1.0
    n = float(min(lay.pp, lay.microbatches))
    if lay.vpp > 1:
        n *= 1 + (lay.pp - 1) / (lay.pp * lay.vpp)
    return n


def memory_per_gpu(model: ModelConfig, lay: Layout) -> Memory:
    """Peak memory of one GPU of the most loaded stage, by category (bytes)."""
    dense, expert = stage_params_per_gpu(model, lay)
    params = dense + expert
    weights = BF16 * params
    grads = opt = 0.0
    if lay.mode == "train":
        edp = max(lay.dp // lay.ep, 1)
        shard = lambda p_dense, p_exp, level: (p_dense / lay.dp + p_exp / edp  # noqa: E731
                                               if lay.zero >= level else p_dense + p_exp)
        opt = OPTIMIZER_BYTES * shard(dense, expert, 1)
        grads = GRAD_BYTES * shard(dense, expert, 2)
        weights = BF16 * shard(dense, expert, 3)
        if lay.zero == 3:  # one layer's weights are gathered at a time (FSDP unit = layer)
            d, e = layer_params_per_gpu(model, lay)
            weights += BF16 * (d + e)
    tokens = lay.batch * lay.seq / lay.cp  # tokens one GPU's sequence shard holds
    n = layers_per_stage(model, lay)
    per_token = activation_bytes_per_token(model, lay)
    if lay.mode == "train":
        working = 0.0
        if lay.recompute == "full":  # keep each layer's input; re-run one layer at a time
            t = lay.tp if lay.sequence_parallel else 1
            stored = n * BF16 * model.hidden / t * tokens
            working = per_token * tokens  # one layer's activations during its backward
        else:
            stored = n * per_token * tokens
        first = stored * inflight_microbatches(lay) + working
        # the last stage holds one microbatch plus the fp32 logits for the loss
        logits = 4.0 * tokens * model.vocab / lay.tp
        last = stored + working + logits
        acts = max(first, last) if lay.pp > 1 else last
        return Memory(weights, grads, opt, acts)
    # inference: one layer's working set at a time, and the KV cache of every layer
    kv = kv_heads_per_gpu(model, lay.tp) * model.head_dim
    kv_cache = n * 2 * BF16 * kv * lay.batch * lay.seq / lay.cp
    new_tokens = tokens if lay.mode == "prefill" else lay.batch
    acts = per_token * new_tokens + BF16 * new_tokens * model.vocab / lay.tp
    return Memory(weights, 0.0, 0.0, acts, kv_cache)
