"""`import gpucomm.torch` registers the torch.distributed backend "gpucomm" (see backend.py).

    import torch.distributed as dist
    import gpucomm.torch  # noqa: F401
    dist.init_process_group("gpucomm")    # under torchrun --nproc-per-node N, one host
    ddp.register_comm_hook(None, gpucomm.torch.allreduce_hook)  # small buckets: see hooks.py
"""
from .backend import GpucommProcessGroup, GpucommWork, register
from .hooks import allreduce_hook

register()

__all__ = ["GpucommProcessGroup", "GpucommWork", "allreduce_hook", "register"]
