"""gpucomm schedules on torch.distributed: any registered algorithm over gloo (CPU) or NCCL (GPU).

    torchrun --nproc-per-node 4 examples/torch_transport.py            # one host, gloo
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \
        --rdzv-endpoint HOST0:29500 examples/torch_transport.py --nccl  # a real cluster

Every rank all-reduces a tensor holding its rank + 1 with the flat ring and with the
hierarchical algorithm (reduce-scatter in the host, all-reduce across hosts, all-gather),
checks the result and prints how long each took.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

from gpucomm.runtime.torch_transport import TorchTransport

ap = argparse.ArgumentParser()
ap.add_argument("--nccl", action="store_true", help="GPUs: NCCL process group, CUDA tensors")
ap.add_argument("--count", type=int, default=1 << 20)
args = ap.parse_args()

if args.nccl:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if args.nccl else "gloo")
transport = TorchTransport(timeout=60)  # tensors live on the group's device
rank, world = dist.get_rank(), dist.get_world_size()
per_host = int(os.environ.get("LOCAL_WORLD_SIZE", world))
want = world * (world + 1) / 2

for algorithm, params in (("ring", {}), ("hierarchical", {"group_size": per_host})):
    x = torch.full((args.count,), float(rank + 1), device=transport.device)
    t0 = time.perf_counter()
    transport.all_reduce(x, algorithm=algorithm, **params)  # in place
    secs = time.perf_counter() - t0
    assert torch.all(x == want), f"rank {rank}: {algorithm} gave {x[0].item()}, want {want}"
    if rank == 0:
        print(f"{algorithm:>13}: {args.count * 4 / 2**20:.0f} MiB on {world} ranks in "
              f"{secs * 1e3:.1f} ms, every element = {want:g}")

dist.barrier()
dist.destroy_process_group()
