"""`--search`: enumerate the layouts of a model on a cluster and rank those that fit.

Candidates: TP a power of two up to the GPUs of one node (TP across nodes is never competitive),
PP a power of two or a divisor of the layer count (with 1, 2 or 4 interleaved virtual stages
in training), CP a power of two up to 16 for sequences of
32K tokens or more, EP a divisor of the expert count; DP takes the remaining GPUs. The global
batch and micro-batch stay as given so step times compare like for like.
"""
from __future__ import annotations

from ..errors import ConfigError
from .layout import Layout
from .models import ModelConfig
from .steptime import Cluster, plan


def _powers(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


def candidates(model: ModelConfig, cluster: Cluster, base: dict) -> list[Layout]:
    world = cluster.gpus
    tps = [t for t in _powers(cluster.gpus_per_node) if model.heads % t == 0]
    pps = sorted({p for p in _powers(model.layers)} |
                 {d for d in range(1, model.layers + 1) if model.layers % d == 0})
    cps = [c for c in _powers(16) if base["seq"] % (2 * c) == 0] if base["seq"] >= 32768 else [1]
    eps = [e for e in range(1, model.experts + 1) if model.experts % e == 0] if model.moe \
        else [1]
    mb = base["micro_batch"]
    gb = base["global_batch"]
    out = []
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if world % (tp * pp * cp):
                    continue
                dp = world // (tp * pp * cp)
                if gb % dp or (base["mode"] == "train" and (gb // dp) % mb):
                    continue
                per_stage = -(-model.layers // pp)
                vpps = [v for v in (1, 2, 4) if v == 1 or (pp > 1 and per_stage >= v
                                                            and base["mode"] == "train")]
                for ep in eps:
                    if dp % ep:
                        continue
                    for vpp in vpps:
                        out.append(Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, seq=base["seq"],
                                          global_batch=gb, micro_batch=mb, sp=base["sp"],
                                          zero=base["zero"], vpp=vpp,
                                          recompute=base["recompute"], mode=base["mode"]))
    return out


def search_layouts(model: ModelConfig, cluster: Cluster, base: dict, sim_model="analytic",
                   contention: bool = True):
    """(plans that fit sorted by step time, number of candidates rejected)."""
    if not base.get("global_batch"):
        raise ConfigError("--search needs --global-batch (the batch must stay fixed across "
                          "layouts for their step times to compare)")
    ranked, rejected = [], 0
    for lay in candidates(model, cluster, base):
        try:
            ranked.append(plan(model, cluster.system, cluster.nodes, lay, cluster.nic,
                               cluster=cluster, sim_model=sim_model, contention=contention))
        except ConfigError:
            rejected += 1
    ranked.sort(key=lambda r: r.step_time_s)
    return ranked, rejected
