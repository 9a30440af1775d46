"""DistributedDataParallel on the "gpucomm" backend, checked against the same run on gloo.

    torchrun --nproc-per-node 2 examples/ddp_gpucomm.py [--steps 50]

The default process group is gpucomm's (shared memory); a gloo group is made beside it. Copies
of one small model train on the same data: under DDP on each group, and on gpucomm again with
gpucomm's comm hook (`gpucomm.torch.allreduce_hook`, which calls the communicator directly);
at the end every parameter must agree with gloo's (float tolerance: engines may sum in
different orders). Prints `DDP rank R: STEPS steps, max |gpucomm - gloo| = X, ...; gpucomm
calls {...}`, then the same line for the hook (`DDP rank R, comm hook: ...`).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gpucomm.torch  # registers the backend


def model():
    torch.manual_seed(0)  # the same start on both groups (DDP broadcasts rank 0's anyway)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def train(group, steps: int, hook=None) -> list:
    """Parameters after `steps` of SGD under DDP on `group` (None: the default group), with
    the comm hook `hook` if given."""
    net = DDP(model(), process_group=group)
    if hook is not None:
        net.register_comm_hook(group, hook)
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
    theirs, ok = train(gloo, steps), True
    calls = dist.distributed_c10d._get_default_group().calls  # what DDP called on gpucomm
    for how, hook, name in (("", None, "allreduce"),
                            (", comm hook", gpucomm.torch.allreduce_hook, "allreduce_hook")):
        before = calls.get(name, 0)
        ours = train(None, steps, hook)
        diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
        moved = max((a - b).abs().max().item() for a, b in zip(ours, model().parameters()))
        line = (f"DDP rank {dist.get_rank()}{how}: {steps} steps, max |gpucomm - gloo| = "
                f"{diff:.3g}, parameters moved by up to {moved:.3g}; gpucomm calls {calls}\n")
        os.write(1, line.encode())  # one write: the ranks share torchrun's stdout
        ok = ok and diff <= 1e-5 and moved > 1e-3 and calls.get(name, 0) - before >= steps
    return ok


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
