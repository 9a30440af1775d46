"""A parallel layout (TP, SP, PP, DP with ZeRO, EP, CP) checked against a model, and rank placement.

Placement follows Megatron-LM's default order "tp-cp-ep-dp-pp": tensor parallelism is innermost
(consecutive ranks, so a TP group sits inside one node's NVLink/NVSwitch domain), then context
parallelism, then data parallelism, and pipeline stages outermost. With a node-major topology
rank order, global rank g = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)). Experts
are laid out over the same tp x cp x dp ranks of a stage as Megatron-core's expert rank
generator does: expert TP (etp) innermost, then EP, then expert data parallelism; with etp = tp
and cp = 1 that is dp_rank = ep_rank + ep * expert_dp_rank.

    >>> lay = Layout(tp=8, pp=16, dp=128, seq=8192, global_batch=2048)
    >>> lay.world, lay.microbatches
    (16384, 16)
    >>> group_ranks(lay, "dp")[:3]
    (0, 8, 16)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import ConfigError
from .frameworks import PRECISIONS, get_framework
from .models import ModelConfig

MODES = ("train", "prefill", "decode")
KINDS = ("TP", "CP", "EP", "PP", "DP")
RECOMPUTE = ("none", "selective", "full")
RECOMPUTE_MODULES = ("layernorm", "mla_up_proj", "moe_act", "mlp_act", "shared_experts", "moe")


@dataclass(frozen=True)
class Layout:
    """How one job is split: degrees, batch, sequence, and the memory-saving options.

    `seq` is the training / prompt sequence length, or the KV-cache context length in decode.
    `global_batch` counts sequences per optimizer step (train) or sequences served (inference).
    `vpp` is the number of interleaved virtual pipeline stages per GPU (Narayanan et al. 2021).
    `zero`: 0 plain DP, 1 shards the optimizer states (Megatron's distributed optimizer),
    2 also the gradients, 3 also the parameters (= FSDP).
    `recompute`: "none", "selective" (the attention core re-runs in backward, Korthikanti et
    al. 2022) or "full" (every layer re-runs its forward during backward).
    `flash`: FlashAttention-style attention (no score matrix stored or written to HBM).
    `precision`: the GEMMs' arithmetic: "bf16", "fp8" (the framework's default recipe) or an
    fp8 recipe by name (tensorwise, delayed, rowwise, blockwise, mxfp8; see `frameworks`).
    `framework`: the kernel-efficiency and overlap set (`gpucomm/data/frameworks/*.yaml`).
    `balanced_ends`: the first and last pipeline stages carry one transformer layer fewer, for
    the embedding and the loss (Llama 3 paper sec. 3.3.2; Megatron-core's
    --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split).
    Overlap switches: `dp_overlap` (gradient reduce-scatter / parameter all-gather bucket by
    bucket behind backward / forward), `tp_overlap` (TP collectives split and hidden behind
    the GEMMs), `cp_overlap` (ring attention's K,V sends behind the attention of the chunk in
    hand), `pp_overlap` (stage-boundary sends asynchronous, off the steady-state path),
    `ep_overlap` (MoE all-to-alls hidden behind another microbatch's compute, as DualPipe and
    Megatron-core's 1F1B all-to-all overlap run them).
    `moe_imbalance`: tokens the busiest expert-parallel rank receives over the mean (1 = even).
    `recompute_modules`: parts re-made in backward instead of stored (Megatron-core
    --recompute-modules; DeepSeek-V3 report sec. 3.3.3): layernorm, mla_up_proj, moe_act
    (the experts' SwiGLU), mlp_act, shared_experts, moe (the whole expert MLPs).
    `fp8_activations`: linear-layer inputs cached in fp8 (DeepSeek-V3 sec. 3.3.3;
    Transformer Engine keeps the fp8 copy its GEMM used).
    `offload_activations` / `offload_optimizer`: stored activations wait in host memory
    (Megatron-core --cpu-offloading), the optimizer states live and step on the CPU
    (DeepSpeed ZeRO-Offload; Megatron-core --optimizer-cpu-offload).
    `full_cuda_graph`: the whole iteration replays from a CUDA graph (Megatron-core
    --cuda-graph-impl full_iteration with fixed-capacity expert buffers, moe_paged_stash, as
    Megatron-Bridge's 26.06 Qwen3 MXFP8 recipes run it): no token-count sync before the
    experts, so a dropless MoE layer's expert GEMMs cost no per-expert host launches. Partial
    (TE-scoped attn / moe_router / moe_preprocess) graphs leave the routed experts eager and
    are the default's regime.
    `grad_bytes`: gradient width kept and reduced, 4 (fp32) or 2 (bf16); 0 = the framework's.
    `etp`: tensor parallelism of the experts (0 = tp). Experts are laid out as Megatron-core
    does ("etp-ep-edp" over a stage's tp x cp x dp ranks), so with etp < tp expert
    parallelism also takes ranks of the attention TP dimension.
    """
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    seq: int = 2048
    global_batch: int = 1
    micro_batch: int = 1
    sp: bool = True
    zero: int = 1
    vpp: int = 1
    recompute: str = "none"
    mode: str = "train"
    flash: bool = True
    precision: str = "bf16"
    balanced_ends: bool = False
    dp_overlap: bool = True
    tp_overlap: bool = False
    cp_overlap: bool = True
    pp_overlap: bool = True
    moe_imbalance: float = 1.0
    framework: str = "megatron"
    ep_overlap: bool = False
    recompute_modules: tuple = ()
    fp8_activations: bool = False
    offload_activations: bool = False
    offload_optimizer: bool = False
    full_cuda_graph: bool = False
    grad_bytes: int = 0
    etp: int = 0

    def __post_init__(self):
        for f in ("tp", "pp", "dp", "cp", "ep", "seq", "global_batch", "micro_batch", "vpp"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{f} must be an integer >= 1, got {v!r}")
        if not isinstance(self.etp, int) or isinstance(self.etp, bool) or self.etp < 0 \
                or (self.etp and self.tp % self.etp):
            raise ConfigError(f"etp must divide tp={self.tp} (0: the same as tp), "
                              f"got {self.etp!r}")
        if self.grad_bytes not in (0, 2, 4):
            raise ConfigError(f"grad_bytes must be 0 (the framework's), 2 (bf16) or 4 (fp32), "
                              f"got {self.grad_bytes!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ConfigError(f"zero must be 0, 1, 2 or 3 (3 = FSDP), got {self.zero!r}")
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE)}, "
                              f"got {self.recompute!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, "
                              f"got {self.precision!r}")
        get_framework(self.framework)  # names the allowed ones when unknown
        if isinstance(self.recompute_modules, str):
            object.__setattr__(self, "recompute_modules", tuple(
                m.strip() for m in self.recompute_modules.split(",") if m.strip()))
        bad = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise ConfigError(f"recompute module(s) {', '.join(map(str, bad))} unknown: allowed "
                              f"are {', '.join(RECOMPUTE_MODULES)}")
        imb = self.moe_imbalance
        if isinstance(imb, bool) or not isinstance(imb, (int, float)) or not 1.0 <= imb <= 64:
            raise ConfigError(f"moe_imbalance must be a number from 1 (even routing) to 64, "
                              f"got {imb!r}")
        if self.mode not in MODES:
            raise ConfigError(f"mode {self.mode!r} is unknown: allowed are {', '.join(MODES)}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def fp8(self) -> bool:
        return self.precision != "bf16"

    @property
    def shard_dp(self) -> int:
        """Ranks that hold the same weights: dp x cp. Gradients are reduced and ZeRO shards
        over them (Megatron-core's data-parallel group with context parallelism; torchtitan's
        FSDP mesh dp_shard x cp)."""
        return self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same experts (the expert-data-parallel group):
        tp x cp x dp / (etp x ep)."""
        return max(self.tp * self.shard_dp // (self.expert_tp * self.ep), 1)

    @property
    def sequence_parallel(self) -> bool:
        return self.sp and self.tp > 1

    @property
    def batch_per_replica(self) -> int:
        return self.global_batch // self.dp

    @property
    def microbatches(self) -> int:
        """Microbatches per step of one pipeline (train); 1 in inference (one batch in flight)."""
        if self.mode != "train":
            return 1
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def batch(self) -> int:
        """Sequences in one microbatch (train) or in one replica's batch (inference)."""
        return self.micro_batch if self.mode == "train" else self.batch_per_replica

    def with_(self, **kw) -> "Layout":
        return replace(self, **kw)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def validate(model: ModelConfig, lay: Layout, world: int | None = None) -> Layout:
    """Check the layout against the model and the GPU count; ConfigError names what would be
    valid."""
    _check_model_split(model, lay)
    if lay.seq % lay.cp or (lay.cp > 1 and (lay.seq // lay.cp) % 2):
        raise ConfigError(f"cp={lay.cp} must split seq={lay.seq} into equal even chunks")
    if lay.sequence_parallel and (lay.seq // lay.cp) % lay.tp:
        raise ConfigError(f"sequence parallelism splits seq/cp={lay.seq // lay.cp} over tp="
                          f"{lay.tp}: it must divide (or pass --no-sp)")
    if world is not None and lay.world != world:
        others = lay.tp * lay.pp * lay.cp
        hint = (f"; with tp={lay.tp} pp={lay.pp} cp={lay.cp} use dp={world // others}"
                if world % others == 0 else
                f"; tp*pp*cp={others} does not divide {world}")
        raise ConfigError(f"tp*pp*dp*cp = {lay.tp}*{lay.pp}*{lay.dp}*{lay.cp} = {lay.world} "
                          f"but the system has {world} GPUs{hint}")
    if lay.global_batch % lay.dp:
        raise ConfigError(f"global batch {lay.global_batch} is not a multiple of dp={lay.dp}")
    if lay.mode == "train" and lay.batch_per_replica % lay.micro_batch:
        raise ConfigError(f"global batch {lay.global_batch} / dp={lay.dp} = "
                          f"{lay.batch_per_replica} sequences per replica is not a multiple of "
                          f"micro-batch {lay.micro_batch}")
    if lay.mode != "train" and (lay.zero or lay.recompute != "none" or lay.sp):
        # no optimizer, no backward; TP inference all-reduces (no sequence parallelism)
        lay = lay.with_(zero=0, recompute="none", sp=False)
    return lay


def _check_model_split(model: ModelConfig, lay: Layout) -> None:
    """The degrees must split the model: heads, KV heads and FFN by tp, layers by pp and vpp,
    experts by ep."""
    if model.heads % lay.tp:
        ok = [d for d in _divisors(model.heads) if model.hidden % d == 0 and d <= 64]
        raise ConfigError(f"tp={lay.tp} does not divide the {model.heads} attention heads of "
                          f"{model.name}: valid tp are {', '.join(map(str, ok))}")
    if model.kv_heads % lay.tp and lay.tp % model.kv_heads:
        raise ConfigError(f"tp={lay.tp} and the {model.kv_heads} KV heads of {model.name}: one "
                          f"must divide the other (KV heads are split or replicated)")
    if model.ffn % lay.tp:
        raise ConfigError(f"tp={lay.tp} does not divide ffn={model.ffn} of {model.name}")
    if lay.pp > model.layers:
        raise ConfigError(f"pp={lay.pp} exceeds the {model.layers} layers of {model.name}")
    if lay.vpp > 1 and (lay.pp == 1 or math.ceil(model.layers / lay.pp) < lay.vpp):
        raise ConfigError(f"vpp={lay.vpp} needs pp > 1 and at least vpp layers per stage "
                          f"({model.layers} layers / pp={lay.pp})")
    per_stage = math.ceil(model.layers / lay.pp)
    if lay.vpp > 1 and per_stage % lay.vpp:
        # Megatron-LM: the layers of a pipeline stage split evenly into its virtual stages
        ok = [d for d in _divisors(per_stage)]
        raise ConfigError(f"vpp={lay.vpp} does not divide the {per_stage} layers per stage "
                          f"({model.layers} layers / pp={lay.pp}): valid vpp are "
                          f"{', '.join(map(str, ok))}")
    if lay.ep > 1:
        if not model.moe:
            raise ConfigError(f"ep={lay.ep} but {model.name} is dense: ep must be 1")
        room = lay.tp * lay.cp * lay.dp // lay.expert_tp  # ranks of a stage per expert shard
        if model.experts % lay.ep or room % lay.ep:
            ok = [d for d in _divisors(model.experts) if room % d == 0]
            raise ConfigError(f"ep={lay.ep} must divide the {model.experts} experts and "
                              f"tp*cp*dp/etp={room}: valid ep are {', '.join(map(str, ok))}")
    if model.ffn % lay.expert_tp:
        raise ConfigError(f"etp={lay.expert_tp} does not divide ffn={model.ffn} of {model.name}")


def stage_layers(model: ModelConfig, lay: Layout) -> list[int]:
    """Transformer layers of each pipeline stage: as even as the count allows; with
    `balanced_ends` the embedding and the loss count as one layer each."""
    p = lay.pp
    if lay.balanced_ends and p > 2:
        base, extra = divmod(model.layers + 2, p)
        out = [base + (1 if i < extra else 0) for i in range(p)]
        out[0] -= 1
        out[-1] -= 1 - model.mtp_layers
        return out
    base, extra = divmod(model.layers, p)
    out = [base + (1 if i < extra else 0) for i in range(p)]
    out[-1] += model.mtp_layers  # multi-token prediction modules follow the last layer
    return out


def layers_per_stage(model: ModelConfig, lay: Layout) -> int:
    """Layers on the most loaded pipeline stage."""
    return max(stage_layers(model, lay))


def coords(lay: Layout, rank: int) -> dict:
    """Parallel coordinates of a global rank."""
    tp_r, rest = rank % lay.tp, rank // lay.tp
    cp_r, rest = rest % lay.cp, rest // lay.cp
    dp_r, pp_r = rest % lay.dp, rest // lay.dp
    return {"tp": tp_r, "cp": cp_r, "dp": dp_r, "ep": _expert(lay, rank)[2], "pp": pp_r}


def _expert(lay: Layout, rank: int) -> tuple[int, int, int, int]:
    """(stage's first rank, etp rank, ep rank, expert-dp rank) of a global rank: Megatron-core
    orders a stage's tp x cp x dp ranks as etp innermost, then ep, then expert dp."""
    stage = lay.tp * lay.cp * lay.dp
    base, i = rank - rank % stage, rank % stage
    et = lay.expert_tp
    return base, i % et, (i // et) % lay.ep, i // (et * lay.ep)


def rank_of(lay: Layout, tp=0, cp=0, dp=0, pp=0) -> int:
    return tp + lay.tp * (cp + lay.cp * (dp + lay.dp * pp))


def group_ranks(lay: Layout, kind: str, rank: int = 0) -> tuple[int, ...]:
    """Global ranks of `rank`'s group of one kind ("tp", "cp", "dp", "dp_cp", "ep", "edp",
    "pp").

    "dp_cp" is the gradient and ZeRO-shard group (dp x cp ranks), "edp" the
    expert-data-parallel group (ranks holding the same experts, across cp too), "pp" the
    stages.
    """
    c = coords(lay, rank)
    kind = kind.lower()
    if kind == "tp":
        return tuple(rank_of(lay, t, c["cp"], c["dp"], c["pp"]) for t in range(lay.tp))
    if kind == "cp":
        return tuple(rank_of(lay, c["tp"], x, c["dp"], c["pp"]) for x in range(lay.cp))
    if kind == "dp":
        return tuple(rank_of(lay, c["tp"], c["cp"], d, c["pp"]) for d in range(lay.dp))
    if kind in ("ep", "edp"):  # experts: etp-ep-edp inside the stage
        base, et_r, ep_r, edp_r = _expert(lay, rank)
        et = lay.expert_tp
        if kind == "ep":
            return tuple(base + et_r + et * (e + lay.ep * edp_r) for e in range(lay.ep))
        return tuple(base + et_r + et * (ep_r + lay.ep * j) for j in range(lay.expert_dp))
    if kind == "dp_cp":  # gradient reduction and ZeRO shards: dp x cp
        return tuple(rank_of(lay, c["tp"], x, d, c["pp"]) for d in range(lay.dp)
                     for x in range(lay.cp))
    if kind == "pp":
        return tuple(rank_of(lay, c["tp"], c["cp"], c["dp"], s) for s in range(lay.pp))
    raise ConfigError(f"unknown group kind {kind!r}: allowed are tp, cp, dp, dp_cp, ep, edp, "
                      "pp")
