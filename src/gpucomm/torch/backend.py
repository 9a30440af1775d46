"""A torch.distributed process-group backend, "gpucomm", over the shared-memory communicator.

    import gpucomm.torch                       # registers the backend
    dist.init_process_group("gpucomm")         # under torchrun, ranks on one host
    model = DistributedDataParallel(model)     # DDP's all-reduces now run gpucomm schedules

Every call turns into a gpucomm collective on `gpucomm.runtime`'s communicator (the shm
transport: ranks of one host), run on its worker thread, or on the calling thread for small
calls with nothing queued; the `Work` it returns completes when the collective does, and its
future carries the output tensors (what DDP's reducer waits on).
Buffers are CPU tensors, contiguous; reductions as `gpucomm.dtypes` defines them.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..errors import ConfigError
from ..runtime.store_rendezvous import StoreRendezvous

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}


class GpucommWork(dist.Work):
    """A torch Work over a gpucomm Work (or an already finished call)."""

    def __init__(self, work, result):
        super().__init__()
        self._work, self._result = work, result
        self._future: torch.futures.Future | None = None  # made when asked for (0.7 us)

    def _future_now(self) -> torch.futures.Future:
        if self._future is None:
            self._future = torch_future(self._work, self._result)
        return self._future

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        secs = timeout.total_seconds() if timeout else None
        if self._work is not None:
            self._work.wait(secs or None)
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()

    def is_success(self) -> bool:
        return self._work is None or self._work.succeeded()

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        return self._future_now()


def torch_future(work, result) -> torch.futures.Future:
    """A torch future of `result`, finished when the gpucomm call `work` is (None: done),
    with its error if it failed (set on the communicator's worker, when the call ends)."""
    fut: torch.futures.Future = torch.futures.Future()
    if work is None or work.succeeded():
        fut.set_result(result)
        return fut

    def finish(done) -> None:
        err = done.exception()
        if err is not None:
            fut.set_exception(err)
        else:
            fut.set_result(result)
    work.add_done_callback(finish)  # runs now if the call has ended
    return fut


def comm_view(t: torch.Tensor):
    """A flat tensor as the communicator takes it at least cost: a numpy view where numpy
    has the dtype (then small calls run inline on the calling thread, `_straight`), else the
    tensor."""
    return t.detach().numpy() if t.dtype in _NUMPY_VIEWED else t


# torch's own Work over a finished future: DDP's reducer then takes the future and waits in
# C++, not through two more calls back into Python (a DDP step of 8 buckets, 2 ranks, with an
# `allreduce` that only returns its Work: 671 us with a GpucommWork, 661 with this one)
_WRAP_DONE = getattr(torch._C._distributed_c10d, "_create_work_from_future", None)


def done_work(work, result) -> dist.Work:
    """The Work of a call: torch's own over a finished future where the gpucomm call has
    finished without error (`work` None or `Work.succeeded`) and `result` is what such a
    Work may carry (a tensor list), else a `GpucommWork`."""
    if _WRAP_DONE is not None and (work is None or work.succeeded()) and \
            all(isinstance(t, torch.Tensor) for t in result):
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(result)
        return _WRAP_DONE(fut)
    return GpucommWork(work, result)


# what `Tensor.numpy()` views as the same dtype (bfloat16 and bool are staged)
_NUMPY_VIEWED = {torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8,
                 torch.int32, torch.int64, torch.uint32, torch.uint64}
_BITWISE = {dist.ReduceOp.BAND: "bitwise_and", dist.ReduceOp.BOR: "bitwise_or",
            dist.ReduceOp.BXOR: "bitwise_xor"}
# bool tensors travel as uint8; a sum of booleans is "any" (torch's and gloo's bool + bool),
# a product "all"
_BOOL_OPS = {"sum": "max", "prod": "min", "min": "min", "max": "max"}


def _op(opts, dtype=None) -> str:
    """gpucomm's name for the reduction (numpy's bitwise ufunc name for BAND/BOR/BXOR)."""
    op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
    for table in (_OPS, _BITWISE):
        for k, v in table.items():
            if op == k:
                if v.startswith("bitwise") and dtype is not None and \
                        (dtype.is_floating_point or dtype.is_complex):
                    raise ConfigError(f"{str(k).split('.')[-1]} needs an integer or bool "
                                      f"tensor, got {dtype}")
                if dtype == torch.bool and not v.startswith("bitwise"):
                    if v not in _BOOL_OPS:
                        raise ConfigError(f"reduce op {v} is not defined for bool tensors: "
                                          f"allowed are SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR")
                    return _BOOL_OPS[v]
                return v
    raise ConfigError(f"reduce op {op} is not supported by gpucomm: allowed are SUM, PRODUCT, "
                      f"MIN, MAX, AVG, and BAND, BOR, BXOR on integer and bool tensors")


class _Staging:
    """Flat buffers the communicator can take, for tensors of any layout: contiguous tensors
    are viewed (no copy), others copied into a contiguous buffer and copied back once the
    call is done; bool is viewed as uint8."""

    def __init__(self):
        self.back = []  # (tensor, contiguous copy) to write back

    def flat(self, t: torch.Tensor, written: bool = True) -> torch.Tensor:
        if t.is_contiguous():
            f = t.view(-1)
        else:
            c = t.contiguous()
            if written:
                self.back.append((t, c))
            f = c.view(-1)
        return f.view(torch.uint8) if f.dtype == torch.bool else f

    def buf(self, t: torch.Tensor, written: bool = True):
        """`flat(t)` as the communicator takes it (`comm_view`)."""
        return comm_view(self.flat(t, written))

    def work(self, comm, work, result) -> dist.Work:
        """The call's Work; with copies to write back, it finishes the call first."""
        if not self.back:
            return done_work(work, result)
        if work is not None:
            work.wait()
        comm._drain()
        for t, c in self.back:
            t.copy_(c)
        return done_work(None, result)


class GpucommProcessGroup(dist.ProcessGroup):
    def __init__(self, comm):
        # torch's Python-backend constructor (rank, size); its stubs list only the C++ ones
        super().__init__(comm.rank, comm.world_size)  # type: ignore[call-arg]
        self.comm = comm
        self.calls: dict = {}  # collective -> calls, to see what a client (DDP, FSDP) uses
        self._group_name = self._group_desc = ""

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def getBackendName(self) -> str:
        return "gpucomm"

    @property
    def supports_splitting(self) -> bool:
        return False

    # torch keeps a group's name on its C++ backends, and this group has none (it is its own
    # backend), so the name lives here: DeviceMesh / FSDP2 look groups up by it.
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    @property
    def group_desc(self) -> str:
        return self._group_desc

    def shutdown(self) -> None:
        self.comm.close()

    # --- collectives ----------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        self._count("allreduce")
        t = tensors[0] if len(tensors) == 1 else None
        if t is not None and t.dtype in _NUMPY_VIEWED and t.is_cpu and t.is_contiguous() \
                and not t.requires_grad:  # one tensor numpy views as it is: no staging
            op = _op(opts, t.dtype)
            if not op.startswith("bitwise"):
                return done_work(self.comm.all_reduce(t.numpy(), op, async_op=True), tensors)
        return self._reduce_each(tensors, opts, None)

    def _reduce_each(self, tensors, opts, root: int | None):
        """All-reduce (root None) or reduce to `root` of each tensor; bitwise ops as _bitwise."""
        st, works = _Staging(), list[Any]()
        for t in tensors:
            op = _op(opts, t.dtype)
            if op.startswith("bitwise"):
                self._bitwise(st.flat(t), op, root)
                works.append(None)
            elif root is None:
                works.append(self.comm.all_reduce(st.buf(t), op, async_op=True))
            else:
                works.append(self.comm.reduce(st.buf(t), root, op, async_op=True))
        return st.work(self.comm, _last(works), list(tensors))

    def _bitwise(self, flat: torch.Tensor, op: str, root) -> None:
        """BAND/BOR/BXOR (no gpucomm schedule reduces bitwise): every rank's tensor gathered,
        reduced here; with `root`, only the root's tensor is written."""
        gathered = torch.empty(flat.numel() * self.size(), dtype=flat.dtype)
        self.comm.all_gather(gathered, flat)
        if root is None or self.rank() == root:
            import numpy as np
            red = getattr(np, op).reduce(gathered.numpy().reshape(self.size(), -1), axis=0)
            flat.copy_(torch.from_numpy(red))
        return None

    def allreduce_coalesced(self, tensors, opts=None):
        self._count("allreduce_coalesced")
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        self._count("broadcast")
        root, st = opts.rootRank, _Staging()
        works = [self.comm.broadcast(st.buf(t), root, async_op=True) for t in tensors]
        return st.work(self.comm, _last(works), list(tensors))

    def _allgather_base(self, output, input, opts=None):
        self._count("_allgather_base")
        st = _Staging()
        w = self.comm.all_gather(st.buf(output), st.buf(input, False), async_op=True)
        return st.work(self.comm, w, [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        self._count("allgather_into_tensor_coalesced")
        st = _Staging()
        works = [self.comm.all_gather(st.buf(o), st.buf(i, False), async_op=True)
                 for o, i in zip(outputs, inputs)]
        return st.work(self.comm, _last(works), list(outputs))

    def allgather(self, output_lists, inputs, opts=None):
        self._count("allgather")
        st, staged = _Staging(), []
        for outs, inp in zip(output_lists, inputs):
            flat = torch.empty(inp.numel() * len(outs), dtype=inp.dtype)
            self.comm.all_gather(st.buf(flat), st.buf(inp, False), async_op=True)
            staged.append((flat, outs))
        self.comm._drain()  # the list form copies out afterwards: finish now
        for flat, outs in staged:
            for k, o in enumerate(outs):
                o.copy_(flat[k * o.numel():(k + 1) * o.numel()].view_as(o))
        return GpucommWork(None, output_lists)

    def _reduce_scatter_base(self, output, input, opts=None):
        self._count("_reduce_scatter_base")
        st = _Staging()
        w = self.comm.reduce_scatter(st.buf(output), st.buf(input, False),
                                     _reducing_op(opts, input.dtype), async_op=True)
        return st.work(self.comm, w, [output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        self._count("reduce_scatter_tensor_coalesced")
        st = _Staging()
        works = [self.comm.reduce_scatter(st.buf(o), st.buf(i, False),
                                          _reducing_op(opts, i.dtype), async_op=True)
                 for o, i in zip(outputs, inputs)]
        return st.work(self.comm, _last(works), list(outputs))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        self._count("reduce_scatter")
        st = _Staging()
        for out, ins in zip(outputs, input_lists):
            flat = torch.cat([i.reshape(-1) for i in ins])
            self.comm.reduce_scatter(st.buf(out), st.buf(flat, False),
                                     _reducing_op(opts, flat.dtype))
        return st.work(self.comm, None, list(outputs))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        self._count("alltoall_base")
        st = _Staging()
        if not output_split_sizes and not input_split_sizes:
            w = self.comm.all_to_all(st.buf(output), st.buf(input, False), async_op=True)
            return st.work(self.comm, w, [output])
        outs = _rows(st.flat(output).view(output.shape), output_split_sizes, self.size(),
                     "output")
        ins = _rows(st.flat(input, False).view(input.shape), input_split_sizes, self.size(),
                    "input")
        return st.work(self.comm, self._exchange(outs, ins), [output])

    def _exchange(self, outs, ins):
        """All-to-all of pieces of any sizes, over point-to-point: in step k rank r sends to
        r+k and receives from r-k (sends are buffered, so no step waits on a later one)."""
        p, r = self.size(), self.rank()
        if outs[r].numel() != ins[r].numel():
            raise ConfigError(f"rank {r}: all_to_all keeps {ins[r].numel()} elements for "
                              f"itself but expects {outs[r].numel()} back from itself")
        outs[r].copy_(ins[r])
        work = None
        for k in range(1, p):
            dst, src = (r + k) % p, (r - k) % p
            self.comm.send(ins[dst], dst, async_op=True)
            work = self.comm.recv(outs[src], src, async_op=True)
        return work

    def alltoall(self, outputs, inputs, opts=None):
        self._count("alltoall")
        st = _Staging()
        outs = [st.flat(o) for o in outputs]
        ins = [st.flat(i, False) for i in inputs]
        return st.work(self.comm, self._exchange(outs, ins), list(outputs))

    def barrier(self, opts=None):
        self._count("barrier")
        return GpucommWork(self.comm.barrier(async_op=True), [])

    def send(self, tensors, dst, tag=0):
        self._count("send")
        st = _Staging()
        works = [self.comm.send(st.flat(t, False), dst, async_op=True) for t in tensors]
        return st.work(self.comm, _last(works), list(tensors))

    def recv(self, tensors, src, tag=0):
        self._count("recv")
        st = _Staging()
        works = [self.comm.recv(st.flat(t), src, async_op=True) for t in tensors]
        return st.work(self.comm, _last(works), list(tensors))

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
        return self._reduce_each(tensors, opts, opts.rootRank)

    def gather(self, output_lists, inputs, opts):
        self._count("gather")
        root = opts.rootRank
        st = _Staging()
        for k, inp in enumerate(inputs):  # only the root passes output lists
            outs = output_lists[k] if self.rank() == root else ()
            flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype) \
                if self.rank() == root else None
            self.comm.gather(None if flat is None else st.buf(flat), st.buf(inp, False), root)
            if flat is not None:
                for j, o in enumerate(outs):
                    o.copy_(flat[j * o.numel():(j + 1) * o.numel()].view_as(o))
        return GpucommWork(None, output_lists)

    def scatter(self, outputs, input_lists, opts):
        self._count("scatter")
        root = opts.rootRank
        st = _Staging()
        for k, out in enumerate(outputs):  # only the root passes input lists
            flat = torch.cat([i.reshape(-1) for i in input_lists[k]]) \
                if self.rank() == root else None
            self.comm.scatter(st.buf(out), None if flat is None else st.buf(flat, False),
                              root)
        return st.work(self.comm, None, list(outputs))


def _reducing_op(opts, dtype) -> str:
    op = _op(opts, dtype)
    if op.startswith("bitwise"):
        raise ConfigError("BAND, BOR and BXOR are served by all_reduce and reduce; "
                          "reduce_scatter takes SUM, PRODUCT, MIN, MAX and AVG")
    return op


def _rows(t: torch.Tensor, splits, p: int, what: str) -> list:
    """`t` cut along dim 0 into p flat pieces of `splits` rows (equal when none given)."""
    rows = t.shape[0] if t.dim() else 1
    if not splits:
        if rows % p:
            raise ConfigError(f"all_to_all {what} has {rows} rows, not divisible by {p} ranks: "
                              f"pass {what}_split_sizes")
        splits = [rows // p] * p
    splits = [int(x) for x in splits]
    if len(splits) != p or any(x < 0 for x in splits) or sum(splits) != rows:
        raise ConfigError(f"all_to_all {what}_split_sizes {splits} must be {p} sizes >= 0 "
                          f"adding up to the {rows} rows of the {what}")
    flat = t.reshape(-1)
    per = flat.numel() // rows if rows else 0
    out, off = [], 0
    for x in splits:
        out.append(flat[off * per:(off + x) * per])
        off += x
    return out


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
    rdzv = StoreRendezvous(store, rank, world_size, secs) if world_size > 1 else None
    transport = ShmTransport(rank, world_size, secs, rdzv)
    local = int(os.environ.get("LOCAL_RANK", rank))
    return GpucommProcessGroup(Communicator(rank, world_size, transport, secs, local,
                                            any_thread=True))


def register() -> None:
    if "GPUCOMM" not in dist.Backend._plugins:
        dist.Backend.register_backend("gpucomm", create, devices=["cpu"])
