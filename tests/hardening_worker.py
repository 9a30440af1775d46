"""Scripts for tests/test_runtime_hardening.py, one mode per argv[1]; each prints RESULT lines.

    threads   two threads on one communicator: the second is refused on every rank
    init      gpucomm.init() (shm) + an all-reduce of ones (under mpiexec or torchrun)
    hold      init, one all-reduce, print READY, sleep (to be signalled)
    torch     torch.distributed on "gpucomm" against gloo: FSDP2, all_to_all_single with split
              sizes, bool, non-contiguous, BAND/BOR/BXOR; then gpucomm.init() under torchrun,
              then destroy and init the group again
    torchrun-fail  rank 1 fails while rank 0 is in gpucomm.init()'s set-up
"""
import os
import sys
import threading
import time

import numpy as np

mode = sys.argv[1]


def threads():
    import gpucomm
    from gpucomm.errors import ConfigError
    comm = gpucomm.init(timeout=30)
    errors, wrong = [], 0

    def second():
        try:
            comm.all_reduce(np.ones(400, np.float32))
        except ConfigError as e:
            errors.append(str(e))

    t = threading.Thread(target=second, name="second")
    t.start()
    for _ in range(50):
        x = np.full(400, comm.rank + 1.0, np.float32)
        comm.all_reduce(x)
        wrong += int(np.count_nonzero(x != comm.world_size * (comm.world_size + 1) / 2))
    t.join()
    print(f"RESULT rank {comm.rank} wrong {wrong} refused {errors!r}", flush=True)


def init():
    import gpucomm
    comm = gpucomm.init(timeout=60)
    x = np.ones(1 << 16, np.float32)
    comm.all_reduce(x)
    print(f"RESULT rank {comm.rank} of {comm.world_size} local {comm.local_rank} sum "
          f"{float(x[0])} all {bool(np.all(x == x[0]))}", flush=True)
    comm.close()


def hold():
    import gpucomm
    comm = gpucomm.init(timeout=60)
    comm.all_reduce(np.ones(1 << 20, np.float32))
    print(f"READY {os.getpid()}", flush=True)
    time.sleep(120)


def torch_features():
    import torch
    import torch.distributed as dist

    import gpucomm
    import gpucomm.torch  # noqa: F401
    dist.init_process_group("gpucomm")
    r, p = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")

    def same(name, fn):
        try:
            a, b = fn(None), fn(gloo)
            ok = a.dtype == b.dtype and torch.equal(a, b)
            print(f"RESULT rank {r} {name} {'same' if ok else f'differs: {a} vs {b}'}",
                  flush=True)
        except Exception as e:
            print(f"RESULT rank {r} {name} error {type(e).__name__}: {e}", flush=True)

    def bools(op):
        def fn(g):
            t = torch.tensor([True, False, r == 0, r == 1, True])
            dist.all_reduce(t, op=op, group=g)
            return t
        return fn

    for op in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        same(f"bool-{op}", bools(getattr(dist.ReduceOp, op)))
    for op in ("BAND", "BOR", "BXOR"):
        def bits(g, op=op):
            t = torch.tensor([3 + r, 5 * r + 1, 255, -7 * r], dtype=torch.int64)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g)
            return t
        same(f"int64-{op}", bits)

    def noncontig(g):
        t = (torch.arange(12.0).view(3, 4) * (r + 1)).t()
        dist.all_reduce(t, group=g)
        return t.clone()
    same("noncontiguous-all_reduce", noncontig)

    # gloo broadcasts a non-contiguous view as if it were contiguous (it overwrote the wrong
    # elements of rank 1's base in torch 2.13), so this one is checked against the answer
    base = torch.arange(20.0).view(4, 5) + 100 * r
    dist.broadcast(base[:, 1:3], 0)
    want = torch.arange(20.0).view(4, 5) + 100 * r
    want[:, 1:3] = torch.arange(20.0).view(4, 5)[:, 1:3]
    print(f"RESULT rank {r} noncontiguous-broadcast "
          f"{'same' if torch.equal(base, want) else f'differs: {base}'}", flush=True)

    def a2a_splits(g):
        ins = [[1, 2, 0], [3, 0, 1], [2, 2, 2]][r][:p] if p == 3 else [[1, 2], [3, 1]][r]
        table = [[1, 2, 0], [3, 0, 1], [2, 2, 2]] if p == 3 else [[1, 2], [3, 1]]
        outs = [table[q][r] for q in range(p)]
        inp = (torch.arange(sum(ins) * 2, dtype=torch.float32) + 100 * r).view(-1, 2)
        out = torch.empty(sum(outs), 2)
        dist.all_to_all_single(out, inp, outs, ins, group=g)
        return out

    same("all_to_all_single-splits", a2a_splits)

    def a2a_equal(g):
        inp = torch.arange(2.0 * p) + 10 * r
        out = torch.empty(2 * p)
        dist.all_to_all_single(out, inp, [2] * p, [2] * p, group=g)
        return out

    same("all_to_all_single-equal-splits", a2a_equal)

    # FSDP2 on a device mesh: the same model and data on gpucomm and on gloo
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def fsdp2(mesh):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(r)
        for _ in range(4):
            loss = model(torch.randn(6, 8, generator=gen)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()]).detach()

    try:
        a = fsdp2(init_device_mesh("cpu", (p,)))
        b = fsdp2(DeviceMesh.from_group(gloo, "cpu"))
        print(f"RESULT rank {r} fsdp2 {'same' if torch.allclose(a, b, atol=1e-6) else 'differs'}",
              flush=True)
    except Exception as e:
        print(f"RESULT rank {r} fsdp2 error {type(e).__name__}: {e}", flush=True)

    # gpucomm.init() under torchrun: meets through torchrun's store, not MASTER_PORT
    comm = gpucomm.init(timeout=60)
    x = np.ones(1000, np.float32)
    comm.all_reduce(x)
    print(f"RESULT rank {r} init-under-torchrun {float(x[0])}", flush=True)
    comm.close()

    dist.destroy_process_group()
    dist.init_process_group("gpucomm")
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    print(f"RESULT rank {r} reinit {float(t[0])}", flush=True)
    dist.destroy_process_group()


def torchrun_fail():
    """Rank 1 fails before gpucomm.init(); rank 0 is in its set-up when torchrun stops it."""
    if os.environ["RANK"] == "1":
        time.sleep(3)
        raise SystemExit(3)
    import gpucomm
    gpucomm.init(timeout=120)


{"threads": threads, "init": init, "hold": hold, "torch": torch_features,
 "torchrun-fail": torchrun_fail}[mode]()
