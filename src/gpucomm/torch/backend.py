"""A torch.distributed process-group backend, "gpucomm", over the shared-memory communicator.

    import gpucomm.torch                       # registers the backend
    dist.init_process_group("gpucomm")         # under torchrun, ranks on one host
    model = DistributedDataParallel(model)     # DDP's all-reduces now run gpucomm schedules

Every call turns into a gpucomm collective on `gpucomm.runtime`'s communicator (the shm
transport: ranks of one host), run on its worker thread; the `Work` it returns completes when
the collective does, and its future carries the output tensors (what DDP's reducer waits on).
Buffers are CPU tensors, contiguous; reductions as `gpucomm.dtypes` defines them.
"""
from __future__ import annotations

import json
from datetime import timedelta

import torch
import torch.distributed as dist

from ..errors import ConfigError

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}


class StoreRendezvous:
    """The shm transport's rendezvous (`allgather` of small JSON objects) over the c10d
    store torch.distributed already set up, so no extra port is needed."""

    def __init__(self, store, rank: int, world: int, timeout: float):
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout
        self.round = 0

    def allgather(self, obj):
        self.round += 1
        keys = [f"gpucomm/rdzv/{self.round}/{r}" for r in range(self.world)]
        self.store.set(keys[self.rank], json.dumps(obj))
        self.store.wait(keys, timedelta(seconds=self.timeout))
        return [json.loads(self.store.get(k)) for k in keys]

    def close(self) -> None:
        pass


class GpucommWork(dist.Work):
    """A torch Work over a gpucomm Work (or an already finished call)."""

    def __init__(self, work, result):
        super().__init__()
        self._work, self._result = work, result
        self._future = torch.futures.Future()
        if work is None:
            self._future.set_result(result)
        else:
            work._future.add_done_callback(self._finish)

    def _finish(self, fut) -> None:
        err = fut.exception()
        if err is not None:
            self._future.set_exception(err)
        else:
            self._future.set_result(self._result)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        secs = timeout.total_seconds() if timeout else None
        if self._work is not None:
            self._work.wait(secs or None)
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()

    def is_success(self) -> bool:
        if self._work is None:
            return True
        f = self._work._future
        return f.done() and f.exception() is None

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        return self._future


def _op(opts) -> str:
    op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
    for k, v in _OPS.items():
        if op == k:
            return v
    raise ConfigError(f"reduce op {op} is not supported by gpucomm: allowed are "
                      f"{', '.join(str(k) for k in _OPS)}")


def _flat(t: torch.Tensor, what: str) -> torch.Tensor:
    if not t.is_contiguous():
        raise ConfigError(f"{what} must be contiguous")
    return t.view(-1)


