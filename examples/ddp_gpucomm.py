"""DistributedDataParallel on the "gpucomm" backend, checked against the same run on gloo.

    torchrun --nproc-per-node 2 examples/ddp_gpucomm.py [--steps 50]

The default process group is gpucomm's (shared memory); a gloo group is made beside it. Two
copies of one small model train on the same data, one under DDP on each group; at the end
every parameter of the two must agree (float tolerance: engines may sum in different orders).
Prints `DDP rank R: STEPS steps, max |gpucomm - gloo| = X, ...; gpucomm calls {...}`.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gpucomm.torch  # noqa: F401  registers the backend


def model():
    torch.manual_seed(0)  # the same start on both groups (DDP broadcasts rank 0's anyway)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def train(group, steps: int) -> list:
    """Parameters after `steps` of SGD under DDP on `group` (None: the default group)."""
    net = DDP(model(), process_group=group)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1234 + dist.get_rank())  # each rank its own shard
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in net.module.parameters()]


def compare(steps: int) -> bool:
    """Train on gpucomm (the default group) and on gloo; print and return whether they agree."""
    gloo = dist.new_group(backend="gloo")
    ours, theirs = train(None, steps), train(gloo, steps)
    calls = dist.distributed_c10d._get_default_group().calls  # what DDP called on gpucomm
    diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
    moved = max((a - b).abs().max().item() for a, b in zip(ours, model().parameters()))
    line = (f"DDP rank {dist.get_rank()}: {steps} steps, max |gpucomm - gloo| = {diff:.3g}, "
            f"parameters moved by up to {moved:.3g}; gpucomm calls {calls}\n")
    os.write(1, line.encode())  # one write: the ranks share torchrun's stdout
    return diff <= 1e-5 and moved > 1e-3 and calls.get("allreduce", 0) >= steps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    dist.init_process_group("gpucomm")
    assert dist.get_backend() == "gpucomm", dist.get_backend()
    ok = compare(args.steps)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
