"""`import gpucomm.torch` registers the torch.distributed backend "gpucomm" (see backend.py).

    import torch.distributed as dist
    import gpucomm.torch  # noqa: F401
    dist.init_process_group("gpucomm")    # under torchrun --nproc-per-node N, one host
"""
from .backend import GpucommProcessGroup, GpucommWork, register

register()

__all__ = ["GpucommProcessGroup", "GpucommWork", "register"]