class GpucommProcessGroup(dist.ProcessGroup):
    def __init__(self, comm):
        super().__init__(comm.rank, comm.world_size)
        self.comm = comm
        self.calls: dict = {}  # collective -> calls, to see what a client (DDP, FSDP) uses

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def getBackendName(self) -> str:
        return "gpucomm"

    @property
    def supports_splitting(self) -> bool:
        return False

    # --- collectives ----------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        self._count("allreduce")
        op = _op(opts)
        works = [self.comm.all_reduce(_flat(t, "allreduce tensor"), op, async_op=True)
                 for t in tensors]
        return GpucommWork(_last(works), list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        self._count("allreduce_coalesced")
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        self._count("broadcast")
        root = opts.rootRank
        works = [self.comm.broadcast(_flat(t, "broadcast tensor"), root, async_op=True)
                 for t in tensors]
        return GpucommWork(_last(works), list(tensors))

    def _allgather_base(self, output, input, opts=None):
        self._count("_allgather_base")
        w = self.comm.all_gather(_flat(output, "all-gather output"),
                                 _flat(input, "all-gather input"), async_op=True)
        return GpucommWork(w, [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        self._count("allgather_into_tensor_coalesced")
        works = [self.comm.all_gather(_flat(o, "output"), _flat(i, "input"), async_op=True)
                 for o, i in zip(outputs, inputs)]
        return GpucommWork(_last(works), list(outputs))

    def allgather(self, output_lists, inputs, opts=None):
        self._count("allgather")
        works, staged = [], []
        for outs, inp in zip(output_lists, inputs):
            flat = torch.empty(inp.numel() * len(outs), dtype=inp.dtype)
            works.append(self.comm.all_gather(flat, _flat(inp, "all-gather input"),
                                              async_op=True))
            staged.append((flat, outs))
        self.comm._drain()  # the list form copies out afterwards: finish now
        for flat, outs in staged:
            for k, o in enumerate(outs):
                o.copy_(flat[k * o.numel():(k + 1) * o.numel()].view_as(o))
        return GpucommWork(None, output_lists)

    def _reduce_scatter_base(self, output, input, opts=None):
        self._count("_reduce_scatter_base")
        w = self.comm.reduce_scatter(_flat(output, "reduce-scatter output"),
                                     _flat(input, "reduce-scatter input"), _op(opts),
                                     async_op=True)
        return GpucommWork(w, [output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        self._count("reduce_scatter_tensor_coalesced")
        op = _op(opts)
        works = [self.comm.reduce_scatter(_flat(o, "output"), _flat(i, "input"), op,
                                          async_op=True) for o, i in zip(outputs, inputs)]
        return GpucommWork(_last(works), list(outputs))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        self._count("reduce_scatter")
        op = _op(opts)
        for out, ins in zip(outputs, input_lists):
            flat = torch.cat([i.reshape(-1) for i in ins])
            self.comm.reduce_scatter(_flat(out, "reduce-scatter output"), flat, op)
        return GpucommWork(None, list(outputs))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        self._count("alltoall_base")
        if output_split_sizes or input_split_sizes:
            raise ConfigError("gpucomm all_to_all needs equal splits (no split sizes)")
        w = self.comm.all_to_all(_flat(output, "all-to-all output"),
                                 _flat(input, "all-to-all input"), async_op=True)
        return GpucommWork(w, [output])

    def alltoall(self, outputs, inputs, opts=None):
        self._count("alltoall")
        out = torch.empty(sum(o.numel() for o in outputs), dtype=outputs[0].dtype)
        inp = torch.cat([i.reshape(-1) for i in inputs])
        self.comm.all_to_all(out, inp)
        off = 0
        for o in outputs:
            o.copy_(out[off:off + o.numel()].view_as(o))
            off += o.numel()
        return GpucommWork(None, list(outputs))

    def barrier(self, opts=None):
        self._count("barrier")
        return GpucommWork(self.comm.barrier(async_op=True), [])

    def send(self, tensors, dst, tag=0):
        self._count("send")
        works = [self.comm.send(_flat(t, "send tensor"), dst, async_op=True) for t in tensors]
        return GpucommWork(_last(works), list(tensors))

    def recv(self, tensors, src, tag=0):
        self._count("recv")
        works = [self.comm.recv(_flat(t, "recv tensor"), src, async_op=True) for t in tensors]
        return GpucommWork(_last(works), list(tensors))


    # torch >= 2.10 calls these names for the tensor forms
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    # --- rooted ---------------------------------------------------------------------------
    def reduce(self, tensors, opts):
        self._count("reduce")
        op, root = _op(opts), opts.rootRank
        works = [self.comm.reduce(_flat(t, "reduce tensor"), root, op, async_op=True)
                 for t in tensors]
        return GpucommWork(_last(works), list(tensors))

    def gather(self, output_lists, inputs, opts):
        self._count("gather")
        root = opts.rootRank
        for k, inp in enumerate(inputs):  # only the root passes output lists
            outs = output_lists[k] if self.rank() == root else ()
            flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype) \
                if self.rank() == root else None
            self.comm.gather(flat, _flat(inp, "gather input"), root)
            if flat is not None:
                for k, o in enumerate(outs):
                    o.copy_(flat[k * o.numel():(k + 1) * o.numel()].view_as(o))
        return GpucommWork(None, output_lists)

    def scatter(self, outputs, input_lists, opts):
        self._count("scatter")
        root = opts.rootRank
        for k, out in enumerate(outputs):  # only the root passes input lists
            flat = torch.cat([i.reshape(-1) for i in input_lists[k]]) \
                if self.rank() == root else None
            self.comm.scatter(_flat(out, "scatter output"), flat, root)
        return GpucommWork(None, list(outputs))


def _last(works):
    """Calls run in order on the communicator's one worker: the last one done = all done."""
    works = [w for w in works if w is not None]
    return works[-1] if works else None


def create(store, rank: int, world_size: int, timeout: timedelta):
    """The creator torch.distributed calls for backend "gpucomm"."""
    import os
    from ..runtime import Communicator
    from ..runtime.shm import ShmTransport
    secs = timeout.total_seconds() if timeout else 300.0
    rdzv = StoreRendezvous(store, rank, world_size, secs)
    transport = ShmTransport(rank, world_size, secs, rdzv if world_size > 1 else None)
    local = int(os.environ.get("LOCAL_RANK", rank))
    return GpucommProcessGroup(Communicator(rank, world_size, transport, secs, local))


def register() -> None:
    if "GPUCOMM" not in dist.Backend._plugins:
        dist.Backend.register_backend("gpucomm", create, devices=["cpu"])
