"""`--search`: the layouts of a model on a cluster, pruned, bounded, ranked by tokens/s.

Candidates: TP a power of two up to the GPUs of one node (TP across nodes is never
competitive); PP a power of two, a divisor of the layer count (or, with balanced ends, of
layers + 2); interleaving v in 1, 2, 3, 4, 6, 8 up to the layers of a stage; CP a power of two
up to 16 while each rank keeps >= 2K tokens; EP a divisor of the expert count and of DP x CP;
micro-batch 1, 2, 4, 8; DP takes the remaining GPUs. The global batch, sequence and the
framework's switches (overlaps, precision, FlashAttention) stay as the request gives them, so
step times compare like for like.

Pruning, in order:
1. divisibility (`validate`): a layout the model or batch cannot split is dropped;
2. memory: for each structure only the cheapest memory setting that fits is kept, trying
   recompute none < selective < full and ZeRO 1 < 2 < 3 in `SAVERS` order (a cheaper one
   that fits is never slower: ZeRO-1 and -2 move the same bytes, recomputation only adds);
3. bound: each survivor's step without communication (compute, bubble, optimizer) is a
   lower bound of its step; survivors are timed in full in order of that bound, until the
   next bound cannot beat the top N (or MAX_TIMED have been timed).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import ConfigError
from .compute import memory_per_gpu
from .layout import KINDS, Layout, validate
from .models import ModelConfig, get_model
from .request import with_framework_defaults
from .steptime import PredictedStep, compute_bound, plan

SAVERS = (("none", 1), ("none", 2), ("selective", 1), ("selective", 2), ("full", 1),
          ("full", 2), ("none", 3), ("selective", 3), ("full", 3))
VPPS = (1, 2, 3, 4, 6, 8)
MICRO_BATCHES = (1, 2, 4, 8)
MAX_TIMED = 32  # layouts timed in full, at most


@dataclass(frozen=True)
class Ranked:
    plan: PredictedStep
    why: str  # why it lost to the best ("" for the best)


@dataclass(frozen=True)
class SearchResult:
    model: str
    system: str
    nodes: int
    gpus: int
    gpu: str
    mode: str
    ranked: tuple  # Ranked, best first, the top N
    structures: int  # (tp, pp, vpp, cp, ep, micro-batch) combinations considered
    rejected: dict  # reason -> structures dropped
    bounded: int  # layouts never timed: their bound could not reach the top N
    timed: int  # layouts whose collectives were simulated
    elapsed_s: float

    def to_dict(self) -> dict:
        return {"model": self.model, "system": self.system, "nodes": self.nodes,
                "gpus": self.gpus, "gpu": self.gpu, "mode": self.mode,
                "structures": self.structures, "rejected": dict(self.rejected),
                "pruned_by_bound": self.bounded, "timed": self.timed,
                "elapsed_s": self.elapsed_s,
                "ranked": [{"rank": i + 1, "why_not_best": r.why,
                            **{k: v for k, v in r.plan.to_dict().items() if k != "collectives"}}
                           for i, r in enumerate(self.ranked)]}


def _powers(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


def structures(model: ModelConfig, gpus: int, gpus_per_node: int, base: Layout):
    """Every (tp, pp, vpp, cp, ep, micro_batch, dp) the cluster's GPU count allows."""
    train = base.mode == "train"
    tps = [t for t in _powers(gpus_per_node) if model.heads % t == 0]
    layers = model.layers + (2 if base.balanced_ends else 0)
    pps = sorted({p for p in _powers(model.layers)}
                 | {d for d in range(1, model.layers + 1) if layers % d == 0})
    cps = [c for c in _powers(16) if base.seq % (2 * c) == 0 and base.seq // c >= 2048] \
        if base.mode != "decode" else [1]
    eps = [e for e in range(1, model.experts + 1) if model.experts % e == 0] \
        if model.moe else [1]
    for tp in tps:
        for pp in pps:
            if pp > 1 and not train:
                continue
            for cp in cps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                per_stage = -(-model.layers // pp)
                vpps = [v for v in VPPS if v == 1 or (train and pp > 1 and per_stage >= v)]
                mbs = [b for b in MICRO_BATCHES if train] or [base.micro_batch]
                for ep in eps:
                    if (dp * cp) % ep:  # experts over a stage's cp x dp ranks (etp = tp)
                        continue
                    for mb in mbs:
                        for vpp in vpps:
                            yield dict(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, micro_batch=mb,
                                       vpp=vpp)


def search(req) -> SearchResult:
    """Rank the layouts of `req` (a PlanRequest with search=True)."""
    t0 = time.perf_counter()
    model = get_model(req.model)
    cluster = req.cluster()
    given = dict(req.layout)
    if not given.get("global_batch"):
        raise ConfigError("--search needs --global-batch (the batch must stay fixed across "
                          "layouts for their step times to compare)")
    base = Layout(**{k: v for k, v in with_framework_defaults(given).items() if k not in (
        "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero")})
    train = base.mode == "train"
    savers = SAVERS if train else (("none", 0),)
    rejected = {"divisibility": 0, "memory": 0}
    cands, n_struct = [], 0
    for s in structures(model, cluster.gpus, cluster.gpus_per_node, base):
        n_struct += 1
        try:
            lay = validate(model, base.with_(**s), cluster.gpus)
        except ConfigError:
            rejected["divisibility"] += 1
            continue
        for i, (rec, zero) in enumerate(savers):
            cand = lay.with_(recompute=rec, zero=zero) if train else lay
            mem = memory_per_gpu(model, cand)
            if mem.total <= cluster.gpu.hbm_bytes:
                bound = compute_bound(model, cand, cluster, mem).step_time_s
                cands.append((bound, n_struct, cand, i))
                break
        else:
            rejected["memory"] += 1
    if not cands:
        raise ConfigError(f"no layout of {model.name} fits {cluster.gpus} GPUs of "
                          f"{cluster.system} ({rejected['divisibility']} cannot split the model "
                          f"or batch, {rejected['memory']} do not fit in memory); add nodes, "
                          f"a shorter --seq or a smaller --global-batch")
    cands.sort(key=lambda c: (c[0], c[1]))
    top: list[PredictedStep] = []
    timed = 0
    for bound, _, lay, _ in cands:
        if len(top) >= req.top and bound >= top[req.top - 1].step_time_s:
            break
        if timed >= MAX_TIMED:
            break
        p = plan(model, cluster.system, cluster.nodes, lay, cluster.nic, cluster=cluster,
                 check_fit=False, sim_model=req.sim_model, contention=req.contention)
        timed += 1
        top.append(p)
        top.sort(key=lambda r: r.step_time_s)
        top = top[:req.top]
    best = top[0]
    ranked = tuple(Ranked(p, "" if i == 0 else why_lost(p, best)) for i, p in enumerate(top))
    return SearchResult(model.name, cluster.system, cluster.nodes, cluster.gpus,
                        cluster.gpu.name, base.mode, ranked, n_struct, rejected,
                        len(cands) - timed, timed, time.perf_counter() - t0)


def _parts(p: PredictedStep) -> dict:
    parts = {"compute": p.compute_time_s, "bubble": p.bubble_s, "optimizer": p.optimizer_s}
    parts.update({f"exposed {k}": p.exposed_by_kind.get(k, 0.0) for k in KINDS})
    return parts


def why_lost(p: PredictedStep, best: PredictedStep) -> str:
    """The parts of `p`'s step that grew most over the best's, and what memory forced."""
    mine, theirs = _parts(p), _parts(best)
    grew = sorted(((mine[k] - theirs[k], k) for k in mine), reverse=True)
    out = [f"{k} +{d / best.step_time_s:.0%}" for d, k in grew[:2]
           if d > 0.005 * best.step_time_s]
    lay = p.layout
    if lay.mode == "train" and (lay.recompute != "none" or lay.zero == 3):
        needs = [f"recompute {lay.recompute}"] if lay.recompute != "none" else []
        needs += ["ZeRO-3"] if lay.zero == 3 else []
        out.append("memory: needs " + " and ".join(needs))
    return "; ".join(out) or "within 0.5% of the best"
