"""Every collective of one training or inference step, with its group, size and count.

Sizes are nccl-tests' S (bytes of the whole buffer one call moves: the all-reduce buffer, the
all-gather output, the reduce-scatter input, one rank's all-to-all buffer, one sendrecv
message). Counts are per microbatch on one GPU of the most loaded pipeline stage (TP, CP, EP,
PP), or per step (DP). Activations and gradients exchanged are bf16.

Training, per layer and microbatch of b sequences of s tokens (Megatron-LM):
- TP: 2 all-reduces of b*s*h elements in the forward pass (after attention and after the MLP)
  and 2 in the backward (Shoeybi et al. 2019, sec. 3); with sequence parallelism each becomes
  a reduce-scatter plus an all-gather of the same buffer (Korthikanti et al. 2022, sec. 4.2.2).
  Full recomputation repeats the forward ones during backward; per-op selective
  checkpointing (torchtitan) repeats the all-gathers.
- CP: an all-gather of K and V over the CP group in forward; in backward another all-gather
  of K, V and a reduce-scatter of their gradients (the ring exchange of Liu et al. 2023 and
  Megatron-LM's context parallelism moves exactly these volumes); a framework that repeats
  GQA's K,V to every query head before attention (torchtitan) moves the repeated tensors.
- EP: per MoE layer an all-to-all dispatch and an all-to-all combine of top_k copies of each
  token in forward, and the same two in backward (Lepikhin et al. 2020, GShard). As DeepEP's
  kernels run it (DeepSeek-V3 report sec. 3.2.2), the exchange is split in two: across nodes
  one copy per token per distinct remote node (over RDMA, between the GPUs of the same index,
  capped by node-limited routing), then inside a node the copies for the node's other GPUs
  (over NVLink). The busiest rank receives `moe_imbalance` times the mean.
- PP: per microbatch one activation sent forward and one gradient sent backward across each
  stage boundary, vpp times with interleaving; with sequence parallelism only 1/tp of the
  activation crosses (Narayanan et al. 2021, sec. 4.1 scatter/gather).
- DP: gradients reduced once per step, in buckets of max(40M, 1M*dp) elements (Megatron-core's
  default): all-reduce (ZeRO-0), or reduce-scatter of gradients + all-gather of updated bf16
  parameters (ZeRO-1/2, same volume). ZeRO-3/FSDP all-gathers each layer's parameters in
  forward and again in backward for every microbatch, and reduce-scatters gradients once
  (under a pipeline, frameworks with `pp_fsdp_unsharded` (torchtitan) gather each layer once
  per step and keep it); with fp8 per-tensor recipes under torchtitan (torchao float8 +
  FSDP2) the gathered weights are fp8, half the bytes.
  The group is dp x cp: context-parallel ranks hold the same weights and their gradients
  are reduced with the data-parallel ones (Megatron-core's data-parallel group with context
  parallelism; torchtitan shards FSDP over dp_shard x cp), so a dp=1 run with cp>1 still
  reduces gradients. Expert parameters are reduced over the expert-data-parallel group
  (dp*cp/ep ranks).
Inference (forward only, no sequence parallelism, one batch in flight): 2 TP all-reduces per
layer of tokens*h elements (prefill: b*s tokens, decode: b tokens), EP all-to-alls, CP
all-gather of K and V (prefill), and one PP send per stage boundary.
Not modelled: vocab-parallel embedding/loss collectives (b*s scalars), MoE router statistics.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .compute import BF16, COMM_GRAD_BYTES, fsdp_unsharded_over_step, grad_bytes, \
    kv_heads_per_gpu, layer_params_per_gpu, stage_params_per_gpu
from .frameworks import fp8_recipe, get_framework
from .layout import Layout, layers_per_stage
from .models import ModelConfig


@dataclass(frozen=True)
class Comm:
    """`count` calls of one collective of `nbytes` (nccl-tests S) on a group of one kind."""
    kind: str  # "TP" | "CP" | "EP" | "PP" | "DP"
    collective: str
    nbytes: int
    count: float
    group: str  # layout group: "tp", "cp", "ep", "pp", "dp_cp", "edp"
    phase: str  # "fwd" | "bwd" | "step"
    per: str  # "microbatch" | "step"
    what: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def dp_bucket_bytes(dp: int) -> int:
    """Megatron-core's default DDP bucket: max(40M, 1M * dp) bf16 elements."""
    return max(40_000_000, 1_000_000 * dp) * COMM_GRAD_BYTES


