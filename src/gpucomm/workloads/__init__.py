"""Workloads: transformer configs and parallel layouts turned into the collectives, compute and
memory of one training or inference step, timed by the simulator (`gpucomm plan`).

    >>> from gpucomm.workloads import get_model, Layout, step_comms
    >>> comms = step_comms(get_model("llama3-70b"), Layout(tp=8, seq=4096, mode="decode"))
    >>> comms[0].collective, comms[0].count
    ('all_reduce', 160)
"""
from .comms import Comm, inference_comms, step_comms, training_comms
from .compute import Memory, memory_per_gpu, training_flops
from .layout import KINDS, MODES, Layout, group_ranks, validate
from .models import ModelConfig, get_model, list_models, load_model

__all__ = ["Comm", "inference_comms", "step_comms", "training_comms", "Memory",
           "memory_per_gpu", "training_flops", "KINDS", "MODES", "Layout", "group_ranks",
           "validate", "ModelConfig", "get_model", "list_models", "load_model"]


def __getattr__(name):  # the timed parts import the simulator only when asked for
    if name in ("plan", "PredictedStep", "make_cluster", "HBM_EFFICIENCY"):
        from . import steptime
        return getattr(steptime, name)
    if name in ("PlanRequest", "answer"):
        from . import request
        return getattr(request, name)
    if name == "search":
        from .search import search
        return search
    raise AttributeError(name)
