"""The step-time model: compute from FLOPs, communication timed by the simulator on real groups.

Assumptions (one value each, the same for every case):
- Compute runs at COMPUTE_EFFICIENCY of the GPU's dense bf16 peak. Decode (and any pass with
  little arithmetic per byte) is bounded by HBM: a layer takes max(FLOPs / (peak * eff),
  bytes read / (HBM bandwidth * HBM_EFFICIENCY)).
- TP, CP and EP collectives and PP sends sit on the critical path (exposed): a layer waits for
  them. Each runs on the representative group of rank 0 (TP inside a node, DP one GPU per node
  along a rail, ...), timed by `gpucomm.simulate.predict` on the cluster's topology.
- Training uses 1F1B: the step is (m + (p-1)/v) microbatch slots of forward + backward +
  exposed per-microbatch communication, for m microbatches, p stages and v interleaved chunks;
  the bubble is the (p-1)/v slots beyond m ((p-1)/(m+p-1) of the step when v = 1).
- DP gradient reduction (and ZeRO's reduce-scatter) overlaps the backward pass of the last
  microbatch, bucket by bucket: exposed = max(last bucket, total - W*(1 - 1/n)) for n buckets
  and window W. ZeRO-1/2's parameter all-gather overlaps the first forward the same way;
  ZeRO-3's per-layer gathers overlap each microbatch's compute.
- Inference keeps one batch in flight: stages run one after another, all communication exposed.
- Groups of one kind run their collective at the same moment. Those on the same nodes (e.g.
  the 8 DP groups of a DGX, which share its NICs) are timed together by the simulator's flow
  model, and the slowdown sharing causes is applied to the group's time (see Timer).
- The optimizer step, data loading and the vocab-parallel loss's small collectives are not
  timed.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..limits import check_model_ranks
from .comms import Comm, step_comms
from .concurrent import time_together
from .compute import (BF16, Memory, kv_heads_per_gpu, layer_forward_flops,
                      layer_params_per_gpu, logits_flops, memory_per_gpu, training_flops)
from .layout import KINDS, Layout, group_ranks, rank_of, validate
from .models import ModelConfig, get_model

# Fraction of dense bf16 peak a well-tuned transformer layer sustains end to end (GEMMs near
# 70-80% of peak, attention, norms and elementwise kernels well below). One constant for every
# model, GPU and layout; benchmarks/planner_validation.py holds it against published runs.
COMPUTE_EFFICIENCY = 0.55
# Fraction of nominal HBM bandwidth a streaming read reaches (STREAM-like kernels on A100/H100
# reach 80-90% of the data-sheet figure).
HBM_EFFICIENCY = 0.85


@dataclass(frozen=True)
class Cluster:
    """A system preset at a node count, with the GPU it carries."""
    system: str
    nodes: int
    nic: str | None
    gpus_per_node: int
    gpu: object  # gpucomm.hardware GPU
    options: tuple = ()

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@functools.lru_cache(maxsize=64)
def _topology(system: str, nodes: int, nic, options: tuple):
    from ..topology import build_topology
    return build_topology(system, nodes=nodes, nic=nic, **dict(options))


def make_cluster(system: str, nodes: int, nic: str | None = None, **options) -> Cluster:
    """The cluster `system` x `nodes` (the preset names come from gpucomm.topology)."""
    from ..hardware import get_gpu
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"nodes must be an integer >= 1, got {nodes!r}")
    opts = tuple(sorted(options.items()))
    one = _topology(system, 1, nic, opts)
    check_model_ranks(nodes, one.gpus_per_node)
    gpu_model = next(d.model for d in one.devices if d.name == one.ranks[0])
    return Cluster(system, nodes, nic, one.gpus_per_node, get_gpu(gpu_model), opts)


MAX_TOGETHER_RANKS = 256  # keeps the flow simulation of concurrent groups to seconds
_TIMES: dict = {}  # (system, nic, options, sim model) -> {group shape: timing}


class Timer:
    """Times collectives on groups of global ranks, with a cache.

    A group spanning k nodes is placed on a k-node topology of the same system, each member
    keeping its GPU index inside its node (so a DP group stays on one rail): the links a group
    uses are the same as on the full cluster as long as the fabric is non-blocking.
    With `contention`, the peers of the group (the groups of the same kind on the same nodes,
    which run the same collective at the same moment) are timed together with it by the
    simulator's flow model (see `concurrent`); the slowdown over the group alone (same model)
    scales the group's time. Above MAX_TOGETHER_RANKS ranks in all, the slowdown is measured
    on every group cut to its first members, which cross the same kind of links.
    """

    def __init__(self, cluster: Cluster, sim_model: str = "analytic", contention: bool = True):
        self.cluster, self.sim_model, self.contention = cluster, sim_model, contention
        self._cache = _TIMES.setdefault((cluster.system, cluster.nic, cluster.options,
                                         sim_model, contention), {})

    def place(self, groups: list[tuple[int, ...]]):
        gpn = self.cluster.gpus_per_node
        nodes = sorted({r // gpn for g in groups for r in g})
        index = {n: i for i, n in enumerate(nodes)}
        local = [[index[r // gpn] * gpn + r % gpn for r in g] for g in groups]
        return _topology(self.cluster.system, len(nodes), self.cluster.nic,
                         self.cluster.options), local

    def time(self, collective: str, nbytes: int, ranks: tuple[int, ...],
             peers: list[tuple[int, ...]] = ()) -> dict:
        if len(ranks) < 2 or nbytes <= 0:
            return {"time_s": 0.0, "algorithm": "-", "protocol": "-", "together": 1}
        gpn = self.cluster.gpus_per_node
        base = ranks[0] // gpn * gpn
        shape = (collective, int(nbytes), tuple(tuple(r - base for r in g)
                                                for g in (ranks, *peers)))
        if shape not in self._cache:
            from ..simulate import predict
            topo, local = self.place([ranks])
            dtype = "bfloat16" if nbytes % 2 == 0 else "int8"
            res = predict(collective, int(nbytes), topo, ranks=local[0], dtype=dtype,
                          model=self.sim_model)
            out = {"time_s": float(res.time_s), "algorithm": res.algorithm,
                   "protocol": res.protocol, "together": 1}
            groups = [ranks, *peers]
            if self.contention and len(groups) > 1:
                # too many ranks to simulate at once: measure the slowdown on the groups cut
                # to their first members (same nodes pattern, same links shared)
                keep = max(2, MAX_TOGETHER_RANKS // len(groups))
                cut = [g[:keep] for g in groups]
                topo, local = self.place(cut)
                if keep < len(ranks):
                    res = predict(collective, int(nbytes), topo, ranks=local[0], dtype=dtype,
                                  model=self.sim_model)
                together = time_together(collective, int(nbytes), topo, local, res,
                                         dtype=dtype)
                alone = time_together(collective, int(nbytes), topo, local[:1], res,
                                      dtype=dtype)
                if together is not None and alone:
                    # the flow model's slowdown from sharing, applied to the chosen model's
                    # time of one group (so the two models' other differences stay out)
                    out.update(time_s=out["time_s"] * max(1.0, together / alone),
                               together=len(groups))
            self._cache[shape] = out
        return self._cache[shape]


def peer_groups(lay: Layout, kind: str, ranks: tuple[int, ...], gpus_per_node: int
                ) -> list[tuple[int, ...]]:
    """The other groups of `kind` that live on exactly the nodes of `ranks`."""
    nodes = {r // gpus_per_node for r in ranks}
    if kind == "pp":  # the other sends across the same stage boundary
        stride = ranks[1] - ranks[0]
        return [(r, r + stride) for node in sorted({ranks[0] // gpus_per_node})
                for r in range(node * gpus_per_node, (node + 1) * gpus_per_node)
                if r != ranks[0] and r + stride < lay.world
                and (r + stride) // gpus_per_node in nodes]
    seen, out = {ranks}, []
    first = ranks[0] // gpus_per_node  # a group on the same nodes has a member on this one
    for r in range(first * gpus_per_node, min((first + 1) * gpus_per_node, lay.world)):
        g = group_ranks(lay, kind, r)
        if g not in seen and {x // gpus_per_node for x in g} == nodes:
            seen.add(g)
            out.append(g)
    return out


@dataclass(frozen=True)
class CommTime:
    comm: Comm
    ranks: tuple  # global ranks of the representative group
    time_s: float  # one call
    total_s: float  # per step
    algorithm: str
    protocol: str
    together: int = 1  # groups timed together (sharing links)

    def to_dict(self) -> dict:
        d = self.comm.to_dict()
        d.update(group_size=len(self.ranks), time_s=self.time_s, total_s=self.total_s,
                 algorithm=self.algorithm, protocol=self.protocol, groups_together=self.together)
        return d


@dataclass(frozen=True)
class Plan:
    """The predicted step: where its time goes, its throughput and its memory per GPU."""
    model: str
    system: str
    nic: str | None
    nodes: int
    gpus: int
    gpu: str
    layout: Layout
    step_time_s: float
    compute_time_s: float
    comm_time_s: dict  # kind -> total seconds per step
    exposed_by_kind: dict  # kind -> seconds on the critical path
    exposed_comm_s: float
    bubble_s: float
    tokens_per_s: float
    tflops_per_gpu: float  # model FLOPs (no recomputation) per second per GPU / 1e12
    hw_tflops_per_gpu: float  # executed FLOPs (with recomputation)
    mfu: float
    memory: Memory
    hbm_bytes: float
    comms: tuple = field(default=(), repr=False)

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total

    def to_dict(self) -> dict:
        lay = self.layout
        return {
            "model": self.model, "system": self.system, "nic": self.nic, "nodes": self.nodes,
            "gpus": self.gpus, "gpu": self.gpu, "mode": lay.mode,
            "layout": {k: getattr(lay, k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "sp",
                                                    "zero", "recompute", "seq", "global_batch",
                                                    "micro_batch")},
            "microbatches": lay.microbatches,
            "step_time_s": self.step_time_s, "compute_time_s": self.compute_time_s,
            "comm_time_s": dict(self.comm_time_s), "exposed_comm_by_kind_s":
                dict(self.exposed_by_kind), "exposed_comm_s": self.exposed_comm_s,
            "bubble_s": self.bubble_s, "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu, "hw_tflops_per_gpu": self.hw_tflops_per_gpu,
            "mfu": self.mfu, "memory_per_gpu_bytes": self.memory.total,
            "memory_breakdown_bytes": self.memory.to_dict(), "hbm_bytes": self.hbm_bytes,
            "compute_efficiency": COMPUTE_EFFICIENCY, "hbm_efficiency": HBM_EFFICIENCY,
            "collectives": [c.to_dict() for c in self.comms],
        }


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def check_memory(model: ModelConfig, lay: Layout, mem: Memory, gpu) -> None:
    """ConfigError if the layout does not fit, naming a nearby layout that does."""
    if mem.total <= gpu.hbm_bytes:
        return
    parts = ", ".join(f"{k} {_gb(v)}" for k, v in mem.to_dict().items() if k != "total" and v)
    fix = _fitting_variant(model, lay, gpu)
    tips = ("a larger --tp or --pp, --zero 3, --recompute full or a smaller --micro-batch"
            if lay.mode == "train" else "a larger --tp or --pp, or a smaller batch or context")
    raise ConfigError(f"{model.name} with tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp} "
                      f"ep={lay.ep} does not fit: it needs {_gb(mem.total)} per GPU ({parts}) "
                      f"but {gpu.name} has {_gb(gpu.hbm_bytes)}; "
                      + (f"{fix} would fit" if fix else f"try {tips}"))


def _fitting_variant(model: ModelConfig, lay: Layout, gpu) -> str | None:
    """The first of a few standard memory savers (same GPU count) that makes `lay` fit."""
    tries = []
    if lay.mode == "train":
        tries += [("--recompute full", dict(recompute="full")), ("--zero 3", dict(zero=3)),
                  ("--zero 3 --recompute full", dict(zero=3, recompute="full"))]
    pp, dp = lay.pp, lay.dp
    while dp % 2 == 0 and pp * 2 <= model.layers:
        pp, dp = pp * 2, dp // 2
        tries.append((f"--pp {pp} --dp {dp}", dict(pp=pp, dp=dp)))
        if lay.mode == "train":
            tries.append((f"--pp {pp} --dp {dp} --recompute full",
                          dict(pp=pp, dp=dp, recompute="full")))
    for label, change in tries:
        try:
            cand = validate(model, lay.with_(**change))
        except ConfigError:
            continue
        if memory_per_gpu(model, cand).total <= gpu.hbm_bytes:
            return label
    return None


def _stage_layers(model: ModelConfig, lay: Layout) -> list[int]:
    base, extra = divmod(model.layers, lay.pp)
    return [base + (1 if i < extra else 0) for i in range(lay.pp)]


def _group(lay: Layout, comm: Comm) -> tuple[int, ...]:
    if comm.group == "pp":
        return (0, rank_of(lay, pp=1))  # one stage boundary
    return group_ranks(lay, comm.group, 0)


def _overlapped(total: float, last: float, n: int, window: float) -> float:
    """Exposed time of n buckets of total seconds produced evenly over `window` seconds."""
    if total <= 0:
        return 0.0
    return max(last, total - window * (1 - 1 / max(n, 1)))


def plan(model, system: str, nodes: int, layout: Layout, nic: str | None = None, *,
         check_fit: bool = True, sim_model: str = "analytic", contention: bool = True,
         cluster: Cluster | None = None,
         **topology_options) -> Plan:
    """Predict one step of `model` with `layout` on `nodes` nodes of `system`.

    >>> p = plan("llama3-70b", "dgx-h100", 1, Layout(tp=8, seq=4096, global_batch=1,
    ...          mode="decode"))
    >>> 0 < p.comm_time_s["TP"] < p.compute_time_s < p.step_time_s
    True
    """
    model = get_model(model)
    cluster = cluster or make_cluster(system, nodes, nic, **topology_options)
    lay = validate(model, layout, cluster.gpus)
    gpu = cluster.gpu
    mem = memory_per_gpu(model, lay)
    if check_fit:
        check_memory(model, lay, mem, gpu)
    timer = Timer(cluster, sim_model, contention)
    timed = []
    for c in step_comms(model, lay):
        ranks = _group(lay, c)
        peers = peer_groups(lay, c.group, ranks, cluster.gpus_per_node) if contention else []
        t = timer.time(c.collective, c.nbytes, ranks, peers)
        mult = lay.microbatches if c.per == "microbatch" else 1
        timed.append(CommTime(c, ranks, t["time_s"], t["time_s"] * c.count * mult,
                              t["algorithm"], t["protocol"], t["together"]))
    step = _training_step if lay.mode == "train" else _inference_step
    return step(model, lay, cluster, mem, tuple(timed))


def _rate(gpu) -> float:
    return gpu.bf16_flops * COMPUTE_EFFICIENCY


def _training_step(model, lay, cluster, mem, timed) -> Plan:
    gpu, m, p, v = cluster.gpu, lay.microbatches, lay.pp, lay.vpp
    shard = lay.tp * lay.cp
    layer_f = layer_forward_flops(model, lay.batch, lay.seq) / shard
    head_f = logits_flops(model, lay.batch * lay.seq) / shard
    redo = 1.0 if lay.recompute == "full" else 0.0
    stage_flops = [n * layer_f * (3 + redo) + (3 * head_f if i == p - 1 else 0.0)
                   for i, n in enumerate(_stage_layers(model, lay))]
    slowest = max(range(p), key=lambda i: stage_flops[i])
    mb_compute = stage_flops[slowest] / _rate(gpu)
    fwd = mb_compute / (3 + redo) * 1  # forward share of a microbatch
    bwd = mb_compute - fwd

    per_mb = {k: 0.0 for k in KINDS}
    comm_total = {k: 0.0 for k in KINDS}
    dp_grad = dp_param = zero3 = 0.0
    dp_grad_last = dp_param_last = zero3_one = 0.0
    dp_grad_n = dp_param_n = 0
    for c in timed:
        comm_total[c.comm.kind] += c.total_s
        if c.comm.kind != "DP":
            per_mb[c.comm.kind] += c.time_s * c.comm.count
        elif c.comm.per == "microbatch":  # ZeRO-3 gathers
            zero3 += c.time_s * c.comm.count
            zero3_one = max(zero3_one, c.time_s)
        elif c.comm.collective == "all_gather":
            dp_param += c.total_s
            dp_param_n += int(c.comm.count)
            dp_param_last = max(dp_param_last, c.time_s)
        else:
            dp_grad += c.total_s
            dp_grad_n += int(c.comm.count)
            dp_grad_last = max(dp_grad_last, c.time_s)
    zero3_exposed = max(zero3_one, zero3 - mb_compute) if zero3 else 0.0
    slot = mb_compute + sum(per_mb.values()) + zero3_exposed
    bubble = (p - 1) / v * slot
    dp_exposed = (_overlapped(dp_grad, dp_grad_last, dp_grad_n, bwd)
                  + _overlapped(dp_param, dp_param_last, dp_param_n, fwd)
                  + m * zero3_exposed)
    exposed = {k: m * per_mb[k] for k in KINDS}
    exposed["DP"] = dp_exposed
    compute = m * mb_compute
    step_s = compute + sum(exposed.values()) + bubble
    model_flops, hw_flops = training_flops(model, lay.global_batch, lay.seq, lay.recompute)
    return _finish(model, lay, cluster, mem, timed, step_s, compute, comm_total, exposed, bubble,
                   lay.global_batch * lay.seq, model_flops, hw_flops)


def _experts_touched(model: ModelConfig, tokens: float) -> float:
    """Expected distinct experts `tokens` tokens route to, each picking top_k of E uniformly."""
    if not model.moe:
        return 1.0
    return model.experts * (1 - (1 - model.top_k / model.experts) ** tokens)


def _inference_step(model, lay, cluster, mem, timed) -> Plan:
    gpu = cluster.gpu
    decode = lay.mode == "decode"
    b = lay.batch
    new = b * (1 if decode else lay.seq / lay.cp)  # new tokens per GPU's shard
    shard = lay.tp * lay.cp
    flops = (layer_forward_flops(model, b, 1, lay.seq) / lay.tp if decode else
             layer_forward_flops(model, b, lay.seq) / shard)
    dense, expert = layer_params_per_gpu(model, lay)
    touched = _experts_touched(model, new * lay.ep) / model.experts if model.moe else 1.0
    weight_bytes = BF16 * (dense + expert * touched)
    kv = kv_heads_per_gpu(model, lay.tp) * model.head_dim
    kv_bytes = 2 * BF16 * kv * b * lay.seq / lay.cp  # read (decode) or written (prefill)
    hbm = gpu.hbm_bandwidth_Bps * HBM_EFFICIENCY
    layer_s = max(flops / _rate(gpu), (weight_bytes + kv_bytes) / hbm)
    head_s = max(logits_flops(model, b) / lay.tp / _rate(gpu),
                 BF16 * model.vocab * model.hidden / lay.tp / hbm)
    compute = model.layers * layer_s + head_s  # the stages run one after another
    comm_total = {k: 0.0 for k in KINDS}
    for c in timed:  # counts cover every stage: one batch visits them in turn
        comm_total[c.comm.kind] += c.total_s
    exposed = dict(comm_total)
    step_s = compute + sum(exposed.values())
    tokens = lay.global_batch * (1 if decode else lay.seq)
    fwd = (model.layers * (layer_forward_flops(model, lay.global_batch, 1, lay.seq) if decode
                           else layer_forward_flops(model, lay.global_batch, lay.seq))
           + logits_flops(model, lay.global_batch))
    return _finish(model, lay, cluster, mem, timed, step_s, compute, comm_total, exposed, 0.0,
                   tokens, fwd, fwd)


def _finish(model, lay, cluster, mem, timed, step_s, compute, comm_total, exposed, bubble,
            tokens, model_flops, hw_flops) -> Plan:
    n = cluster.gpus
    used = [k for k in KINDS if comm_total[k] > 0 or exposed[k] > 0]
    return Plan(model.name, cluster.system, cluster.nic, cluster.nodes, n, cluster.gpu.name, lay,
                step_s, compute, {k: comm_total[k] for k in used},
                {k: exposed[k] for k in used}, sum(exposed.values()), bubble,
                tokens / step_s, model_flops / step_s / n / 1e12, hw_flops / step_s / n / 1e12,
                model_flops / step_s / n / cluster.gpu.bf16_flops, mem, cluster.gpu.hbm_bytes,
                timed)