def _bucketed(kind, collective, total, bucket, group, what) -> list[Comm]:
    full, rest = divmod(int(total), bucket)
    out = []
    if full:
        out.append(Comm(kind, collective, bucket, full, group, "step", "step", what))
    if rest:
        out.append(Comm(kind, collective, rest, 1, group, "step", "step", what))
    return out


def ep_split(model: ModelConfig, lay: Layout, gpus_per_node: int) -> tuple[int, int, float]:
    """(EP ranks per node, nodes an EP group spans, remote nodes one token's copies reach)."""
    stride = lay.expert_tp  # EP ranks are etp global ranks apart (layout.group_ranks)
    local = max(1, min(lay.ep, gpus_per_node // stride)) if stride <= gpus_per_node else 1
    nodes = max(1, lay.ep // local)
    if nodes == 1:
        return local, 1, 0.0
    # top_k experts picked evenly among `nodes` nodes: expected distinct nodes reached,
    # capped by node-limited routing, less the token's own node
    reach = nodes * (1 - (1 - 1 / nodes) ** model.top_k)
    if model.route_nodes:
        reach = min(reach, model.route_nodes)
    return local, nodes, reach * (nodes - 1) / nodes


def _ep_comms(model: ModelConfig, lay: Layout, tokens: float, count_fwd: float,
              count_bwd: float, gpus_per_node: int) -> list[Comm]:
    local, nodes, remote = ep_split(model, lay, gpus_per_node)
    t = lay.tp if lay.sequence_parallel else 1
    elem = BF16 * model.hidden * lay.moe_imbalance
    out = []
    if nodes > 1:  # one rank's buffer S sends S/nodes to each node: S*(n-1)/n leaves
        inter = int(tokens / t * remote * elem * nodes / (nodes - 1))
        for phase, count in (("fwd", count_fwd), ("bwd", count_bwd)):
            out.append(Comm("EP", "all_to_all", inter, count, "ep_inter", phase, "microbatch",
                            f"MoE dispatch+combine across {nodes} nodes (RDMA, "
                            f"{remote:.2f} remote nodes per token)"))
    if local > 1:
        # copies for this node's other EP ranks: the token's own and those arriving by RDMA
        copies = model.top_k * (local - 1) / lay.ep * (1 + remote)
        intra = int(tokens / t * copies * elem * local / (local - 1))
        for phase, count in (("fwd", count_fwd), ("bwd", count_bwd)):
            out.append(Comm("EP", "all_to_all", intra, count, "ep_intra", phase, "microbatch",
                            f"MoE dispatch+combine inside the node ({local} ranks, NVLink)"))
    return out


def training_comms(model: ModelConfig, lay: Layout, gpus_per_node: int = 8) -> list[Comm]:
    """Collectives of one training step (see the module docstring for the formulas).

    >>> from gpucomm.workloads.models import get_model
    >>> c = training_comms(get_model("llama3-8b"), Layout(tp=4, seq=8192, sp=False))
    >>> [(x.collective, x.nbytes, x.count) for x in c if x.kind == "TP" and x.phase == "fwd"]
    [('all_reduce', 67108864, 64)]
    """
    n = layers_per_stage(model, lay)
    n_moe = n if model.moe else 0
    tokens = lay.batch * lay.seq / lay.cp  # one GPU's sequence shard of a microbatch
    act = int(BF16 * tokens * model.hidden)
    redo = 1 if lay.recompute == "full" else 0  # selective re-runs no collective
    out: list[Comm] = []
    # with etp < tp the MoE layers' experts leave attention's TP group: their tokens travel
    # by the EP all-to-all, and only attention keeps its TP pair of collectives
    per_layer = 1 if model.moe and lay.expert_tp != lay.tp else 2
    if lay.tp > 1:
        if lay.sequence_parallel:
            for coll in ("all_gather", "reduce_scatter"):
                out.append(Comm("TP", coll, act, per_layer * n, "tp", "fwd", "microbatch",
                                f"SP {coll.replace('_', '-')} around attention and MLP"))
                out.append(Comm("TP", coll, act, per_layer * n * (1 + redo), "tp", "bwd",
                                "microbatch", f"SP {coll.replace('_', '-')} in backward"
                                + (" (+ recompute)" if redo else "")))
            if _op_sac_regathers(lay):
                out.append(Comm("TP", "all_gather", act, per_layer * n, "tp", "bwd",
                                "microbatch", "SP all-gathers re-run by per-op SAC"))
        else:
            out.append(Comm("TP", "all_reduce", act, per_layer * n, "tp", "fwd", "microbatch",
                            "all-reduce after attention and after MLP"))
            out.append(Comm("TP", "all_reduce", act, per_layer * n * (1 + redo), "tp", "bwd",
                            "microbatch", "all-reduce of input gradients"
                            + (" (+ recompute)" if redo else "")))
    if lay.cp > 1:
        kvh = kv_heads_per_gpu(model, lay.tp)
        if get_framework(lay.framework).cp_kv_expanded:  # K,V repeated to the query heads
            kvh = max(kvh, model.heads / lay.tp)
        kv = int(BF16 * kvh * (model.qk_head_dim + model.v_head_dim) * lay.batch * lay.seq)
        out.append(Comm("CP", "all_gather", kv, n * (1 + redo), "cp", "fwd", "microbatch",
                        "K,V exchange of ring attention"))
        out.append(Comm("CP", "all_gather", kv, n, "cp", "bwd", "microbatch",
                        "K,V exchange in backward"))
        out.append(Comm("CP", "reduce_scatter", kv, n, "cp", "bwd", "microbatch",
                        "dK,dV exchange in backward"))
    if lay.ep > 1 and n_moe:
        out += _ep_comms(model, lay, tokens, 2 * n_moe * (1 + redo), 2 * n_moe, gpus_per_node)
    if lay.pp > 1:
        p2p = act // (lay.tp if lay.sequence_parallel else 1)
        out.append(Comm("PP", "sendrecv", p2p, lay.vpp, "pp", "fwd", "microbatch",
                        "activation to the next stage"))
        out.append(Comm("PP", "sendrecv", p2p, lay.vpp, "pp", "bwd", "microbatch",
                        "gradient to the previous stage"))
    out += _dp_comms(model, lay)
    return out


def _op_sac_regathers(lay: Layout) -> bool:
    """Per-op selective checkpointing saves the reduce-scatters' outputs but not the
    all-gathers' (torchtitan parallelize_llama.py _save_list: mm, SDPA, reduce_scatter_tensor,
    max), and re-runs every second matmul (wk, wo, w3), whose inputs come from the
    sequence-parallel all-gathers: both all-gathers of a layer run again in backward."""
    return lay.mode == "train" and lay.recompute == "selective" \
        and get_framework(lay.framework).selective == "op"


def _gather_bytes(lay: Layout) -> int:
    """Bytes per weight FSDP all-gathers: 1 where the framework gathers fp8 weights with a
    per-tensor recipe (torchao enable_fsdp_float8_all_gather), else bf16."""
    if lay.fp8 and get_framework(lay.framework).fp8_weight_gather:
        recipe = fp8_recipe(lay.precision, lay.framework)
        if recipe is not None and recipe.name in ("tensorwise", "delayed"):
            return 1
    return BF16


def _dp_comms(model: ModelConfig, lay: Layout) -> list[Comm]:
    dense, expert = stage_params_per_gpu(model, lay)
    out: list[Comm] = []
    for params, group, size, label in ((dense, "dp_cp", lay.shard_dp, "dense"),
                                       (expert, "edp", lay.expert_dp, "expert")):
        if params == 0 or size == 1:
            continue
        gbytes = grad_bytes(lay) * params
        if lay.zero == 3:
            d, e = layer_params_per_gpu(model, lay)
            layer_bytes = int(_gather_bytes(lay) * (d if label == "dense" else e))
            n = layers_per_stage(model, lay)
            if fsdp_unsharded_over_step(lay):  # gathered once, kept for the whole step
                out.append(Comm("DP", "all_gather", layer_bytes, n, group, "fwd", "step",
                                f"FSDP gather of {label} layer weights, once per step"))
            else:
                out.append(Comm("DP", "all_gather", layer_bytes, n, group, "fwd", "microbatch",
                                f"FSDP gather of {label} layer weights"))
                out.append(Comm("DP", "all_gather", layer_bytes, n, group, "bwd", "microbatch",
                                f"FSDP re-gather of {label} layer weights"))
            out += _bucketed("DP", "reduce_scatter", gbytes, max(layer_bytes, 1), group,
                             f"FSDP reduce-scatter of {label} gradients")
            continue
        bucket = dp_bucket_bytes(size) * grad_bytes(lay) // COMM_GRAD_BYTES
        if lay.zero == 0:
            out += _bucketed("DP", "all_reduce", gbytes, bucket, group,
                             f"all-reduce of {label} gradients")
        else:
            out += _bucketed("DP", "reduce_scatter", gbytes, bucket, group,
                             f"ZeRO-{lay.zero} reduce-scatter of {label} gradients")
            out += _bucketed("DP", "all_gather", BF16 * params, bucket, group,
                             f"ZeRO-{lay.zero} all-gather of updated {label} weights")
    return out


def inference_comms(model: ModelConfig, lay: Layout, gpus_per_node: int = 8) -> list[Comm]:
    """Collectives of one prefill pass or one decode step (one token per sequence).

    One batch visits every pipeline stage in turn, so the counts cover all layers (the
    critical path), not one stage.
    """
    if lay.mode == "decode" and lay.cp > 1:
        raise ConfigError("context parallelism splits the prompt in prefill; decode needs cp=1")
    n = model.layers
    new = lay.batch * (lay.seq / lay.cp if lay.mode == "prefill" else 1)
    act = int(BF16 * new * model.hidden)
    out: list[Comm] = []
    if lay.tp > 1:
        out.append(Comm("TP", "all_reduce", act, 2 * n, "tp", "fwd", "step",
                        "all-reduce after attention and after MLP"))
    if lay.cp > 1:
        kv = int(BF16 * 2 * kv_heads_per_gpu(model, lay.tp) * model.head_dim
                 * lay.batch * lay.seq)
        out.append(Comm("CP", "all_gather", kv, n, "cp", "fwd", "step",
                        "K,V exchange of ring attention"))
    if lay.ep > 1 and model.moe:
        out += [c.__class__(**{**c.to_dict(), "per": "step"}) for c in
                _ep_comms(model, lay, new, 2 * n, 0, gpus_per_node) if c.phase == "fwd"]
    if lay.pp > 1:
        out.append(Comm("PP", "sendrecv", act, lay.pp - 1, "pp", "fwd", "step",
                        "activation to the next stage (all boundaries)"))
    return out


def step_comms(model: ModelConfig, lay: Layout, gpus_per_node: int = 8) -> list[Comm]:
    if lay.mode == "train":
        return training_comms(model, lay, gpus_per_node)
    return inference_comms(model, lay, gpus_per_node)


def totals(comms: list[Comm], lay: Layout) -> dict:
    """Calls and bytes per kind over a whole step (microbatch counts times microbatches)."""
    out: dict = {}
    for c in comms:
        k = out.setdefault(c.kind, {"calls": 0.0, "bytes": 0.0})
        mult = lay.microbatches if c.per == "microbatch" else 1
        k["calls"] += c.count * mult
        k["bytes"] += c.count * mult * c.nbytes
    return out
