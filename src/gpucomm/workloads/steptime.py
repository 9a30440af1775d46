"""The step-time model: kernel time from FLOPs and bytes, communication timed by the simulator
on real groups, overlapped where frameworks overlap it.

Assumptions (one value each, the same for every case):
- Kernels run at the rates of their GPU class (`compute.KERNELS`: GEMMs, FlashAttention, and
  HBM-bound elementwise kernels). Decode (and any pass with little arithmetic per byte) is
  bounded by HBM: a layer takes max(kernel time, bytes read / (HBM bandwidth * efficiency)).
- Every collective runs on the representative group of rank 0 (TP inside a node, DP one GPU
  per node along a rail, ...), timed by `gpucomm.simulate.predict` on the cluster's topology.
  Groups of one kind run their collective at the same moment; those on the same nodes (e.g.
  the 8 DP groups of a DGX, which share its NICs) are timed together by the flow model, and
  the slowdown sharing causes is applied to the group's time (see Timer).
- Training uses 1F1B: the step is (m + (p-1)/v) microbatch slots of forward + backward +
  exposed per-microbatch communication, for m microbatches, p stages and v interleaved chunks.
- What is exposed depends on the layout's overlap switches (`OVERLAPS`, each with its
  source): DP/FSDP buckets behind backward/forward, TP collectives behind their GEMMs, ring
  attention's sends behind attention, pipeline sends off the steady state, EP all-to-alls
  behind another microbatch's compute. The framework (`frameworks`) sets their defaults and
  how much of the TP traffic its TP overlap hides.
- Inference keeps one batch in flight: stages run one after another, all communication exposed.
- The optimizer step is an HBM-bound pass over the GPU's optimizer shard; data loading and
  the vocab-parallel loss's small collectives are not timed.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from ..limits import check_model_ranks
from ..topology.build import PORT_LEVEL
from ..simulate.concurrent import (check_other_job, job_within, other_job_groups,
                                   time_together)
from .comms import Comm, step_comms
from .frameworks import fp8_recipe, get_framework
from .compute import (BF16, HBM_EFFICIENCY, OPTIMIZER_BYTES, Kernels, Memory,
                      activation_bytes_per_token, gemm_peak,
                      kernels, kv_cache_bytes_per_token, layer_forward_flops, layer_params_per_gpu,
                      layer_times, logits_flops, memory_per_gpu, stage_params_per_gpu,
                      training_flops)
from .layout import KINDS, Layout, coords, group_ranks, rank_of, stage_layers, validate
from .models import ModelConfig, get_model

# A layout whose estimate exceeds HBM by at most this fraction is predicted with a warning
# (the estimate leaves out allocator fragmentation, NCCL buffers and the CUDA context, and
# rounds the framework's own savings, so a few percent either way is within its accuracy);
# beyond it the layout is refused with a variant that fits.
MEMORY_TOLERANCE = 0.05

OVERLAPS = {
    "dp_overlap": "DP/FSDP reduce-scatter and all-gather bucket by bucket behind backward and "
                  "forward (Megatron-core DDP --overlap-grad-reduce/--overlap-param-gather; "
                  "PyTorch FSDP prefetch)",
    "tp_overlap": "TP all-gather/reduce-scatter split into chunks hidden behind the GEMMs "
                  "(Megatron-LM --tp-comm-overlap with Transformer Engine userbuffers; "
                  "PyTorch AsyncTP)",
    "cp_overlap": "ring attention: the next K,V chunk travels while attention runs on the "
                  "current one (Liu et al. 2023; Megatron-core context parallelism, p2p)",
    "pp_overlap": "pipeline sends asynchronous, off the steady-state path (Megatron-core "
                  "--overlap-p2p-communication; Llama 3 paper sec. 3.3.2)",
    "ep_overlap": "MoE dispatch/combine all-to-alls of one microbatch run during another's "
                  "compute (DeepSeek-V3 report sec. 3.2.1 DualPipe; Megatron-core "
                  "--overlap-moe-expert-parallel-comm, 1F1B all-to-all overlap)",
}


@dataclass(frozen=True)
class Cluster:
    """A system preset at a node count, with the GPU it carries."""
    system: str
    nodes: int
    nic: str | None
    gpus_per_node: int
    gpu: object  # gpucomm.hardware GPU
    options: tuple = ()
    # the collectives Timer has timed on this cluster: (sim model, contention, serving) ->
    # {group shape: timing}; `timings.clear()` forgets them
    timings: dict = field(default_factory=dict, init=False, repr=False, compare=False,
                          hash=False)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@functools.lru_cache(maxsize=64)
def _topology(system: str, nodes: int, nic, options: tuple):
    """`nodes` copies of a preset, or of the one-node topology YAML `system` names; a
    calibration profile among the options builds a new Topology from it."""
    from ..topology import Topology, build_topology
    opts = dict(options)
    fitted = opts.pop("profile", None)
    other = opts.pop("other_job", 0)  # a second job's nodes follow the job's (Timer)
    nodes += other if nodes > 1 else 0
    if system.endswith((".yaml", ".yml")):
        node = Topology.load(system)
        if len({d.node for d in node.devices}) != 1:
            raise ConfigError(f"plan --topology {system}: give one node's description (the "
                              f"file holds {node.nodes} nodes); --nodes sets how many")
        topo = build_topology(nodes=nodes, nic=nic, node_topology=node, **opts)
    else:
        topo = build_topology(system, nodes=nodes, nic=nic, **opts)
    if fitted:
        from ..topology.profile import apply_profile
        topo = apply_profile(topo, dict(fitted))
    return topo


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
# on the whole cluster (Timer.whole) the job's groups of a kind are timed together by the
# analytic model, which splits each link evenly among a step's ops (on contended rings it
# gives the flow model's answer, tests/test_fabric_scale.py): up to this many ranks in all
WHOLE_TOGETHER_RANKS = 2048
# Large reduce-scatters and all-gathers across nodes are timed as NCCL runs them: ring with
# the Simple protocol (NCCL's only algorithm for them besides NVLS and, for small sizes, PAT;
# its tuner picks Simple above a few MB). One candidate instead of every registered one keeps
# a 16K-GPU --search to seconds.
RING_ONLY = ("reduce_scatter", "all_gather")
RING_ONLY_BYTES = 8 << 20
# Serving frameworks all-reduce small TP messages with their own one-shot/two-shot kernels
# where GPUs reach each other's memory (vLLM custom_all_reduce, TensorRT-LLM's ONESHOT/TWOSHOT
# strategies) and fall back to NCCL otherwise; training frameworks (Megatron) use NCCL.
SERVING_ALL_REDUCE = ("one_shot", "two_shot")
RING_CUT = 32  # longer rings are timed on their first 16 and 32 members and extrapolated


class Timer:
    """Times collectives on groups of global ranks, with a cache.

    On a cluster with a fabric model (a leaf layout, routing, other jobs' load: a `network`
    among the options, or a port-level fabric) a group runs on the cluster itself, on the
    nodes its ranks occupy: the leaves they sit on under the job's placement decide whether
    it crosses the spines, where it is hashed, rerouted around failed cables and meets other
    jobs' load as `gpucomm sim` does. Otherwise a group spanning k nodes is placed on a
    k-node topology of the same system, each member keeping its GPU index inside its node
    (so a DP group stays on one rail): the links a group uses are the same as on the full
    cluster as long as the fabric is non-blocking.
    With `contention`, the peers of the group (the groups of the same kind on the same nodes,
    which run the same collective at the same moment) are timed together with it by the
    simulator's flow model (see `simulate.concurrent`); the slowdown over the group alone
    (same model) scales the group's time. Above MAX_TOGETHER_RANKS ranks in all, the slowdown
    is measured on every group cut to its first members, which cross the same kind of links.
    """

    def __init__(self, cluster: Cluster, sim_model: str = "analytic", contention: bool = True,
                 serving: bool = False):  # noqa: D107
        self.cluster, self.sim_model, self.contention = cluster, sim_model, contention
        self.serving = serving
        self._cache = cluster.timings.setdefault((sim_model, contention, serving), {})
        opts = dict(cluster.options)
        self.whole = opts.get("network") is not None or opts.get("fabric") in PORT_LEVEL
        self.other_job = check_other_job(opts.get("other_job", 0), self.whole, contention)

    def place(self, groups: Sequence[Sequence[int]]):
        """(topology, the groups' ranks on it): the cluster itself where its fabric is
        modelled (`whole`), else a copy of the nodes the groups span."""
        if self.whole:
            return _topology(self.cluster.system, self.cluster.nodes, self.cluster.nic,
                             self.cluster.options), [list(g) for g in groups]
        gpn = self.cluster.gpus_per_node
        nodes = sorted({r // gpn for g in groups for r in g})
        index = {n: i for i, n in enumerate(nodes)}
        local = [[index[r // gpn] * gpn + r % gpn for r in g] for g in groups]
        return _topology(self.cluster.system, len(nodes), self.cluster.nic,
                         self.cluster.options), local

    def time(self, collective: str, nbytes: int, ranks: tuple[int, ...],
             peers: Sequence[tuple[int, ...]] = ()) -> dict:
        if len(ranks) < 2 or nbytes <= 0:
            return {"time_s": 0.0, "algorithm": "-", "protocol": "-", "together": 1}
        gpn = self.cluster.gpus_per_node
        if collective in RING_ONLY and nbytes >= RING_ONLY_BYTES \
                and len({r // gpn for r in ranks}) > 1:
            return self._ring(collective, nbytes, ranks, peers)
        return self._time(collective, nbytes, ranks, peers)

    def _ring(self, collective: str, nbytes: int, ranks: tuple,
              peers: Sequence[tuple[int, ...]]) -> dict:
        """A large ring across nodes. At a fixed block per rank its time is linear in its
        steps, so a ring longer than RING_CUT is timed on its first RING_CUT/2 and RING_CUT
        members (and its peers cut alike: the same nodes pattern) and extrapolated, without
        building a topology of hundreds of nodes."""
        n = len(ranks)
        if n <= RING_CUT:
            return self._time(collective, nbytes, ranks, peers)
        block = nbytes / n
        ks = (RING_CUT // 2, RING_CUT)
        t = [self._time(collective, int(block * k), ranks[:k], [g[:k] for g in peers])
             for k in ks]
        per_step = (t[1]["time_s"] - t[0]["time_s"]) / (ks[1] - ks[0])
        return {**t[1], "time_s": t[1]["time_s"] + per_step * (n - ks[1])}

    def _time(self, collective: str, nbytes: int, ranks: tuple[int, ...],
              peers: Sequence[tuple[int, ...]] = ()) -> dict:
        gpn = self.cluster.gpus_per_node
        base = 0 if self.whole else ranks[0] // gpn * gpn  # where nodes differ, no shift
        shape = (collective, int(nbytes), tuple(tuple(r - base for r in g)
                                                for g in (ranks, *peers)))
        if shape not in self._cache:
            from ..simulate import predict
            topo, local = self.place([ranks])
            dtype = "bfloat16" if nbytes % 2 == 0 else "int8"
            pick: dict[str, Any] = {}
            if collective in RING_ONLY and nbytes >= RING_ONLY_BYTES \
                    and len({r // gpn for r in ranks}) > 1:
                pick = {"algorithm": "ring", "protocol": "simple"}
            elif self.serving and collective == "all_reduce":
                pick = {"also": SERVING_ALL_REDUCE}
            res = predict(collective, int(nbytes), topo, ranks=local[0], dtype=dtype,
                          model=self.sim_model, **pick)
            out: dict[str, Any] = {"time_s": float(res.time_s), "algorithm": res.algorithm,
                   "protocol": res.protocol, "together": 1}
            groups = [ranks, *peers]
            # bandwidth-bound sizes: sharing slows a pattern by a size-independent ratio,
            # measured once per (collective, groups, algorithm, protocol)
            big = nbytes >= RING_ONLY_BYTES
            skey = ("slowdown", collective, shape[2], res.algorithm, res.protocol)
            if self.contention and len(groups) > 1 and big and skey in self._cache:
                out.update(time_s=out["time_s"] * self._cache[skey], together=len(groups),
                           second=self._cache.get(("second", *skey), 1.0))
            elif self.contention and len(groups) > 1:
                # too many ranks to simulate at once: measure the slowdown on the groups cut
                # to their first members (same nodes pattern, same links shared)
                limit, model = (WHOLE_TOGETHER_RANKS, "analytic") if self.whole else \
                    (MAX_TOGETHER_RANKS, "flow")
                keep = max(2, limit // len(groups))
                cut = [g[:keep] for g in groups]
                topo, local = self.place(cut)
                if keep < len(ranks):
                    res = predict(collective, int(nbytes), topo, ranks=local[0], dtype=dtype,
                                  model=self.sim_model, **pick)
                if self.other_job:
                    together, second = self._with_second(collective, int(nbytes), topo, local,
                                                         res, dtype, model)
                else:
                    together, second = time_together(collective, int(nbytes), topo, local, res,
                                                     dtype=dtype, model=model), 1.0
                alone = time_together(collective, int(nbytes), topo, local[:1], res,
                                      dtype=dtype, model=model)
                if together is not None and alone:
                    # the flow model's slowdown from sharing, applied to the chosen model's
                    # time of one group (so the two models' other differences stay out)
                    slow = max(1.0, together / alone)
                    out.update(time_s=out["time_s"] * slow, together=len(groups),
                               second=second)
                    if big:
                        self._cache[skey] = slow
                        self._cache[("second", *skey)] = second
            self._cache[shape] = out
        return self._cache[shape]

    def _with_second(self, collective, nbytes, topo, local, res, dtype, model):
        """The job's own time with its groups and the second job's side by side (job_within:
        its trees at their own pace, or a schedule's union less the second job's own
        slowness; None where they cannot be timed together), and how much slower that is
        than the job's groups alone on this cluster."""
        kw = {"dtype": dtype, "model": model}
        first = self.cluster.nodes * self.cluster.gpus_per_node  # the second job's ranks follow
        own = [g for g in local if min(g) < first]
        second = [g for g in local if min(g) >= first]
        if not second:
            return time_together(collective, nbytes, topo, local, res, **kw), 1.0
        job = time_together(collective, nbytes, topo, own, res, **kw)
        mine = job_within(collective, nbytes, topo, own, second, res, alone=job, **kw)
        if mine is None:
            return None, 1.0
        return mine, max(mine / job, 1.0) if job else 1.0


def peer_groups(lay: Layout, kind: str, ranks: tuple[int, ...], gpus_per_node: int
                ) -> list[tuple[int, ...]]:
    """The other groups of `kind` that live on exactly the nodes of `ranks`."""
    nodes = {r // gpus_per_node for r in ranks}
    if kind == "pp":  # the other sends across the same stage boundary: from the ranks of
        # the sender's stage on its node to their partners (disjoint pairs, even when a
        # node holds several stages)
        stride = ranks[1] - ranks[0]
        node = ranks[0] // gpus_per_node
        stage = coords(lay, ranks[0])["pp"]
        return [(r, r + stride)
                for r in range(node * gpus_per_node, (node + 1) * gpus_per_node)
                if r != ranks[0] and r + stride < lay.world
                and coords(lay, r)["pp"] == stage and (r + stride) // gpus_per_node in nodes]
    seen, out = {ranks}, []
    first = ranks[0] // gpus_per_node  # a group on the same nodes has a member on this one
    for r in range(first * gpus_per_node, min((first + 1) * gpus_per_node, lay.world)):
        g = group_of(lay, kind, r, gpus_per_node)
        if g not in seen and {x // gpus_per_node for x in g} == nodes:
            seen.add(g)
            out.append(g)
    return out


def job_peers(lay: Layout, kind: str, ranks: tuple[int, ...], gpus_per_node: int
              ) -> list[tuple[int, ...]]:
    """The groups of `kind` anywhere in the job that run their collective with `ranks` and
    may share its fabric links: on a cluster whose leaves are modelled (Timer.whole), every
    other group of the kind that leaves its nodes (all DP groups reduce their gradients at
    the end of backward; in 1F1B every stage boundary sends at once), disjoint from each
    other. A group inside one node meets no fabric: its peers are those on its node."""
    if len({r // gpus_per_node for r in ranks}) < 2 or kind == "ep_intra":
        return peer_groups(lay, kind, ranks, gpus_per_node)
    if kind == "pp":  # one boundary's pairs (a rank sends and receives on other boundaries)
        stride = ranks[1] - ranks[0]
        stage = coords(lay, ranks[0])["pp"]
        return [(r, r + stride) for r in range(lay.world) if r != ranks[0]
                and r + stride < lay.world and coords(lay, r)["pp"] == stage]
    seen, out = {ranks}, []
    for r in range(lay.world):
        g = group_of(lay, kind, r, gpus_per_node)
        if g not in seen and len({x // gpus_per_node for x in g}) > 1:
            seen.add(g)
            out.append(g)
    return out


def group_of(lay: Layout, kind: str, rank: int, gpus_per_node: int) -> tuple[int, ...]:
    """`rank`'s group of a layout kind, or of an EP part: "ep_intra" (its EP peers on its
    node) and "ep_inter" (its EP peers with its GPU index on the other nodes)."""
    if kind == "pp":
        return (rank, rank + rank_of(lay, pp=1))
    if kind in ("ep_intra", "ep_inter"):
        ep = group_ranks(lay, "ep", rank)
        if kind == "ep_intra":
            return tuple(r for r in ep if r // gpus_per_node == rank // gpus_per_node)
        return tuple(r for r in ep if r % gpus_per_node == rank % gpus_per_node)
    return group_ranks(lay, kind, rank)


@dataclass(frozen=True)
class CommTime:
    comm: Comm
    ranks: tuple  # global ranks of the representative group
    time_s: float  # one call
    total_s: float  # per step
    algorithm: str
    protocol: str
    together: int = 1  # groups timed together (sharing links)
    second_job: float = 1.0  # how much a second job (--other-job) slows it on this cluster

    def to_dict(self) -> dict:
        d = self.comm.to_dict()
        d.update(group_size=len(self.ranks), time_s=self.time_s, total_s=self.total_s,
                 algorithm=self.algorithm, protocol=self.protocol, groups_together=self.together,
                 second_job_slowdown=self.second_job)
        return d




@dataclass(frozen=True, kw_only=True)
class PredictedStep:
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
    mfu: float  # model FLOP/s over the GPU's dense peak in the precision that ran
    memory: Memory
    hbm_bytes: float
    comms: tuple = field(default=(), repr=False)
    optimizer_s: float = 0.0
    warnings: tuple = ()
    ep_split: dict = field(default_factory=dict)  # EP part ("intra"/"inter") -> s per step
    kernels: Kernels | None = None  # the GPU class's kernel efficiencies
    causal_tflops_per_gpu: float = 0.0  # model FLOPs counting the causal half of attention

    @property
    def ep_exposed_share(self) -> float | None:
        """Share of the EP all-to-all time left on the critical path (None without EP)."""
        total = self.comm_time_s.get("EP", 0.0)
        return self.exposed_by_kind.get("EP", 0.0) / total if total else None

    @property
    def second_job_by_kind(self) -> dict:
        """Per kind slowed by a second job (--other-job): its total per step with the second
        job over without it, on the same cluster."""
        out = {}
        for kind in {c.comm.kind for c in self.comms}:
            mine = [c for c in self.comms if c.comm.kind == kind]
            alone = sum(c.total_s / c.second_job for c in mine)
            if alone > 0 and any(c.second_job > 1.0 for c in mine):
                out[kind] = sum(c.total_s for c in mine) / alone
        return out

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total

    def overlaps(self) -> list[dict]:
        """The overlap switches of a training step, each with its setting and source."""
        if self.layout.mode != "train":
            return []
        return [{"switch": k, "on": bool(getattr(self.layout, k)), "source": v}
                for k, v in OVERLAPS.items()]

    def to_dict(self) -> dict:
        lay, kern = self.layout, self.kernels
        return {
            "model": self.model, "system": self.system, "nic": self.nic, "nodes": self.nodes,
            "gpus": self.gpus, "gpu": self.gpu, "mode": lay.mode,
            "layout": {k: getattr(lay, k) for k in (
                "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "zero", "recompute", "seq",
                "global_batch", "micro_batch", "flash", "precision", "balanced_ends",
                "dp_overlap", "tp_overlap", "cp_overlap", "pp_overlap", "ep_overlap",
                "moe_imbalance", "framework", "recompute_modules", "fp8_activations",
                "offload_activations", "offload_optimizer", "full_cuda_graph")},
            "microbatches": lay.microbatches,
            "step_time_s": self.step_time_s, "compute_time_s": self.compute_time_s,
            "optimizer_time_s": self.optimizer_s,
            "comm_time_s": dict(self.comm_time_s), "exposed_comm_by_kind_s":
                dict(self.exposed_by_kind), "exposed_comm_s": self.exposed_comm_s,
            "ep_all_to_all_s": dict(self.ep_split),
            "ep_exposed_share": self.ep_exposed_share,
            "second_job_slowdown_by_kind": self.second_job_by_kind,
            "bubble_s": self.bubble_s, "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu, "hw_tflops_per_gpu": self.hw_tflops_per_gpu,
            "causal_tflops_per_gpu": self.causal_tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_basis": f"model FLOPs / dense {'fp8' if lay.fp8 else 'bf16'} peak",
            "memory_per_gpu_bytes": self.memory.total,
            "memory_breakdown_bytes": self.memory.to_dict(), "hbm_bytes": self.hbm_bytes,
            "warnings": list(self.warnings), "overlaps": self.overlaps(),
            "kernels": {"gemm_efficiency": kern.gemm, "attention_efficiency": kern.attention,
                        "hbm_efficiency": HBM_EFFICIENCY, "source": kern.source}
            if kern is not None else {},
            "collectives": [c.to_dict() for c in self.comms],
        }


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def check_memory(model: ModelConfig, lay: Layout, mem: Memory, gpu,
                 gpus_per_node: int = 8) -> tuple[str, ...]:
    """Warnings for a layout within MEMORY_TOLERANCE over HBM; ConfigError (naming a nearby
    layout that fits, on these GPUs or on more nodes) for one clearly over."""
    cap = gpu.hbm_bytes
    if mem.total <= cap:
        return ()
    over = mem.total - cap
    if over <= MEMORY_TOLERANCE * cap:
        return (f"memory: the estimate {_gb(mem.total)} per GPU is {_gb(over)} "
                f"({over / cap:.1%}) over the {_gb(cap)} of {gpu.name}, within the "
                f"estimate's {MEMORY_TOLERANCE:.0%} accuracy: it may not fit",)
    parts = ", ".join(f"{k} {_gb(v)}" for k, v in mem.to_dict().items() if k != "total" and v)
    fix = fitting_variant(model, lay, gpu)
    if fix:
        advice = f"{fix} would fit"
    else:
        more = larger_fitting(model, lay, gpu, gpus_per_node)
        advice = (f"no layout of these {lay.world} GPUs fits; {more} would fit" if more else
                  "try a larger --tp, --pp or --ep, more nodes"
                  + (", --zero 3, --recompute full" if lay.mode == "train" else
                     ", a smaller batch or context"))
    raise ConfigError(f"{model.name} with tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp} "
                      f"ep={lay.ep} vpp={lay.vpp} does not fit: it needs {_gb(mem.total)} per "
                      f"GPU ({parts}), {over / cap:.0%} over the {_gb(cap)} of {gpu.name}; "
                      + advice)


def _fits(model: ModelConfig, lay: Layout, gpu, **change) -> bool:
    try:
        cand = validate(model, lay.with_(**change))
    except ConfigError:
        return False
    return memory_per_gpu(model, cand).total <= gpu.hbm_bytes


def fitting_variant(model: ModelConfig, lay: Layout, gpu) -> str | None:
    """The first of a few standard memory savers (same GPU count) that makes `lay` fit,
    cheapest first: ZeRO-2 (no extra traffic), selective recomputation, less interleaving,
    ZeRO-3, a smaller micro-batch, full recomputation, then deeper pipelines."""
    tries: list[tuple[str, dict[str, Any]]] = []
    if lay.mode == "train":
        if lay.zero < 2:
            tries.append(("--zero 2", dict(zero=2)))
        if lay.recompute == "none" and not lay.flash:
            tries.append(("--recompute selective", dict(recompute="selective")))
        if lay.vpp > 1:
            tries.append(("--vpp 1", dict(vpp=1)))
        if lay.zero < 3:
            tries.append(("--zero 3", dict(zero=3)))
        if lay.micro_batch > 1:
            tries.append(("--micro-batch 1", dict(micro_batch=1)))
        if lay.recompute != "full":
            tries.append(("--recompute full", dict(recompute="full")))
            tries.append(("--zero 3 --recompute full", dict(zero=3, recompute="full")))
    pp, dp = lay.pp, lay.dp
    while dp % 2 == 0 and pp * 2 <= model.layers:
        pp, dp = pp * 2, dp // 2
        tries.append((f"--pp {pp} --dp {dp}", dict(pp=pp, dp=dp)))
        if lay.mode == "train":
            tries.append((f"--pp {pp} --dp {dp} --recompute full",
                          dict(pp=pp, dp=dp, recompute="full")))
    return next((label for label, change in tries if _fits(model, lay, gpu, **change)), None)


def larger_fitting(model: ModelConfig, lay: Layout, gpu, gpus_per_node: int) -> str | None:
    """The smallest cluster (in whole nodes, up to 64 times the GPUs) on which `lay`, with a
    deeper pipeline and the standard savers, fits: "--nodes N --pp P ..." ."""
    savers: list[tuple[str, dict[str, Any]]] = [("", {})]
    if lay.mode == "train":
        savers += [(" --zero 3", dict(zero=3)), (" --recompute full", dict(recompute="full")),
                   (" --zero 3 --recompute full", dict(zero=3, recompute="full"))]
    for scale in (2, 4, 8, 16, 32, 64):
        world = lay.world * scale
        if world % gpus_per_node:
            continue
        for pp in sorted({lay.pp * k for k in (1, 2, 4, 8, 16, 32, 64)}):
            if pp > model.layers or world % (lay.tp * pp * lay.cp):
                continue
            dp = world // (lay.tp * pp * lay.cp)
            batch = max(lay.global_batch, dp * (lay.micro_batch if lay.mode == "train"
                                                else 1))
            batch -= batch % dp
            for label, change in savers:
                if _fits(model, lay, gpu, pp=pp, dp=dp, global_batch=batch, **change):
                    return (f"--nodes {world // gpus_per_node} --tp {lay.tp} --pp {pp}"
                            + (f" --cp {lay.cp}" if lay.cp > 1 else "")
                            + (f" --ep {lay.ep}" if lay.ep > 1 else "")
                            + (f" --etp {lay.etp}" if lay.etp else "") + label)
    return None


def _overlapped(total: float, last: float, n: int, window: float) -> float:
    """Exposed time of n buckets of total seconds produced evenly over `window` seconds."""
    if total <= 0:
        return 0.0
    return max(last, total - window * (1 - 1 / max(n, 1)))


def _hidden(total: float, first: float, window: float) -> float:
    """Exposed time of communication pipelined behind `window` seconds of compute: the first
    piece cannot hide, the rest hides up to the window."""
    if total <= 0:
        return 0.0
    return first + max(0.0, total - first - window)


def plan(model, system: str, nodes: int, layout: Layout, nic: str | None = None, *,
         check_fit: bool = True, sim_model: str = "analytic", contention: bool = True,
         cluster: Cluster | None = None,
         **topology_options) -> PredictedStep:
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
    fp8_recipe(lay.precision, lay.framework, gpu)  # refuses a recipe the GPU has no path for
    mem = memory_per_gpu(model, lay)
    warnings = check_memory(model, lay, mem, gpu, cluster.gpus_per_node) if check_fit else ()
    timed = time_comms(model, lay, cluster, sim_model, contention)
    step = _training_step if lay.mode == "train" else _inference_step
    return replace(step(model, lay, cluster, mem, timed), warnings=warnings)


def time_comms(model, lay, cluster, sim_model="analytic", contention=True) -> tuple:
    """Every collective of the step, timed on its representative group."""
    timer = Timer(cluster, sim_model, contention, serving=lay.mode != "train")
    gpn = cluster.gpus_per_node
    timed = []
    for c in step_comms(model, lay, gpn):
        ranks = group_of(lay, c.group, 0, gpn)
        peers = [] if not contention else job_peers(lay, c.group, ranks, gpn) \
            if timer.whole else peer_groups(lay, c.group, ranks, gpn)
        if timer.other_job:
            peers = [*peers, *other_job_groups(ranks, cluster.nodes, timer.other_job, gpn)]
        t = timer.time(c.collective, c.nbytes, ranks, peers)
        mult = lay.microbatches if c.per == "microbatch" else 1
        timed.append(CommTime(c, ranks, t["time_s"], t["time_s"] * c.count * mult,
                              t["algorithm"], t["protocol"], t["together"],
                              t.get("second", 1.0)))
    return tuple(timed)


def _pcie_Bps(gpu) -> float:
    from ..hardware import get_link_tech
    return get_link_tech(gpu.pcie).achievable_Bps


def offload_exposed(model: ModelConfig, lay: Layout, gpu, layers: int, window: float) -> float:
    """Per microbatch: the time activations offloaded to host memory (out after forward, back
    before backward, over the GPU's PCIe link) take beyond the compute they overlap."""
    if not lay.offload_activations:
        return 0.0
    tokens = lay.batch * lay.seq / lay.cp
    sp = lay.tp if lay.sequence_parallel else 1
    keep = BF16 * model.hidden / sp if lay.recompute == "full" \
        else activation_bytes_per_token(model, lay)
    return max(0.0, 2 * layers * keep * tokens / _pcie_Bps(gpu) - window)


HOST_ADAM_BYTES = 4 + 2 * OPTIMIZER_BYTES  # fp32 gradient read, master + moments read/written


def optimizer_time(model: ModelConfig, lay: Layout, gpu) -> float:
    """Adam over this GPU's optimizer shard: reads bf16 grads... and fp32 state, writes state
    and bf16 weights (HBM-bound). Offloaded: gradients down and weights up over PCIe, Adam on
    the host at its memory bandwidth (the catalog's DDR5, shared by the GPUs of a socket)."""
    dense, expert = stage_params_per_gpu(model, lay)
    shard = dense / lay.shard_dp + expert / lay.expert_dp if lay.zero >= 1 \
        else dense + expert
    if lay.offload_optimizer:
        from ..hardware import get_link_tech
        host = get_link_tech("ddr5-4800").achievable_Bps / 4  # 4 GPUs per socket (DGX)
        return shard * (4 / _pcie_Bps(gpu) + HOST_ADAM_BYTES / host)
    nbytes = shard * (4 + 2 * OPTIMIZER_BYTES + 2)
    return nbytes / (gpu.hbm_bandwidth_Bps * HBM_EFFICIENCY)


def _training_step(model, lay, cluster, mem, timed) -> PredictedStep:
    gpu, m, p, v = cluster.gpu, lay.microbatches, lay.pp, lay.vpp
    lt = layer_times(model, lay, gpu, lay.batch, lay.seq)
    per_layer = lt.microbatch_s(lay.recompute)
    head_s = logits_flops(model, lay.batch * lay.seq) / (lay.tp * lay.cp) \
        / (gpu.bf16_flops * kernels(gpu, lay.framework).gemm)  # the output layer stays bf16
    layers = stage_layers(model, lay)
    stage_s = [n * per_layer + (3 * head_s if i == p - 1 else 0.0)
               for i, n in enumerate(layers)]
    slowest = max(range(p), key=lambda i: stage_s[i])
    n = layers[slowest]
    mb_compute = stage_s[slowest]
    mb_fwd = n * lt.forward_s
    mb_bwd = mb_compute - mb_fwd

    per_mb = {k: 0.0 for k in KINDS}
    first = {k: 0.0 for k in KINDS}
    comm_total = {k: 0.0 for k in KINDS}
    ep_split: dict[str, float] = {}
    dp_grad = dp_param = zero3 = 0.0
    dp_grad_last = dp_param_last = zero3_one = 0.0
    dp_grad_n = dp_param_n = 0
    for c in timed:
        comm_total[c.comm.kind] += c.total_s
        if c.comm.kind == "EP":
            part = c.comm.group.split("_")[-1]
            ep_split[part] = ep_split.get(part, 0.0) + c.total_s
        if c.comm.kind != "DP":
            per_mb[c.comm.kind] += c.time_s * c.comm.count
            first[c.comm.kind] = max(first[c.comm.kind], c.time_s)
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
    exposed_mb = dict(per_mb)
    redo_full = 1 if lay.recompute == "full" else 0
    if lay.tp_overlap and per_mb["TP"]:  # each collective in tp chunks behind its GEMM,
        # as far as the framework's implementation hides them
        window = n * lt.gemm_s * (3 + redo_full)
        share = get_framework(lay.framework).tp_overlap_hidden
        exposed_mb["TP"] = (1 - share) * per_mb["TP"] \
            + share * _hidden(per_mb["TP"], per_mb["TP"] / lay.tp, window)
    if lay.ep_overlap and per_mb["EP"]:  # another microbatch's compute runs during the
        # all-to-alls (DualPipe; 1F1B all-to-all overlap): one exchange stays exposed
        exposed_mb["EP"] = _hidden(per_mb["EP"], first["EP"], mb_compute - first["EP"])
    if lay.cp_overlap and per_mb["CP"]:  # cp-1 ring steps, each behind one attention block
        window = n * lt.attention_s * (1 + lt.attention_bwd_factor + redo_full)
        exposed_mb["CP"] = _hidden(per_mb["CP"], per_mb["CP"] / max(lay.cp - 1, 1), window)
    pp_chain = 0.0
    if lay.pp_overlap and per_mb["PP"]:  # only the warm-up/cool-down chain waits on sends
        pp_chain = 2 * (p - 1) * first["PP"]
        exposed_mb["PP"] = 0.0
    zero3_exposed = (max(zero3_one, zero3 - mb_compute) if lay.dp_overlap else zero3) \
        if zero3 else 0.0
    slot = mb_compute + sum(exposed_mb.values()) + zero3_exposed \
        + offload_exposed(model, lay, gpu, n, mb_compute)
    bubble = (p - 1) / v * slot + pp_chain
    if lay.dp_overlap:
        dp_exposed = (_overlapped(dp_grad, dp_grad_last, dp_grad_n, mb_bwd)
                      + _overlapped(dp_param, dp_param_last, dp_param_n, mb_fwd))
    else:
        dp_exposed = dp_grad + dp_param
    exposed = {k: m * exposed_mb[k] for k in KINDS}
    exposed["PP"] += pp_chain
    bubble -= pp_chain
    exposed["DP"] = dp_exposed + m * zero3_exposed
    compute = m * mb_compute
    opt_s = optimizer_time(model, lay, gpu)
    step_s = compute + sum(exposed.values()) + bubble + opt_s
    model_flops, hw_flops = training_flops(model, lay.global_batch, lay.seq, lay.recompute)
    causal = training_flops(model, lay.global_batch, lay.seq, causal=True)[0]
    return replace(_finish(model, lay, cluster, mem, timed, step_s, compute, comm_total,
                           exposed, bubble, lay.global_batch * lay.seq, model_flops, hw_flops,
                           opt_s, ep_split),
                   causal_tflops_per_gpu=causal / step_s / cluster.gpus / 1e12)


def compute_bound(model: ModelConfig, lay: Layout, cluster: Cluster, mem: Memory) -> PredictedStep:
    """The step with every collective free: a lower bound of `plan`'s step (no simulator)."""
    step = _training_step if lay.mode == "train" else _inference_step
    return step(model, lay, cluster, mem, ())


def _experts_touched(model: ModelConfig, tokens: float) -> float:
    """Expected distinct experts `tokens` tokens route to, each picking top_k of E uniformly."""
    if not model.moe:
        return 1.0
    return model.experts * (1 - (1 - model.top_k / model.experts) ** tokens)


def _inference_step(model, lay, cluster, mem, timed) -> PredictedStep:
    gpu = cluster.gpu
    decode = lay.mode == "decode"
    b = lay.batch
    new = b * (1 if decode else lay.seq / lay.cp)  # new tokens per GPU's shard
    lt = layer_times(model, lay, gpu, b, 1 if decode else lay.seq, lay.seq)
    dense, expert = layer_params_per_gpu(model, lay)
    touched = _experts_touched(model, new * lay.ep) / model.experts if model.moe else 1.0
    weight_bytes = BF16 * (dense + expert * touched)
    kv_bytes = kv_cache_bytes_per_token(model, lay) * b * lay.seq / lay.cp
    hbm = gpu.hbm_bandwidth_Bps * HBM_EFFICIENCY
    layer_s = max(lt.forward_s, (weight_bytes + kv_bytes) / hbm)
    rate = gpu.bf16_flops * kernels(gpu, lay.framework).gemm  # the output layer stays bf16
    head_s = max(logits_flops(model, b) / lay.tp / rate,
                 BF16 * model.vocab * model.hidden / lay.tp / hbm)
    compute = model.layers * layer_s + head_s  # the stages run one after another
    comm_total = {k: 0.0 for k in KINDS}
    ep_split: dict[str, float] = {}
    for c in timed:  # counts cover every stage: one batch visits them in turn
        comm_total[c.comm.kind] += c.total_s
        if c.comm.kind == "EP":
            part = c.comm.group.split("_")[-1]
            ep_split[part] = ep_split.get(part, 0.0) + c.total_s
    exposed = dict(comm_total)
    step_s = compute + sum(exposed.values())
    tokens = lay.global_batch * (1 if decode else lay.seq)
    fwd = (model.layers * (layer_forward_flops(model, lay.global_batch, 1, lay.seq) if decode
                           else layer_forward_flops(model, lay.global_batch, lay.seq))
           + logits_flops(model, lay.global_batch))
    return _finish(model, lay, cluster, mem, timed, step_s, compute, comm_total, exposed, 0.0,
                   tokens, fwd, fwd, 0.0, ep_split)


def _finish(model, lay, cluster, mem, timed, step_s, compute, comm_total, exposed, bubble,
            tokens, model_flops, hw_flops, opt_s, ep_split) -> PredictedStep:
    n = cluster.gpus
    used = [k for k in KINDS if comm_total[k] > 0 or exposed[k] > 0]
    return PredictedStep(
        model=model.name, system=cluster.system, nic=cluster.nic, nodes=cluster.nodes, gpus=n,
        gpu=cluster.gpu.name, layout=lay, step_time_s=step_s, compute_time_s=compute,
        comm_time_s={k: comm_total[k] for k in used},
        exposed_by_kind={k: exposed[k] for k in used}, exposed_comm_s=sum(exposed.values()),
        bubble_s=bubble, tokens_per_s=tokens / step_s,
        tflops_per_gpu=model_flops / step_s / n / 1e12,
        hw_tflops_per_gpu=hw_flops / step_s / n / 1e12,
        mfu=model_flops / step_s / n / gemm_peak(cluster.gpu, lay.precision), memory=mem,
        hbm_bytes=cluster.gpu.hbm_bytes, comms=timed, optimizer_s=opt_s, warnings=(),
        ep_split=ep_split, kernels=kernels(cluster.gpu, lay.framework))
